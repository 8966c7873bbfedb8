"""Publishing: everything between ``publish(...)`` and the entry written to the stream.

* :mod:`.operations`: the asyncio operations :class:`~streamq.MessageQueue` offers
  (``publish``, ``publish_many``; ``idempotency_key=`` through :mod:`.idempotency`).
* :mod:`.blocking`: :class:`~streamq.Publisher`, the same operations for threads and scripts.
* :mod:`.plan`: what both decide alike (the partition of a key, the chunks of a batch, the
  replication wait, the reply read back), without doing any I/O.
* :mod:`.coalesce` / :mod:`.coalesce_blocking`: concurrent publishes share pipelined writes
  (asyncio tasks / threads), taking turns through :mod:`.turns`.
* :mod:`.idempotency`: the server-side script that adds an entry once per producer key.
* :mod:`.periodic`: ``@mq.periodic`` publishers; :mod:`.periodic_runner` runs them in every
  process, one message per tick; :mod:`.ticks`: a tick's claim, and its entry written with
  the claim in one server-side step.

* :mod:`.checked`: around each publish, the model check of a handled type and the publish
  middlewares (:mod:`.middlewares`); :mod:`.typed`: typed publishers.
* :mod:`.scheduling`: scheduled messages' storage and scripts; :mod:`.delayed` /
  :mod:`.delayed_sync` schedule from ``publish`` and ``Publisher``; :mod:`.scheduled` lists
  and cancels them.

Nothing here is imported by :mod:`streamq.wire`. :mod:`streamq.consume` uses one module:
its mover (every running consumer moves due messages) runs :mod:`.scheduling`'s script.
"""
