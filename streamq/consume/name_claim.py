"""One live process per consumer name in a group: the name's claim in Redis.

Two processes consuming under one name share one pending list (each recovers and acks
the other's entries) and, in ordered mode, one membership, so their leases flap. A queue
that consumes in a group therefore claims its name when it opens: a string
``streamq:{<topic>}:alive:<len(group)>:<group>:<consumer>`` (on the topic's cluster slot;
the group's length keeps every pair of names apart) holding the process's token
(``<pid>@<host>#<random>``) and a renewal count, expiring ``CLAIM_TTL`` after its last
renewal. The running queue renews it every ``RENEW_EVERY`` (one small script call,
whatever the traffic: nothing per message) and deletes it when it closes.

Names stay stable: a worker restarted after a crash (SIGKILL, a lost machine) takes its
name back once the dead process's claim runs out, and recovers its own pending entries.

Opening under a name another token holds watches the claim: a holder that renews it (the
value changes) is alive, and the open is refused at once with
:class:`~streamq.errors.ConsumerNameTakenError`; a claim that expires was a dead
process's, and is taken. A claim that neither changes nor expires within ``CLAIM_TTL``
is not one streamq writes (no expiry): it is logged with its key and replaced. Fan-out
queues (no group) claim nothing: every instance reads every entry, nothing is shared
under a name.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING

import anyio
import redis.asyncio as aioredis

from .._text import cut, one_line
from ..errors import ConsumerNameTakenError, RedisFailure
from ..wire.keys import Keys
from ..wire.replies import text

if TYPE_CHECKING:
    from .lifecycle import Engine

log = logging.getLogger(__name__)

CLAIM_TTL = 5.0  # seconds a claim outlives its last renewal
RENEW_EVERY = 1.0  # a running queue's renewals; a live holder is seen within about this
WATCH_EVERY = 0.2  # how often a claim held by another token is looked at while opening
LOST_REASON = "consumer_name_taken"

# KEYS: the claim. ARGV: token, expiry (ms), the value to write (token and renewal count),
# a value to displace (a claim found stale; '' for none). Writes the claim and returns
# nil, or returns the value of another token's claim and writes nothing.
CLAIM = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[4] and string.sub(held, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return held
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
return false
"""

# KEYS: the claim. ARGV: token. Deletes the claim if it is this token's.
RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def token_prefix() -> str:
    """How this process's tokens begin: ``<pid>@<host>#``."""
    return f"{os.getpid()}@{socket.gethostname()}#"


class NameClaim:
    """The claim of one queue on its consumer name in its group of ``topic``."""

    def __init__(self, topic: str, group: str) -> None:
        self.topic, self.group = topic, group
        self.token = token_prefix() + secrets.token_hex(4)
        self.consumer: str | None = None  # the name claimed, once taken
        self._client: aioredis.Redis | None = None
        self._renewals = 0

    def _key(self, consumer: str) -> str:
        return Keys(self.topic).consumer_claim(self.group, consumer)

    async def _claim(self, client: aioredis.Redis, consumer: str, displace: str = "") -> str | None:
        """Write this token's claim; or the value of another token's claim."""
        self._renewals += 1
        value = f"{self.token} {self._renewals}"
        args = [self.token, int(CLAIM_TTL * 1000), value, displace]
        held = await client.register_script(CLAIM)(keys=[self._key(consumer)], args=args)
        return None if held is None else text(held)

    async def take(self, client: aioredis.Redis, consumer: str) -> None:
        """Claim ``consumer``; wait out the claim of a process that died (at most about
        ``CLAIM_TTL``). Raises ConsumerNameTakenError if a live process holds it."""
        displace, last, first_seen = "", None, time.monotonic()
        while (held := await self._claim(client, consumer, displace)) is not None:
            if last is not None and held != last:  # renewed, or taken by another: alive
                raise taken(self.topic, self.group, consumer, held)
            if last is None:
                log.info("consumer name %r of group %r is claimed by %s: waiting to see "
                         "whether it is alive (at most %.0fs)", consumer, self.group,
                         holder(held), CLAIM_TTL)  # fmt: skip
            elif time.monotonic() - first_seen > CLAIM_TTL + RENEW_EVERY:
                log.warning("the claim %s (%s) neither changes nor expires: it is not one "
                            "streamq writes; replacing it", self._key(consumer),
                            cut(held, 80))  # fmt: skip
                displace = held
                continue
            last = held
            await anyio.sleep(WATCH_EVERY)
        self._client, self.consumer = client, consumer

    async def keep(self, consumer: Engine) -> None:
        """Renew the claim every ``RENEW_EVERY`` while the queue runs (at once first: the
        queue may have been opened a while ago). If another process took the name
        meanwhile (this one stalled longer than ``CLAIM_TTL``), stop ``consumer`` with
        ConsumerNameTakenError as its error."""
        client, name = self._client, self.consumer
        if client is None or name is None:
            return
        while True:
            try:
                held = await self._claim(client, name)
            except RedisFailure as e:  # the server away: renewed again once it is back
                log.debug("could not renew the claim on consumer name %r: %s", name, e)
                held = None
            if held is not None:
                error = taken(self.topic, self.group, name, held)
                log.error("consumer %s stops: %s", name, error)
                consumer.error = consumer.error or error
                consumer.request_stop(LOST_REASON)
                return
            await anyio.sleep(RENEW_EVERY)

    async def release(self) -> None:
        """Give the name back (best effort: unreachable, the claim runs out by itself)."""
        client, name, self._client, self.consumer = self._client, self.consumer, None, None
        if client is None or name is None:
            return
        with anyio.move_on_after(RENEW_EVERY):
            try:
                await client.register_script(RELEASE)(keys=[self._key(name)], args=[self.token])
            except RedisFailure as e:
                log.debug("could not give back the consumer name %r: %s", name, e)


async def held_by_live_processes(
    client: aioredis.Redis, topic: str, group: str, names: list[str]
) -> dict[str, str]:
    """Which of ``names`` live processes hold in ``group``, each with its holder described:
    the claims found are watched until each is renewed (alive) or runs out (its process
    died), at most about ``CLAIM_TTL``; nothing is claimed."""
    keys = {name: Keys(topic).consumer_claim(group, name) for name in names}
    watched = {name: await client.get(key) for name, key in keys.items()}
    watched = {name: value for name, value in watched.items() if value is not None}
    live: dict[str, str] = {}
    deadline = time.monotonic() + CLAIM_TTL + RENEW_EVERY
    while watched and time.monotonic() < deadline:
        await anyio.sleep(WATCH_EVERY)
        for name, value in list(watched.items()):
            now = await client.get(keys[name])
            if now is None or now != value:
                del watched[name]
            if now is not None and now != value:
                live[name] = holder(text(now))
    return live


def holder(value: str) -> str:
    """A claim's process as people read it: ``pid 1234 on host``."""
    token = value.split(" ", 1)[0]
    pid, at, rest = token.partition("@")
    host = rest.rpartition("#")[0]
    if not (at and pid.isdigit() and host):
        return f"an unknown holder: {cut(value, 80)!r}"
    return f"pid {pid} on {one_line(host)}"


def taken(topic: str, group: str, consumer: str, held: str) -> ConsumerNameTakenError:
    return ConsumerNameTakenError(
        f"consumer name {consumer!r} of group {group!r} on {topic!r} is in use by another "
        f"live process ({holder(held)}): give this one a name of its own "
        "(MessageQueue(consumer=...); streamq run --name NAME names its workers NAME-<slot>)",
        consumer=consumer, group=group, stream=topic,
    )  # fmt: skip
