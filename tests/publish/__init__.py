"""Tests of streamq/publish: publishing with and without asyncio, coalescing, idempotency, durability, scheduled and periodic messages."""
