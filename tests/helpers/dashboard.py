"""Helpers shared by the dashboard's HTTP and browser tests: real dead letters made by a
real consumer, and reading tables and figures out of the served HTML."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from html.parser import HTMLParser
from typing import Any, TypeVar

import anyio
import httpx
import redis
from starlette.applications import Starlette

from streamq import Keyring, Message, MessageQueue, Publisher, Reject, RetryPolicy, StartFrom
from streamq.dashboard import create_app
from streamq.dashboard.app import LOOPBACK_HOSTS
from streamq.dashboard.samples import SampleStore
from streamq.dashboard.server import bind, url_of, uvicorn_server
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect
from tests.helpers.clients import each_master
from tests.helpers.waiting import wait_for

T = TypeVar("T")
TOKEN = "test-write-token-0123456789"


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) in a thread; yield its URL."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn_server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # a poll: uvicorn says when its lifespan has started
        assert thread.is_alive() and time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.01)
    try:
        yield url_of(sock).rstrip("/")
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def dashboard_client(
    url: str, token: str | None = TOKEN, keyring: Keyring | None = None
) -> Iterator[httpx.Client]:
    """An HTTP client of a dashboard over ``url`` (served by uvicorn on loopback, Host
    checked), not logged in, decrypting with ``keyring`` if given. Samples for the chart
    are taken at every poll."""
    app = create_app(url, token=token, allowed_hosts=LOOPBACK_HOSTS, keyring=keyring)
    app.state.samples = SampleStore(min_interval=0)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        yield client


def log_in(web: httpx.Client) -> str:
    """Log ``web`` in with the token; return the session's CSRF token."""
    response = web.post("/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303, response.text
    return csrf_of(web.get("/").text)


def publish(url: str, stream: str, n: int, message_type: str = "job") -> list[str]:
    with Publisher(url, stream=stream) as publisher:
        return publisher.publish_many(message_type, list(range(n)))


def topic_with_pending(url: str, r: redis.Redis, stream: str) -> list[str]:
    """5 entries; group ``billing`` read 3 of them (consumer c1: 2, c2: 1); ``audit`` none."""
    ids = publish(url, stream, 5)
    r.xgroup_create(stream, "billing", id="0")
    r.xgroup_create(stream, "audit", id="0")
    r.xreadgroup("billing", "c1", {stream: ">"}, count=2)
    r.xreadgroup("billing", "c2", {stream: ">"}, count=1)
    return ids


def make_dead_letters(
    url: str,
    stream: str,
    items: list[Any],
    *,
    message_type: str = "job",
    group: str = "workers",
    reject: bool = False,
    foreign: list[dict[str, str]] | None = None,
    partitions: int = 1,
    **payloads: Any,
) -> None:
    """Publish ``items`` and let a real consumer of ``group`` fail on each once: every one
    ends as a dead letter (ValueError with its traceback, or Reject). ``foreign``: raw
    entries added first, as another client could write them; each must be dead-lettered
    too (as malformed). ``partitions``: of a partitioned topic (items go round).
    ``payloads``: the queue's payload settings (``compression=``, ``encryption=``...)."""
    foreign = foreign or []

    async def run() -> None:
        mq = MessageQueue(
            url, stream=stream, group=group, consumer="dead-letterer", start=StartFrom.EARLIEST,
            config=TEST_TIMINGS, retry=RetryPolicy(attempts=1, backoff=0, jitter=0, max_deliveries=1),
            partitions=partitions, **payloads,
        )  # fmt: skip

        @mq.handler(message_type)
        async def fail(msg: Message[Any]) -> None:
            if reject:
                raise Reject(f"rejected {msg.data!r}")
            raise ValueError(f"cannot handle {msg.data!r}")

        async with mq:
            expected = (await mq.topic_info()).dead_letters + len(items) + len(foreign)
            for fields in foreign:
                await mq.client.xadd(stream, fields)
            await mq.publish_many(message_type, items)
            async with mq.running():

                async def all_dead() -> bool:
                    return (await mq.topic_info()).dead_letters >= expected

                await wait_for(all_dead, what=f"{expected} dead letters")

    in_own_thread(run)


def in_own_thread(work: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(work)`` in a thread of its own: the caller's thread may run an event
    loop (Playwright's)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, work).result()


def partitioned_topic(
    url: str, topic: str, *, partitions: int = 3, entries: int = 9, read: int = 1
) -> list[str]:
    """A topic of ``partitions`` partitions with ``entries`` entries published in turn
    (the same number in each) and group ``billing``; consumer ``c1`` read ``read`` entries
    of each partition (pending). Return the IDs (``"<i>:<ms>-<seq>"``) as published."""

    async def run() -> list[str]:
        mq = MessageQueue(
            url, stream=topic, group="billing", consumer="c1", start=StartFrom.EARLIEST,
            partitions=partitions,
        )  # fmt: skip
        async with mq:
            ids = await mq.publish_many("job", list(range(entries)))
            if read:
                deployment = connect(url)
                try:
                    for stream in mq.streams:
                        await deployment.client_for(stream).xreadgroup(
                            "billing", "c1", {stream: ">"}, count=read
                        )
                finally:
                    await deployment.aclose()
            return ids

    return in_own_thread(run)


def forget_topic(url: str, topic: str, partitions: int) -> None:
    """Delete a partitioned topic's streams, their keys and the topic's record."""
    for stream in (*partition_streams(topic, partitions), topic):
        delete_stream_keys(url, stream)


def acl_on_every_master(url: str, *args: str) -> None:
    """``ACL args...`` on every master: users are kept per node, and a dashboard on a
    cluster connects to each (the topics list scans every master)."""
    for node in each_master(url):
        with node:
            node.execute_command("ACL", *args)


class _Tables(HTMLParser):
    """Cell texts of every table with an id, and the text of every element with an id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.texts: dict[str, str] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._open_ids: list[tuple[str, str, list[str]]] = []  # (tag, id, text parts)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element_id = dict(attrs).get("id")
        if tag == "table" and element_id:
            self._table = element_id
            self.tables[element_id] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        if element_id and tag not in ("input", "meta", "link", "br", "img"):
            self._open_ids.append((tag, element_id, []))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None
        if self._open_ids and self._open_ids[-1][0] == tag:
            _, element_id, parts = self._open_ids.pop()
            self.texts[element_id] = " ".join("".join(parts).split())

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        for _, _, parts in self._open_ids:
            parts.append(data)


def parse(html: str) -> _Tables:
    parser = _Tables()
    parser.feed(html)
    return parser


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(html: str) -> str:
    """The text a reader sees (attribute values, such as a form's hidden fields, left out)."""
    parser = _Text()
    parser.feed(html)
    return "".join(parser.parts)


def table(html: str, table_id: str) -> list[list[str]]:
    """The rows (header row first) of the table ``table_id``, as cell texts."""
    tables = parse(html).tables
    assert table_id in tables, f"no table #{table_id} in the page:\n{html[:3000]}"
    return tables[table_id]


def row_starting(html: str, table_id: str, first_cell: str) -> list[str]:
    for row in table(html, table_id):
        if row and row[0] == first_cell:
            return row
    raise AssertionError(f"no row {first_cell!r} in #{table_id}: {table(html, table_id)}")


def text_of(html: str, element_id: str) -> str:
    texts = parse(html).texts
    assert element_id in texts, f"no element #{element_id} in the page:\n{html[:3000]}"
    return texts[element_id]


CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = CSRF_FIELD.search(html)
    assert match, f"no CSRF field in the page (not logged in?):\n{html[:2000]}"
    return match.group(1)
