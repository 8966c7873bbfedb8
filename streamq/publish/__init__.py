"""Publishing: everything between ``publish(...)`` and the entry written to the stream.

* :mod:`.operations`: the asyncio operations :class:`~streamq.MessageQueue` offers
  (``publish``, ``publish_many``, ``publish_idempotent``).
* :mod:`.blocking`: :class:`~streamq.Publisher`, the same operations for threads and scripts.
* :mod:`.plan`: what both decide alike (the partition of a key, the chunks of a batch, the
  replication wait, the reply read back), without doing any I/O.
* :mod:`.coalesce` / :mod:`.coalesce_blocking`: concurrent publishes share pipelined writes
  (asyncio tasks / threads), taking turns through :mod:`.turns`.
* :mod:`.idempotency`: the server-side script that adds an entry once per producer key.
* :mod:`.periodic`: ``@mq.periodic`` publishers; :mod:`.periodic_runner` runs them in every
  process, one message per tick; :mod:`.ticks`: a tick's claim, and its entry written with
  the claim in one server-side step.

Nothing here is imported by :mod:`streamq.wire` or :mod:`streamq.consume`.
"""
