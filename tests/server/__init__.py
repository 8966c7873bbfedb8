"""Tests of streamq/server: the embedded servers (private, shared, cluster, Sentinel)."""
