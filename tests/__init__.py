"""streamq's test suite: one folder per part of the package (see tests/README.md)."""
