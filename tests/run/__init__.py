"""Tests of streamq/run and of a queue's lifecycle in a process: streamq run, workers, App, health and metrics."""
