"""Publishing: at once, pipelined, idempotent, durable, scheduled and periodic."""
