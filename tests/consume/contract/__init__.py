"""The consumer engine's contract, one suite run against every mode (conftest.py)."""
