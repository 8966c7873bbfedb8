"""The engine's waits, one definition each, whatever the mode."""

from __future__ import annotations

# a read that failed because the server is away: the first wait, and the longest
READ_ERROR_BACKOFF = 0.5
MAX_READ_ERROR_BACKOFF = 5.0
# how long a stopping consumer (or a partition given up) waits for its last acks to go out
ACK_FLUSH_TIMEOUT = 10.0
# after a read found no group while the group and stream exist (a failover, a migration)
GONE_CHECK_BACKOFF = 0.5
# how often a waiting key looks at its operator records (stopped, halted) again
POLL_INTERVAL = 0.5
