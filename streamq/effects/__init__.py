"""Effects applied once per entry, in stores outside Redis.

* :mod:`streamq.effects.postgres`: ``async with once(conn, msg) as first:`` inside your own
  PostgreSQL transaction (extra ``[postgres]``).
"""
