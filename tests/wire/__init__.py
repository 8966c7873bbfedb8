"""Tests of streamq/wire: the Redis boundary (wire format, errors, connections, clusters, Sentinel, TLS, ACLs, stalls)."""
