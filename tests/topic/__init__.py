"""Tests of streamq/topic: topic operations (control, cleanup, partitions, termination, topic_info)."""
