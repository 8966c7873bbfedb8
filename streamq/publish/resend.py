"""Publishes sent again after an unknown outcome add their entry once.

A publish whose connection was lost, or whose reply did not come in time, may or may not
have been added: the server can have written the entry and lost only the reply. streamq
sends such a publish again by itself (once, :data:`FIRST_RETRY_DELAY` later, on a single
node; for as long as a failover lasts on a cluster or a Sentinel service,
:func:`~streamq.wire.client.ride_through`), and the second send must not add the entry a
second time.

Every entry a :class:`Producer` publishes carries the field ``pub`` = ``"<producer
ID>.<sequence number>"`` (12 random hex digits per queue or Publisher, then a counter): one
marker per ``publish``, and one per pipelined chunk of ``publish_many``, packed once for
the chunk (a marker per entry costs a fifth of ``publish_many``'s client time). It is the
entry's last field, added after the payload codec (:mod:`streamq.payload`): streamq's own
field, never compressed nor encrypted. The first send is the plain ``XADD`` it always was,
with that one short field more: nothing is asked of the server in the usual case. A send
*after* an unknown outcome is the script :data:`RESEND` instead: it looks back over the
stream's entries of the last seconds (the time since the first send plus :data:`MARGIN`,
at most :data:`SCAN_LIMIT` entries) for the marker, returns the IDs of the entries found,
and adds only the others, in order, in one atomic step. The entries of a chunk share their
marker: a pipeline is carried out in order, so those a cut pipeline had added are matched
in order with the chunk's entries by their fields (alike entries are interchangeable), the
rest added.

Why not the server's own deduplication on every write (``XADD ... IDMP`` on Redis >= 8.6, or
a script that records each entry's marker elsewhere)? It would make every publish pay for a
failure that is rare: a script per entry costs the server several times an ``XADD`` and
memory per recent entry, and IDMP remembers only ``IDMP-MAXSIZE`` (default 100) IDs per
producer, fewer than one pipelined chunk of ``publish_many`` (1,000). Looking only when a
send is repeated keeps the usual path a plain ``XADD`` (one field of about 20 bytes more)
and works on every server streamq supports (Valkey, Redis >= 7.0).
``publish(..., idempotency_key=)`` keeps using IDMP or its script: it deduplicates across
calls, which a marker per call cannot.

The limits of looking back: an entry added and then followed by more than
:data:`SCAN_LIMIT` entries, or trimmed away, before the second send looks, is added again;
and a first write still on its way to the server when the second send is checked (a reply
that timed out while the server was stalled, the old connection's command read only later)
can land after the check. A lost connection, a server restart and a failover leave no such
write behind.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import anyio

from ..errors import ServerUnavailableError
from ..message import PUBLISH_MARKER
from ..wire.client import ride_through, ride_through_sync
from ..wire.routing import Deployment
from ..wire.routing_sync import SyncDeployment

T = TypeVar("T")
Fields = dict[bytes | str, bytes | str]

MARGIN = 10.0  # seconds looked back beyond the time since the first send (clock steps)
SCAN_LIMIT = 50_000  # entries looked at, at most, by one resend
FIRST_RETRY_DELAY = 0.05  # seconds before a publish is sent again (as ride_through's backoff)

# KEYS: stream. ARGV: look back (ms), scan limit, "NOMKSTREAM" or "", the marker's field
# name, the marker, then per entry: its field count n (names and values), its n fields
# (without the marker). The entries found with the marker are matched in order with the
# entries sent (a pipeline is carried out in order: those added are a subsequence of the
# chunk, alike entries interchangeable); each entry not matched is added, in order, its
# marker last (where publish writes it).
# Returns each entry's ID (found or added); nil where NOMKSTREAM found no stream.
RESEND = """
local t = redis.call('TIME')
local since = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local field, marker, entries = ARGV[4], ARGV[5], {}
local i = 6
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  entries[#entries + 1] = {i + 1, i + n}
  i = i + 1 + n
end
local found, left, upper = {}, tonumber(ARGV[2]), '+'
while left > 0 do
  local want = math.min(left, 1000)
  local batch = redis.call('XREVRANGE', KEYS[1], upper,
                           string.format('%d-0', math.max(since, 0)), 'COUNT', want)
  for _, entry in ipairs(batch) do
    local fields = entry[2]
    for j = 1, #fields, 2 do
      if fields[j] == field then
        if fields[j + 1] == marker then table.insert(found, 1, entry) end
        break
      end
    end
  end
  if #batch < want then break end
  left = left - #batch
  upper = '(' .. batch[#batch][1]
end
local function same(fields, first, last)
  local k = first
  for j = 1, #fields, 2 do
    if fields[j] ~= field then
      if k > last or fields[j] ~= ARGV[k] or fields[j + 1] ~= ARGV[k + 1] then return false end
      k = k + 2
    end
  end
  return k > last
end
local head = ARGV[3] == 'NOMKSTREAM' and {KEYS[1], 'NOMKSTREAM', '*'} or {KEYS[1], '*'}
local function add(first, last)
  local args = {unpack(head)}
  for j = first, last do args[#args + 1] = ARGV[j] end
  args[#args + 1] = field
  args[#args + 1] = marker
  return redis.call('XADD', unpack(args))
end
local ids, f = {}, 1
for k, entry in ipairs(entries) do
  if found[f] and same(found[f][2], entry[1], entry[2]) then
    ids[k] = found[f][1]
    f = f + 1
  else
    ids[k] = add(entry[1], entry[2])
  end
end
return ids
"""


class Producer:
    """Marks what one queue or Publisher publishes: ``pub`` = ``"<id>.<sequence>"``, one
    per ``publish`` and one per pipelined chunk of ``publish_many``.

    :attr:`markers` yields them as bytes, as they are packed: a publish takes its marker
    with one ``next()``, nothing encoded per publish (thread-safe: ``itertools.count``
    and ``map`` advance in one step under the GIL).
    """

    __slots__ = ("id", "markers")

    def __init__(self) -> None:
        self.id = secrets.token_hex(6)
        self.markers: Iterator[bytes] = map(f"{self.id}.%d".encode().__mod__, itertools.count(1))

    def marker(self) -> bytes:
        """A new marker."""
        return next(self.markers)


def resend_command(
    stream: str, entries: Sequence[Fields], marker: bytes, first_sent: float, *, make_stream: bool
) -> list[Any]:
    """The ``EVAL`` of :data:`RESEND` for ``entries`` sent with ``marker`` first at
    ``first_sent`` (``time.monotonic()``); one reply: their IDs."""
    lookback = int((time.monotonic() - first_sent + MARGIN) * 1000)
    flag = "" if make_stream else "NOMKSTREAM"
    args: list[Any] = [lookback, SCAN_LIMIT, flag, PUBLISH_MARKER, marker]
    for fields in entries:
        flat = [item for pair in fields.items() if pair[0] != PUBLISH_MARKER for item in pair]
        args += [len(flat), *flat]
    return ["EVAL", RESEND, 1, stream, *args]


def resend_one(stream: str, fields: Fields, first_sent: float, *, make_stream: bool) -> list[Any]:
    """:func:`resend_command` for the entry of one ``publish`` (``fields`` hold its marker)."""
    marker = fields[PUBLISH_MARKER]
    marker = marker if isinstance(marker, bytes) else marker.encode()
    return resend_command(stream, [fields], marker, first_sent, make_stream=make_stream)


class Sends:
    """The sends of one write: the first as usual, any later one checked. ``checked`` tells
    which the next is; :meth:`sending` records the time of the first."""

    __slots__ = ("first_sent",)

    def __init__(self, first_sent: float | None = None) -> None:
        self.first_sent = first_sent

    @property
    def checked(self) -> bool:
        return self.first_sent is not None

    def sending(self) -> None:
        if self.first_sent is None:
            self.first_sent = time.monotonic()


async def send_until_known(
    deployment: Deployment, send: Callable[[], Awaitable[T]], sends: Sends
) -> T:
    """``send()`` (unless ``sends`` says a first send failed already); after a failure that
    may have applied it, ``send()`` again (which then checks) once after
    :data:`FIRST_RETRY_DELAY`, and on a cluster or Sentinel while the failover lasts
    (:func:`ride_through`). Raises the last failure."""
    if not sends.checked:
        try:
            return await send()
        except ServerUnavailableError:
            pass
    await anyio.sleep(FIRST_RETRY_DELAY)
    return await ride_through(deployment, send)


def send_until_known_sync(deployment: SyncDeployment, send: Callable[[], T], sends: Sends) -> T:
    """:func:`send_until_known` for blocking code."""
    if not sends.checked:
        try:
            return send()
        except ServerUnavailableError:
            pass
    time.sleep(FIRST_RETRY_DELAY)
    return ride_through_sync(deployment, send)
