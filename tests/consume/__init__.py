"""Tests of streamq/consume: reading, routing, handling, acking, retries, dead letters, ordered and fan-out consumption."""
