"""How long a reply may take before its connection counts as lost (a server that stopped
answering), for every client streamq makes: plain, cluster and Sentinel ones."""

from __future__ import annotations

# Set, not left to redis-py: 5 s since redis-py 8, none before (a plain or cluster URL's
# own ``socket_timeout=`` option wins). A command that waits on the server by design (a
# blocking read, WAIT) is given its own wait on top: streamq.wire.reading.reply_timeout().
SOCKET_TIMEOUT = 5.0


# How long a caller waits for a free connection of a client's pool before it fails.
POOL_WAIT = 30.0
