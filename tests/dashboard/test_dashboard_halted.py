"""The dashboard and ordered mode: the keys halted by a real ordered consumer listed per
group, released only with the write token (and then the key goes on); each partition's
owner on the topic page while ordered consumers run, nothing extra otherwise."""

from __future__ import annotations

import html
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq import Message, MessageQueue, RetryPolicy, StartFrom
from streamq.dashboard.names import encoded
from streamq.dashboard.paging import HALTED_PAGE
from streamq.testing import TEST_TIMINGS
from streamq.topic.halted import halted_key, record_field
from streamq.topic.partitions import partition_streams
from tests.conftest import wait_for
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import TOKEN, forget_topic, in_own_thread, log_in, table, visible_text

Web = httpx.Client
PARTITIONS = 2
LEASE = 2.0
RELEASE = "/topic/halted/release"
KEY = "a\x1b[1m"  # a key with an escape sequence: shown escaped, sent back encoded
SHOWN_KEY = "a\\x1b[1m"


def ordered_queue(url: str, topic: str, partitions: int = PARTITIONS) -> MessageQueue:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    return MessageQueue(
        url, stream=topic, group="billing", consumer="owner", partitions=partitions,
        ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt",
        start=StartFrom.EARLIEST, config=TEST_TIMINGS,
    )  # fmt: skip


@pytest.fixture
def topic(redis_url: str, stream: str) -> Iterator[str]:
    """A partitioned topic name; its streams and record are deleted after the test."""
    yield stream
    forget_topic(redis_url, stream, PARTITIONS)


@contextmanager
def ordered_consumer(url: str, topic: str, poison: set[str | None]) -> Iterator[list[Any]]:
    """An ordered consumer of group ``billing`` running in a thread of its own while the
    block runs (keys in ``poison`` fail); yield what it handled."""
    handled: list[Any] = []
    stop = threading.Event()

    async def run() -> None:
        mq = ordered_queue(url, topic)

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            if msg.key in poison:
                raise RuntimeError("poison \x1b[2J")
            handled.append((msg.key, msg.data["n"]))

        async with mq, mq.running():
            await anyio.to_thread.run_sync(stop.wait)

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(anyio.run, run)
        try:
            yield handled
        finally:
            stop.set()
            running.result(timeout=30)


def until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)


def publish_two(url: str, topic: str) -> None:
    async def run() -> None:
        async with ordered_queue(url, topic) as mq:
            for n in range(2):
                await mq.publish("job", {"n": n}, key=KEY)
            await mq.publish("job", {"n": 0})

    in_own_thread(run)


def test_halted_keys_are_listed_and_released_with_the_token(
    web: Web, redis_url: str, topic: str
) -> None:
    publish_two(redis_url, topic)
    poison: set[str | None] = {KEY, None}
    with ordered_consumer(redis_url, topic, poison) as handled:
        until(
            lambda: len(halted_values(redis_url, topic)) == 2, "key a and the keyless lane halted"
        )
        poison.clear()  # the operator fixed the handler; the key is released next
        release_with_the_token(web, redis_url, topic)
        until(lambda: sorted(handled) == [(KEY, 0), (KEY, 1)], "key a retried and going on")
        until(lambda: halted_values(redis_url, topic) == [], "no key halted")
    assert "No halted keys." in web.get("/topic/halted", params={"stream": topic}).text


def release_with_the_token(web: Web, redis_url: str, topic: str) -> None:
    page = web.get("/topic/halted", params={"stream": topic})
    assert page.status_code == 200 and "Halted keys" in page.text
    rows = table(page.text, "halted")
    assert rows[0][:6] == ["Group", "Partition", "Key", "Entry ID", "Reason", "Release asked"]
    by_key = {row[2]: row for row in rows[1:]}
    assert set(by_key) == {SHOWN_KEY, "(keyless)"}, rows
    for row in by_key.values():
        assert row[0] == "billing" and row[5] == "-", row
        assert row[3].startswith(f"{row[1]}:"), f"the entry ID names no partition: {row}"
        assert "poison \\x1b[2J" in row[4] and "\x1b" not in page.text, row
    assert RELEASE not in page.text, "release buttons shown without the write token"

    form = {"stream": topic, "group": "billing", "key": KEY, "action": "retry"}
    assert web.post(RELEASE, data=form).status_code == 403
    csrf = log_in(web)
    assert web.post(RELEASE, data=form).status_code == 403, "released without the CSRF token"
    assert all(json.loads(v).get("action") is None for v in halted_values(redis_url, topic))

    text = web.get("/topic/halted", params={"stream": topic}).text
    assert text.count('action="/topic/halted/release"') == 4  # retry and skip, two keys
    assert f'name="key64" value="{encoded(KEY)}"' in text
    encoded_form = {"csrf": csrf, "stream64": encoded(topic), "group64": encoded("billing"),
                    "key64": encoded(KEY), "action": "retry"}  # fmt: skip
    done = web.post(RELEASE, data=encoded_form)
    assert done.status_code == 303, done.text
    after = web.get(done.headers["location"]).text
    assert "asked to release key" in after
    plain_form = {"csrf": csrf, "stream": topic, "group": "billing", "keyless": "1",
                  "action": "skip"}  # fmt: skip
    assert web.post(RELEASE, data=plain_form).status_code == 303


def halted_values(url: str, topic: str) -> list[bytes]:
    """The halted records of every partition, each read on the node serving it."""
    values: list[bytes] = []
    for stream in partition_streams(topic, PARTITIONS):
        with sync_client(url, stream) as client:
            values.extend(client.hvals(halted_key(stream)))
    return values


def test_a_release_asked_shows_until_the_owner_acts_and_bad_forms_say_so(
    web: Web, redis_url: str, topic: str
) -> None:
    """No consumer runs: a release asked waits in the record (the next owner acts on it)."""
    publish_two(redis_url, topic)
    stream = partition_streams(topic, PARTITIONS)[1]
    record = {"id": "1-0", "reason": "failed 5 deliveries", "action": None}
    with sync_client(redis_url, stream) as client:
        client.hset(halted_key(stream), record_field("billing", "k"), json.dumps(record))
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    base = {"stream": topic, "group": "billing", "action": "skip"}
    done = web.post(RELEASE, data={**base, "key": "k"}, headers=bearer)
    assert done.status_code == 200 and "asked to release key 'k'" in done.text, done.text
    (row,) = table(web.get("/topic/halted", params={"stream": topic}).text, "halted")[1:]
    assert row[:6] == ["billing", "1", "k", "1:1-0", "failed 5 deliveries", "skip"], row
    cases = [
        ({**base, "key": "nobody"}, 404, "key 'nobody' is not halted in group 'billing'"),
        ({**base, "keyless": "1"}, 404, "key (keyless) is not halted"),
        ({**base, "key": "k", "group": "other"}, 404, "key 'k' is not halted in group 'other'"),
        ({**base, "key": "k", "action": "drop"}, 400, "the action must be one of"),
        ({"stream": topic, "key": "k", "action": "retry"}, 400, "the form has no 'group'"),
        (base, 400, "the form has no 'key'"),
    ]
    for form, status, message in cases:
        response = web.post(RELEASE, data=form, headers=bearer)
        assert response.status_code == status and message in visible_text(response.text), form
    assert [json.loads(v)["action"] for v in halted_values(redis_url, topic)] == ["skip"]


def owners_and_page(web: Web, url: str, topic: str, partitions: int) -> tuple[list[Any], str]:
    """Each partition's owner and the topic page's live part while an ordered consumer
    owns every partition."""

    async def run() -> tuple[list[Any], str]:
        mq = ordered_queue(url, topic, partitions)

        @mq.handler("job")
        async def handle(msg: Message[Any]) -> None:
            pass

        async with mq, mq.running():

            async def owned() -> bool:
                return all(o is not None for o in await mq.partition_owners())

            await wait_for(owned, what="both partitions owned")
            owners = await mq.partition_owners()
            live = await anyio.to_thread.run_sync(
                lambda: web.get("/topic/live", params={"stream": topic}).text
            )
        return owners, live

    return in_own_thread(run)


def test_the_topic_page_shows_each_partitions_owner_while_ordered_consumers_run(
    web: Web, redis_url: str, topic: str
) -> None:
    publish_two(redis_url, topic)
    unowned = web.get("/topic", params={"stream": topic}).text
    assert "Owner (ordered)" not in unowned, "an owner column without ordered consumers"
    assert table(unowned, "partitions")[0][-1] == "Dead letters"
    owners, live = owners_and_page(web, redis_url, topic, PARTITIONS)
    rows = table(live, "partitions")
    assert rows[0][-1] == "Owner (ordered)", rows[0]
    assert [row[-1] for row in rows[1:]] == [
        f"billing: owner (token {o[1]})" for o in owners if o is not None
    ], rows


def test_the_topic_page_shows_the_owner_of_an_ordered_plain_stream(
    web: Web, redis_url: str, stream: str
) -> None:
    (owner,), live = owners_and_page(web, redis_url, stream, 1)
    (group,) = table(live, "groups")[1:]
    owned = f"ordered owner: owner (token {owner[1]})"
    assert group[0] == "billing" and any(cell.endswith(owned) for cell in group), group


def test_every_tab_of_a_topic_has_a_title_of_plain_text(
    web: Web, r: redis.Redis, stream: str
) -> None:
    r.xgroup_create(stream, "billing", id="0", mkstream=True)
    r.xadd(stream, {"type": "job", "data": "1"})
    for path in ("/topic", "/topic/pending", "/topic/dead-letters", "/topic/stopped",
                 "/topic/scheduled", "/topic/halted", "/topic/terminate"):  # fmt: skip
        page = web.get(path, params={"stream": stream}).text
        title = page[page.index("<title>") + 7 : page.index("</title>")]
        assert "<" not in title and stream in title, f"{path}: title {title!r}"


def write_halted(url: str, topic: str, per_partition: int, groups: tuple[str, ...]) -> set[str]:
    """``per_partition`` halted keys of each of ``groups`` in each partition, written as an
    ordered owner writes them; return them as the page shows them (group/partition/key)."""
    written: set[str] = set()
    for partition, stream in enumerate(partition_streams(topic, PARTITIONS)):
        with sync_client(url, stream) as client:
            pipe = client.pipeline(transaction=False)
            for group in groups:
                for n in range(per_partition):
                    key = f"k{partition}-{n}"
                    record = {"id": f"1-{n}", "reason": "failed", "action": None}
                    pipe.hset(halted_key(stream), record_field(group, key), json.dumps(record))
                    written.add(f"{group}/{partition}/{key}")
            pipe.execute()
    return written


def test_halted_keys_come_a_page_at_a_time_and_the_pages_list_every_key(
    web: Web, redis_url: str, topic: str
) -> None:
    publish_two(redis_url, topic)
    written = write_halted(redis_url, topic, 300, ("billing", "audit"))
    seen: list[str] = []
    params: dict[str, str] = {"stream": topic}
    pages = 0
    while True:
        page = web.get("/topic/halted", params=params)
        assert page.status_code == 200, page.text
        rows = table(page.text, "halted")[1:] if 'id="halted"' in page.text else []
        assert len(rows) <= 2 * HALTED_PAGE, f"a page of {len(rows)} rows"
        seen += [f"{row[0]}/{row[1]}/{row[2]}" for row in rows]
        pages += 1
        found = re.search(r'href="([^"]+)" rel="next"', page.text)
        if found is None:
            break
        params = dict(parse_qsl(urlsplit(html.unescape(found[1])).query))
        assert pages < 100, "the pages never end"
    assert set(seen) == written and pages >= len(written) // (2 * HALTED_PAGE)
    bad = web.get("/topic/halted", params={"stream": topic, "after": "x:1"})
    assert bad.status_code == 400 and "not a page of the halted keys" in bad.text
