"""Consuming: the read loop, workers, dispatch, retries, claiming and acknowledgements."""
