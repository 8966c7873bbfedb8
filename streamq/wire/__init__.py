"""The Redis boundary: clients, hand-packed RESP, key names, scripts and permissions."""
