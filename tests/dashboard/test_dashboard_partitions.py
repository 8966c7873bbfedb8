"""The dashboard and partitioned topics, on one node and on the embedded cluster: a
partitioned topic is listed once with its partition count and nodes, its page has a row per
partition and a chart summed over them, and pending entries, dead letters, stop/resume,
replay, purge and terminate take partition-qualified IDs (``"<i>:<ms>-<seq>"``)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from urllib.parse import unquote

import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq.dashboard import create_app
from streamq.topic.partitions import partition_streams
from streamq.wire.keys import Keys
from streamq.wire.slots import SlotTable, slot_of
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import (
    TOKEN,
    acl_on_every_master,
    dashboard_client,
    forget_topic,
    log_in,
    make_dead_letters,
    partitioned_topic,
    row_starting,
    serving,
    table,
    text_of,
    visible_text,
)

Web = httpx.Client
PARTITIONS = 3
NODE = r"127\.0\.0\.1:\d+"


@pytest.fixture
def topic(redis_url: str) -> Iterator[str]:
    """A topic name; its partition streams, their keys and its record go afterwards."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    forget_topic(redis_url, name, PARTITIONS)


def in_partition(ids: list[str], partition: int) -> list[str]:
    return [i for i in ids if i.startswith(f"{partition}:")]


def raw(entry_id: str) -> str:
    return entry_id.split(":", 1)[1]


def location(response: httpx.Response) -> str:
    assert response.status_code == 303, response.text
    return response.headers["location"]


# -- reading ----------------------------------------------------------------------------
def test_a_partitioned_topic_is_listed_once_with_its_partitions_and_nodes(
    web: Web, redis_url: str, topic: str
) -> None:
    partitioned_topic(redis_url, topic)
    decoy = f"{topic}-plain:p0.0"  # named like a partition, but no topic records it
    with sync_client(redis_url, decoy) as other:
        other.xgroup_create(decoy, "g", id="$", mkstream=True)
        try:
            page = web.get("/").text
        finally:
            other.delete(decoy)
    names = [row[0] for row in table(page, "topics")[1:]]
    assert names.count(topic) == 1
    assert not [n for n in names if n.startswith(f"{topic}:p")], "a partition listed as a topic"
    assert decoy in names, "a stream merely named like a partition is not listed"
    row = row_starting(page, "topics", topic)
    # 9 entries, 3 per partition; billing read 1 of each: lag 6, pending 3
    assert row[1:9] == ["9", "1", "6", "3", "0", "0", str(PARTITIONS), "1"]
    assert re.fullmatch(rf"{NODE}(, {NODE})*", row[9]), f"nodes: {row[9]!r}"


def test_a_partitioned_topic_page_has_a_row_per_partition_and_a_summed_chart(
    web: Web, redis_url: str, topic: str
) -> None:
    partitioned_topic(redis_url, topic)
    page = web.get("/topic", params={"stream": topic})
    assert page.status_code == 200
    assert text_of(page.text, "partition-count") == str(PARTITIONS)
    rows = table(page.text, "partitions")[1:]
    assert [row[0] for row in rows] == ["0", "1", "2"]
    assert [row[1] for row in rows] == list(partition_streams(topic, PARTITIONS))
    for row in rows:  # length, lag, pending; oldest pending age; dead letters
        assert row[3:6] == ["3", "2", "1"] and row[7] == "0", row
        assert re.fullmatch(NODE, row[2]) and re.fullmatch(r"\d+\.\ds", row[6]), row
    assert [text_of(page.text, i) for i in ("length", "total-lag", "total-pending")] == [
        "9", "6", "3"
    ]  # fmt: skip
    billing = row_starting(page.text, "groups", "billing")
    assert billing[1:4] == ["per partition", "6", "3"] and "c1 (3, idle" in billing[5]
    first = web.get("/topic/live", params={"stream": topic}).text
    assert len(table(first, "partitions")) == PARTITIONS + 1, "the fragment has no partitions"
    partitioned_topic(redis_url, topic, entries=6, read=0)  # 2 more in each partition
    live = web.get("/topic/live", params={"stream": topic}).text
    assert text_of(live, "total-lag") == "12"
    assert [row[4] for row in table(live, "partitions")[1:]] == ["4", "4", "4"]
    series = json.loads(samples_of(live))
    assert series["lag"][-2:] == [6, 12] and series["pending"][-1] == 3
    assert series["published"][-1] > 0, "the published rate is not summed over partitions"


def samples_of(html: str) -> str:
    match = re.search(r"id=\"samples\" hidden data-series='([^']*)'", html)
    assert match, f"no chart data in the fragment:\n{html}"
    return match.group(1)


def test_pending_entries_are_paged_over_the_partitions_with_qualified_ids(
    web: Web, redis_url: str, topic: str
) -> None:
    ids = partitioned_topic(redis_url, topic, entries=120, read=40)  # every entry pending
    expected = [i for p in range(PARTITIONS) for i in in_partition(ids, p)]
    seen: list[str] = []
    params = {"stream": topic, "group": "billing"}
    for expected_rows in (50, 50, 20):  # partition 0's 40 and 10 of 1; 30 of 1, 20 of 2; ...
        page = web.get("/topic/pending", params=params).text
        rows = table(page, "pending")[1:]
        assert len(rows) == expected_rows
        seen += [row[0] for row in rows]
        nxt = re.search(r'href="/topic/pending\?[^"]*after=([^"&]+)"', page)
        assert (nxt is None) == (expected_rows == 20), "wrong link to a next page"
        if nxt:
            params["after"] = unquote(nxt.group(1))
    assert seen == expected, "pages are not every partition's pending entries, each once"
    bad = web.get("/topic/pending", params={"stream": topic, "after": "7:1-0"})
    assert bad.status_code == 400 and "no partition '7'" in text_of(bad.text, "error-message")


def test_stop_and_resume_an_entry_of_a_partition(web: Web, redis_url: str, topic: str) -> None:
    ids = partitioned_topic(redis_url, topic)
    entry = in_partition(ids, 2)[0]  # pending in group billing
    stream = partition_streams(topic, PARTITIONS)[2]
    csrf = log_in(web)
    pending = web.get("/topic/pending", params={"stream": topic}).text
    assert f'name="id" value="{entry}"' in pending, "no stop form with the qualified ID"
    stopped = web.post("/topic/stop", data={"csrf": csrf, "stream": topic, "id": entry})
    page = web.get(location(stopped)).text
    assert f"stopped {entry} (taken from 1 group(s)" in page
    assert table(page, "stopped")[1][0] == entry
    with sync_client(redis_url, stream) as r:
        assert r.hexists(Keys(stream).stopped, raw(entry))
        resumed = web.post("/topic/resume", data={"csrf": csrf, "stream": topic, "id": entry})
        assert f"resumed {entry}" in web.get(location(resumed)).text
        assert not r.hexists(Keys(stream).stopped, raw(entry))
    bare = web.post("/topic/stop", data={"csrf": csrf, "stream": topic, "id": raw(entry)})
    assert "names its partition" in web.get(location(bare)).text


def test_dead_letters_of_every_partition_are_replayed_and_purged(
    web: Web, redis_url: str, topic: str
) -> None:
    make_dead_letters(redis_url, topic, [1, 2, 3], partitions=PARTITIONS)  # one per partition
    streams = partition_streams(topic, PARTITIONS)
    page = web.get("/topic/dead-letters", params={"stream": topic}).text
    letters = re.findall(r'<article class="letter" id="letter-([^"]+)"', page)
    assert [letter.split(":")[0] for letter in letters] == ["0", "1", "2"], letters
    field = {"stream": topic, "id": letters[2], "field": "data"}  # one field, downloaded
    assert web.get("/topic/dead-letters/field", params=field).content in (b"1", b"2", b"3")
    csrf = log_in(web)
    one = web.post("/topic/dead-letters/replay",
                   data={"csrf": csrf, "stream": topic, "id": letters[1]})  # fmt: skip
    assert re.search(
        rf"replayed dead letter {letters[1]} as 1:\d+-\d+", web.get(location(one)).text
    )
    with sync_client(redis_url, streams[1]) as r:
        assert r.xlen(Keys(streams[1]).dead_letters) == 0 and r.xlen(streams[1]) == 2
    every = web.post("/topic/dead-letters/replay-all", data={"csrf": csrf, "stream": topic})
    assert "replayed 2 dead letter(s)" in web.get(location(every)).text
    make_dead_letters(redis_url, topic, [4, 5], group="others", partitions=PARTITIONS)
    count = 0
    for stream in streams:
        with sync_client(redis_url, stream) as r:
            count += r.xlen(Keys(stream).dead_letters)
    purged = web.post("/topic/dead-letters/purge",
                      data={"csrf": csrf, "stream": topic, "confirm": topic})  # fmt: skip
    assert f"purged {count} dead letter(s)" in web.get(location(purged)).text and count >= 2
    assert "No dead letters" in web.get("/topic/dead-letters", params={"stream": topic}).text


def test_terminate_a_partitioned_topic(web: Web, redis_url: str, topic: str) -> None:
    partitioned_topic(redis_url, topic)
    form = web.get("/topic/terminate", params={"stream": topic}).text
    assert f"the stream of each of its {PARTITIONS} partitions" in form
    auth = {"Authorization": f"Bearer {TOKEN}"}
    done = web.post("/topic/terminate", data={"stream": topic, "confirm": topic}, headers=auth)
    assert done.status_code == 200 and done.text == f"terminated {topic}"
    for stream in partition_streams(topic, PARTITIONS):
        with sync_client(redis_url, stream) as r:
            assert not r.exists(stream), f"partition {stream} left behind"
    with sync_client(redis_url, topic) as r:
        assert not r.exists(Keys(topic).partitions), "the partition record left behind"
    assert topic not in web.get("/").text
    again = web.post("/topic/terminate", data={"stream": topic, "confirm": topic}, headers=auth)
    assert again.status_code == 404


# -- escaping, secrets ------------------------------------------------------------------
EVIL_GROUP = "<b>g</b>\u202e"
EVIL_CONSUMER = "<img src=x onerror=alert(1)>"


def test_names_with_html_in_a_partition_are_shown_as_text(
    web: Web, redis_url: str, topic: str
) -> None:
    partitioned_topic(redis_url, topic)
    stream = partition_streams(topic, PARTITIONS)[1]
    with sync_client(redis_url, stream) as r:  # another client may name them so
        r.xgroup_create(stream, EVIL_GROUP, id="0")
        r.xreadgroup(EVIL_GROUP, EVIL_CONSUMER, {stream: ">"}, count=1)
    pages = [web.get("/").text, web.get("/topic", params={"stream": topic}).text,
             web.get("/topic/pending", params={"stream": topic, "group": EVIL_GROUP}).text]  # fmt: skip
    for page in pages:
        assert "<img src=x" not in page and "<b>g</b>" not in page
        assert "\u202e" not in visible_text(page), "a bidi override is shown raw"
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[1]
    (pending_row,) = table(pages[2], "pending")[1:]  # only partition 1 has that group
    assert pending_row[0].startswith("1:") and pending_row[1] == EVIL_CONSUMER


def test_no_page_of_a_partitioned_topic_shows_the_redis_password(
    redis_url: str, topic: str
) -> None:
    user, password = f"dash-{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}"
    acl_on_every_master(redis_url, "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    try:
        partitioned_topic(redis_url, topic)
        url = redis_url.replace("redis://", f"redis://{user}:{password}@")
        with serving(create_app(url, token=TOKEN)) as base, httpx.Client(base_url=base) as web:
            pages = [web.get(path, params={"stream": topic})
                     for path in ("/", "/topic", "/topic/live", "/topic/pending",
                                  "/topic/dead-letters", "/topic/stopped")]  # fmt: skip
            assert all(p.status_code == 200 for p in pages)
            assert topic in pages[0].text
            assert not [p.url for p in pages if password in p.text]
    finally:
        acl_on_every_master(redis_url, "DELUSER", user)


# -- on the embedded cluster ------------------------------------------------------------
def serving_nodes(url: str, streams: tuple[str, ...]) -> list[str]:
    """``host:port`` of the master serving each stream, as the cluster says (CLUSTER SLOTS)."""
    with redis.Redis.from_url(url) as node:
        slots = SlotTable()
        slots.load(node.execute_command("CLUSTER", "SLOTS"), ("127.0.0.1", 0))
    owners = [slots.owner(slot_of(stream)) for stream in streams]
    return [f"{owner[0]}:{owner[1]}" for owner in owners if owner is not None]


@pytest.mark.slow
def test_on_a_cluster_each_partition_shows_the_master_serving_it(
    streamq_cluster_url: str,
) -> None:
    url, topic = streamq_cluster_url, f"test-{uuid.uuid4().hex[:12]}"
    streams = partition_streams(topic, PARTITIONS)
    try:
        ids = partitioned_topic(url, topic)
        make_dead_letters(url, topic, [1, 2, 3], group="workers", partitions=PARTITIONS)
        nodes = serving_nodes(url, streams)
        assert len(set(nodes)) == PARTITIONS, f"partitions not spread over the masters: {nodes}"
        with dashboard_client(url) as web:
            row = row_starting(web.get("/").text, "topics", topic)
            assert row[7] == str(PARTITIONS) and row[9] == ", ".join(sorted(nodes))
            page = web.get("/topic", params={"stream": topic}).text
            assert [r[2] for r in table(page, "partitions")[1:]] == nodes
            assert text_of(page, "total-lag") == "9"  # billing: 6, and the 3 dead letters'
            auth = {"Authorization": f"Bearer {TOKEN}"}
            entry = in_partition(ids, 2)[0]
            stopped = web.post("/topic/stop", data={"stream": topic, "id": entry}, headers=auth)
            assert stopped.status_code == 200 and stopped.text.startswith(f"stopped {entry}")
            resumed = web.post("/topic/resume", data={"stream": topic, "id": entry}, headers=auth)
            assert resumed.status_code == 200, resumed.text
            letters = web.get("/topic/dead-letters", params={"stream": topic}).text
            letter = re.findall(r'id="letter-(2:[^"]+)"', letters)[0]
            replayed = web.post("/topic/dead-letters/replay",
                                data={"stream": topic, "id": letter}, headers=auth)  # fmt: skip
            assert replayed.status_code == 200 and f"{letter} as 2:" in replayed.text
            live = web.get("/topic/live", params={"stream": topic}).text
            assert json.loads(samples_of(live))["pending"][-1] >= 3
    finally:
        forget_topic(url, topic, PARTITIONS)
