"""Which streams are topics: the topics page's listing.

A topic is a stream with at least one consumer group. streamq's own keys
(``streamq:{<stream>}:...``, the dead-letter stream among them) are streams too and are
skipped, and so are streams whose names hold braces (another application's hash-tagged
stream, say: streamq refuses such a topic name, since on a cluster its keys would lie on
other slots than the stream). A partitioned topic ``T`` is stored as the streams ``T:p<i>.<s>``
(:mod:`streamq.topic.partitions`): a stream so named is taken as a partition only if
``streamq:{T}:partitions`` records a count whose partition ``i`` is that very name, and the
topic is listed once, with the totals of its partitions. A topic with priorities stores
each level but the default one as ``<partition stream>:q<L>``
(:mod:`streamq.wire.partition_names`): a stream so named is taken as a level only if the
topic's record counts that level and names that very stream, and the topic is listed once,
with the totals of every level. Figures come from the same operations ``MessageQueue``
offers, through :class:`~.view.TopicView`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import PermissionDeniedError, RedisFailure, ServerUnavailableError
from ..topic.admin import TopicInfo
from ..topic.partitions import partition_streams, recorded_partitions, recorded_priorities
from ..wire.routing import Deployment
from .view import TopicView

T = TypeVar("T")
log = logging.getLogger(__name__)

OWN_KEYS = b"streamq:{"
MAX_TOPICS = 500
MAX_FILTER = 200  # characters of a name filter that are looked at
SCAN_BATCH = 1000
PARTITION_NAME = re.compile(r"(?P<topic>.+):p(?P<index>[0-9]+)\.[0-9]+", re.DOTALL)
LEVEL_NAME = re.compile(r"(?P<stream>.+):q[0-9]", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ListedTopic:
    """A topic of the listing: its figures, partition count, number of priority levels
    and the nodes serving it."""

    info: TopicInfo
    partitions: int
    nodes: list[str]
    priorities: int = 1


@dataclass(frozen=True, slots=True)
class TopicList:
    topics: list[ListedTopic]
    truncated: bool  # more topics exist than were listed (the first ones by name are)
    # streams whose names are not UTF-8 (not addressable from a page) or hold braces (a
    # cluster hash tag: streamq refuses such a topic name, its keys would be on other slots)
    skipped: int
    hidden: int = 0  # streams the server's ACL does not let this user read
    # topics whose figures the server refused (an error of theirs, not an outage): name and
    # error; listed apart, so that one topic's damage does not hide the others
    unreadable: list[tuple[str, str]] = field(default_factory=list)


async def list_topics(
    deployment: Deployment, limit: int = MAX_TOPICS, match: str = ""
) -> TopicList:
    """Every topic with a consumer group whose name holds ``match`` (in any case; ""
    matches every one), sorted by name; on a cluster the streams of every master. Past
    ``limit`` topics, the first ``limit`` by name (``truncated``: a filter reaches the
    others)."""
    names, skipped = await _candidate_names(deployment, match.casefold())
    finder = _TopicFinder(deployment)
    topics: list[ListedTopic] = []
    unreadable: list[tuple[str, str]] = []
    hidden, truncated = 0, False
    for name in names:
        try:
            view = await finder.topic_of(name)
            if view is None:  # a partition of a topic met already
                continue
            info = await unless_forbidden(view.admin.topic_info())
        except ServerUnavailableError:
            raise  # the page says the server is away
        except RedisFailure as e:  # this topic's own: the others are listed
            log.warning("topic %r not listed: %s", name, e)
            unreadable.append((name, str(e)))
            continue
        if info is None:
            hidden += 1
            continue
        if not info.groups:
            continue
        if len(topics) == limit:
            truncated = True
            break
        shape = view.topic
        topics.append(ListedTopic(info, shape.partitions, view.nodes(), shape.priorities))
    topics.sort(key=lambda t: t.info.stream)
    return TopicList(topics, truncated, skipped, hidden, sorted(unreadable))


async def _candidate_names(deployment: Deployment, match: str) -> tuple[list[str], int]:
    """The names of the streams that may be (a stream of) a topic whose name holds
    ``match`` (casefolded), in the order of the topic names they suggest; and how many
    streams were skipped (names not UTF-8, or holding braces)."""
    names: list[str] = []
    skipped = 0
    async for raw in _every_stream(deployment):
        if raw.startswith(OWN_KEYS):
            continue
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if "{" in name or "}" in name:  # no streamq topic: its keys would hash elsewhere
            skipped += 1
            continue
        if match in name.casefold():
            names.append(name)
    names.sort(key=lambda name: (_topic_named_by(name), name))
    return names, skipped


def _topic_named_by(name: str) -> str:
    """The topic a stream's name suggests it belongs to (a partition's or a priority
    level's topic, else itself): the order the listing meets the names in."""
    level = LEVEL_NAME.fullmatch(name)
    stream = level["stream"] if level else name
    partition = PARTITION_NAME.fullmatch(stream)
    return partition["topic"] if partition else stream


class _TopicFinder:
    """The topic of each stream name met: the stream itself, or the topic it is a
    partition or a priority level of (each such topic once)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self._recorded: dict[str, tuple[int, int]] = {}
        self._met: set[str] = set()

    async def topic_of(self, name: str) -> TopicView | None:
        """The view of ``name``'s topic; None if it is a topic of several streams met
        before."""
        view = await self._level_topic_of(name) or await self._topic_named(name)
        if not view.partitioned:
            return view
        if view.stream in self._met:
            return None
        self._met.add(view.stream)
        return view

    async def _level_topic_of(self, name: str) -> TopicView | None:
        """The topic ``name`` is a non-default priority level of, if its record says so."""
        match = LEVEL_NAME.fullmatch(name)
        if match is None:
            return None
        view = await self._topic_named(match["stream"])
        return view if name in view.topic.streams else None  # else merely named like one

    async def _topic_named(self, name: str) -> TopicView:
        """The topic whose default level's stream is ``name``: the partitioned topic it is
        a partition of, else ``name`` itself; with the levels recorded for the topic."""
        match = PARTITION_NAME.fullmatch(name)
        if match is not None:
            topic, index = match["topic"], int(match["index"])
            partitions, levels = await self._shape_of(topic)
            if index < partitions and partition_streams(topic, partitions)[index] == name:
                return TopicView(self.deployment, topic, partitions, priorities=levels)
        partitions, levels = await self._shape_of(name)
        if partitions > 1:  # a record beside a stream of the topic's own name: not a topic's
            levels = 1
        return TopicView(self.deployment, name, priorities=levels)

    async def _shape_of(self, topic: str) -> tuple[int, int]:
        """The partition count and levels recorded for ``topic`` (1, 1: none, or hidden)."""
        if topic not in self._recorded:
            client = self.deployment.client_for(topic)
            partitions = await unless_forbidden(recorded_partitions(client, topic))
            levels = await unless_forbidden(recorded_priorities(client, topic))
            self._recorded[topic] = (partitions or 1, levels or 1)
        return self._recorded[topic]


async def _every_stream(deployment: Deployment) -> AsyncIterator[bytes]:
    for address in await deployment.masters():
        node = deployment.client_at(address)
        async for raw in node.scan_iter(count=SCAN_BATCH, _type="stream"):
            yield raw


async def unless_forbidden(work: Awaitable[T]) -> T | None:
    """What ``work`` gives, or None if the ACL lets this user see a name (SCAN lists every
    key) but not read it: an operator limited to some streams lists those."""
    try:
        return await work
    except PermissionDeniedError:
        return None


def total_lag(info: TopicInfo) -> int | None:
    """The lag of all groups together; None if a group's lag is unknown to the server."""
    lags = [g.lag for g in info.groups]
    return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)
