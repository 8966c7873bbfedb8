"""Tests of streamq/cli: the streamq command as a shell user runs it."""
