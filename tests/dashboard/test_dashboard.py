"""The dashboard over HTTP (httpx against the app served by uvicorn, the session's real
server behind it): every page, escaping of what comes from Redis, no password of the Redis
URL shown, security headers, the ``streamq dashboard`` command and the demo. The actions
and the write token: test_dashboard_actions.py; in a real browser: test_dashboard_browser.py;
on the shared embedded server: test_dashboard_shared_server.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import anyio
import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq import Publisher
from streamq.dashboard import create_app
from streamq.dashboard.limits import ReadSlots
from streamq.dashboard.topics import TopicList, list_topics
from streamq.publish.scheduling import encode_payload
from streamq.testing import delete_stream_keys
from streamq.topic.halted import record_field
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect
from streamq.wire.keys import Keys
from streamq.wire.permissions import acl_rules
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import (
    TOKEN,
    acl_on_every_master,
    dashboard_client,
    make_dead_letters,
    publish,
    row_starting,
    serving,
    table,
    text_of,
    topic_with_pending,
    visible_text,
)

Web = httpx.Client


# -- pages ------------------------------------------------------------------------------
def test_topics_page_lists_streams_with_groups_and_their_figures(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    make_dead_letters(redis_url, stream, [1], group="workers")  # 1 entry, 1 dead letter
    topic_with_pending(redis_url, r, stream)  # 5 more; billing and audit from the start
    r.hset(Keys(stream).stopped, "1-1", "")
    lonely = f"{stream}-no-group"
    lonely_client = sync_client(redis_url, lonely)  # another stream: maybe another slot
    lonely_client.xadd(lonely, {"type": "x", "data": "1"})
    try:
        page = web.get("/")
        assert page.status_code == 200
        header = table(page.text, "topics")[0]
        assert header == ["Topic", "Length", "Groups", "Lag", "Pending", "Dead letters",
                          "Stopped IDs", "Partitions", "Levels", "Nodes"]  # fmt: skip
        # lag: workers 5, billing 3, audit 6; pending: billing's 3; one stream, one node
        row = row_starting(page.text, "topics", stream)
        assert row[:9] == [stream, "6", "3", "14", "3", "1", "1", "1", "1"]
        assert re.fullmatch(r"127\.0\.0\.1:\d+", row[9]), f"node: {row[9]!r}"
        names = [row[0] for row in table(page.text, "topics")[1:]]
        assert lonely not in names, "a stream without consumer groups is listed"
        assert not any(n.startswith("streamq:{") for n in names), "streamq's own keys listed"
    finally:
        lonely_client.delete(lonely)
        lonely_client.close()


def test_the_topics_page_filters_by_name_and_lists_the_first_topics_by_name(
    web: Web, redis_url: str, stream: str
) -> None:
    """``/?q=`` lists the topics whose name holds it, in any case; past the page's limit
    the topics listed are the first by name (a partitioned topic among them), and the page
    says a filter finds the others."""
    names = [f"{stream}-{suffix}" for suffix in ("c", "A", "b")]
    partitioned = f"{stream}-0"
    try:
        with Publisher(redis_url, partitioned, partitions=3) as publisher:
            publisher.publish_many("job", [1, 2, 3], key=str)
        for partition in partition_streams(partitioned, 3):
            with sync_client(redis_url, partition) as client:
                client.xgroup_create(partition, "g", id="0", mkstream=True)
        for name in names:
            with sync_client(redis_url, name) as client:
                client.xadd(name, {"type": "job", "data": "1"})
                client.xgroup_create(name, "g", id="0")
        page = web.get("/", params={"q": stream.upper()})
        assert page.status_code == 200, visible_text(page.text)[:500]
        listed = [row[0] for row in table(page.text, "topics")[1:]]
        assert listed == sorted([partitioned, *names]), listed
        assert 'id="truncated"' not in page.text
        first = anyio.run(first_topics, redis_url, stream, 2)
        assert ([t.info.stream for t in first.topics], first.truncated) == (
            [partitioned, f"{stream}-A"],
            True,
        )
        none = web.get("/", params={"q": f"{stream}-nothing"})
        assert 'id="topics"' not in none.text and "No topic whose name holds" in none.text
    finally:
        for name in (*names, partitioned):
            delete_stream_keys(redis_url, name)
        for partition in partition_streams(partitioned, 3):
            delete_stream_keys(redis_url, partition)


async def first_topics(url: str, match: str, limit: int) -> TopicList:
    deployment = connect(url)
    try:
        return await list_topics(deployment, limit=limit, match=match)
    finally:
        await deployment.aclose()


def test_a_hash_tagged_stream_of_another_application_is_skipped_not_a_failed_page(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    """A stream named with braces (``{tenant}:events``, a hash tag another application
    uses on a cluster) is no streamq topic: its keys ``streamq:{{tenant}:events}:...``
    would hash to another slot. The topics page lists the others and says it skipped it."""
    topic_with_pending(redis_url, r, stream)
    tagged = f"{{{stream}}}:events"
    tagged_client = sync_client(redis_url, tagged)
    tagged_client.xadd(tagged, {"type": "x", "data": "1"})
    tagged_client.xgroup_create(tagged, "theirs", id="0")
    try:
        page = web.get("/")
        assert page.status_code == 200, visible_text(page.text)[:500]
        names = [row[0] for row in table(page.text, "topics")[1:]]
        assert stream in names and tagged not in names, names
        assert "hold braces (not topic names streamq can use) are not listed" in page.text
    finally:
        tagged_client.delete(tagged)
        tagged_client.close()


@pytest.mark.parametrize("record", ["stopped", "dead_letters", "scheduled", "outbox"])
def test_a_key_of_another_type_in_one_topic_is_named_and_every_topic_still_listed(
    web: Web, r: redis.Redis, redis_url: str, stream: str, record: str
) -> None:
    """One of streamq's own keys of a topic holding another type (a SET over it): the
    topics page lists every topic, the damaged one marked, and the topic's pages show
    what they can, naming the key and the type it holds (ERROR_HANDLING.md "Damaged
    state")."""
    damaged = f"{stream}-damaged"
    topic_with_pending(redis_url, r, stream)
    client = sync_client(redis_url, damaged)  # on a cluster: the damaged topic's own slot
    topic_with_pending(redis_url, client, damaged)
    key = getattr(Keys(damaged), record)
    client.set(key, "oops")
    try:
        page = web.get("/")
        assert page.status_code == 200, visible_text(page.text)[:500]
        names = [row[0] for row in table(page.text, "topics")[1:]]
        assert stream in names, names
        assert [n for n in names if n.startswith(damaged) and "damaged" in n[len(damaged) :]]
        assert key in visible_text(page.text)
        for path in ("/topic", "/topic/live", "/topic/pending", "/topic/dead-letters",
                     "/topic/stopped", "/topic/scheduled", "/topic/halted"):  # fmt: skip
            shown = web.get(path, params={"stream": damaged, "group": "billing"})
            assert shown.status_code == 200, f"{path}: {visible_text(shown.text)[:300]}"
            if path != "/topic/live":  # a fragment: the page around it names the key
                assert key in visible_text(shown.text), path
                assert "found a string" in visible_text(shown.text), path
    finally:
        client.delete(key)
        client.close()
        delete_stream_keys(redis_url, damaged)


def test_a_topic_the_server_refuses_to_describe_is_listed_apart_beside_every_other(
    web: Web, r: redis.Redis, redis_url: str, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever error one topic's figures meet (short of the server being away), the
    topics page lists every other topic, and that one apart with the error: as the
    metrics exporter leaves one stream's gauges out, not the scrape."""
    from streamq.errors import RedisFailure
    from streamq.topic.operations import TopicAdmin

    refused = f"{stream}-refused"
    topic_with_pending(redis_url, r, stream)
    with sync_client(redis_url, refused) as other:  # on a cluster: that topic's own slot
        topic_with_pending(redis_url, other, refused)
    describe = TopicAdmin.topic_info

    async def failing(admin: TopicAdmin) -> object:
        if admin._topic.stream == refused:
            raise RedisFailure("ERR something only this topic meets")
        return await describe(admin)

    monkeypatch.setattr(TopicAdmin, "topic_info", failing)
    try:
        page = web.get("/")
        assert page.status_code == 200, visible_text(page.text)[:500]
        names = [row[0] for row in table(page.text, "topics")[1:]]
        assert stream in names and refused not in names, names
        assert table(page.text, "unreadable")[1:] == [
            [refused, "ERR something only this topic meets"]
        ]
    finally:
        delete_stream_keys(redis_url, refused)


def test_topic_page_shows_groups_consumers_and_oldest_pending_age(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    ids = topic_with_pending(redis_url, r, stream)
    page = web.get("/topic", params={"stream": stream})
    assert page.status_code == 200
    assert text_of(page.text, "length") == "5"
    assert text_of(page.text, "total-lag") == "7"  # billing 2 + audit 5
    assert text_of(page.text, "total-pending") == "3"
    billing = row_starting(page.text, "groups", "billing")
    assert billing[1:4] == [ids[2], "2", "3"]
    assert re.fullmatch(r"\d+\.\ds", billing[4]), f"oldest pending age: {billing[4]!r}"
    assert "c1 (2, idle" in billing[5] and "c2 (1, idle" in billing[5]
    assert row_starting(page.text, "groups", "audit")[1:6] == ["0-0", "5", "0", "-", "-"]
    assert 'hx-trigger="every 2s"' in page.text, "the figures are not refreshed by htmx"


def test_live_fragment_follows_lag_and_the_chart_gets_samples(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    first = web.get("/topic/live", params={"stream": stream})
    assert first.status_code == 200 and "<html" not in first.text, "not a fragment"
    assert text_of(first.text, "total-lag") == "7"
    publish(redis_url, stream, 4)
    second = web.get("/topic/live", params={"stream": stream}).text
    assert text_of(second, "total-lag") == "15"  # both groups are 4 entries further behind
    series = json.loads(samples_of(second))
    assert series["lag"][-2:] == [7, 15]
    assert series["pending"][-2:] == [3, 3]
    assert series["published"][0] is None and series["published"][-1] > 0
    assert series["read"][-1] == 0
    assert series["t"][-1] >= series["t"][-2]


def samples_of(html: str) -> str:
    match = re.search(r"id=\"samples\" hidden data-series='([^']*)'", html)
    assert match, f"no chart data in the fragment:\n{html}"
    return match.group(1)


def test_pending_entries_are_paged_oldest_first_and_filtered_by_consumer(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    ids = publish(redis_url, stream, 120)
    r.xgroup_create(stream, "g", id="0")
    r.xreadgroup("g", "alice", {stream: ">"}, count=70)
    r.xreadgroup("g", "bob", {stream: ">"}, count=50)
    r.xclaim(stream, "g", "bob", 0, [ids[0]])  # a second delivery of the first entry
    seen: list[str] = []
    params: dict[str, str] = {"stream": stream, "group": "g"}
    for expected_rows in (50, 50, 20):
        page = web.get("/topic/pending", params=params).text
        rows = table(page, "pending")[1:]
        assert len(rows) == expected_rows
        seen += [row[0] for row in rows]
        nxt = re.search(r'href="/topic/pending\?[^"]*after=([0-9-]+)"', page)
        if expected_rows == 20:
            assert nxt is None, "the last page links to a next one"
        else:
            assert nxt is not None, "no link to the next page"
            params["after"] = nxt.group(1)
    assert seen == ids, "pages are not the pending entries in order, each once"
    first = table(web.get("/topic/pending", params={"stream": stream, "group": "g"}).text,
                  "pending")[1]  # fmt: skip
    assert first[:2] == [ids[0], "bob"] and first[3] == "2"
    only_bob = web.get("/topic/pending", params={"stream": stream, "group": "g", "consumer": "bob"})
    assert {row[1] for row in table(only_bob.text, "pending")[1:]} == {"bob"}


def test_dead_letters_page_shows_payload_error_and_traceback(
    web: Web, redis_url: str, stream: str
) -> None:
    make_dead_letters(redis_url, stream, [{"order": 7}])
    page = web.get("/topic/dead-letters", params={"stream": stream}).text
    assert "builtins.ValueError" in page
    assert "cannot handle {&#39;order&#39;: 7}" in page
    assert "{&#34;order&#34;:7}" in page, "the payload is not shown"
    assert "<summary>Traceback</summary>" in page and "raise ValueError" in page
    assert "1 deliveries" in page and "group workers" in page


def test_an_age_a_few_milliseconds_below_zero_shows_as_zero() -> None:
    """XINFO CONSUMERS may give an idle time just below 0 (the server's clock read before
    the consumer was last seen): the pages show "0.0s", never "-0.0s"."""
    from streamq._text import age

    assert [age(-3), age(-400), age(0), age(1500)] == ["0.0s", "0.0s", "0.0s", "1.5s"]


def test_dead_letters_page_shows_a_letters_key(web: Web, r: redis.Redis, stream: str) -> None:
    r.xadd(stream, {"type": "job", "data": "1"})
    r.xgroup_create(stream, "g", id="0")
    r.xadd(Keys(stream).dead_letters, {"type": "job", "data": "1", "key": "cust-<7>"})
    page = web.get("/topic/dead-letters", params={"stream": stream}).text
    assert '<code class="key">cust-&lt;7&gt;</code>' in page


def test_big_dead_letter_fields_are_cut_and_downloadable_whole(
    web: Web, r: redis.Redis, stream: str
) -> None:
    data = "".join(f"{i:08d}" for i in range(4000)).encode()  # 32,000 bytes
    r.xadd(stream, {"type": "job", "data": "1"})
    r.xgroup_create(stream, "g", id="0")
    letter_id = r.xadd(Keys(stream).dead_letters, {"type": "job", "data": data}).decode()
    page = web.get("/topic/dead-letters", params={"stream": stream}).text
    assert "(32000 bytes, cut)" in page and data[:19_990].decode() in page
    assert data[20_001:20_100].decode() not in page
    field = {"stream": stream, "id": letter_id, "field": "data"}
    download = web.get("/topic/dead-letters/field", params=field)
    assert download.status_code == 200 and download.content == data
    assert download.headers["content-type"] == "application/octet-stream"
    missing = web.get("/topic/dead-letters/field", params={**field, "field": "nope"})
    assert missing.status_code == 404
    assert "no field 'nope'" in text_of(missing.text, "error-message")
    bad_id = web.get("/topic/dead-letters/field", params={**field, "id": "x"})
    assert bad_id.status_code == 400


def test_pages_wait_for_a_read_slot_then_answer_busy(redis_url: str, stream: str) -> None:
    app = create_app(redis_url, token=None)
    app.state.read_slots = ReadSlots(slots=0, wait=0.2)  # every slot taken
    with serving(app) as base:
        busy = httpx.get(f"{base}/topic/dead-letters", params={"stream": stream})
        login = httpx.get(f"{base}/login")
    assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
    assert "busy" in text_of(busy.text, "error-message")
    assert login.status_code == 200, "a page that reads nothing needs no slot"


def test_pages_for_stopped_ids_terminate_and_login_render(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    r.hset(Keys(stream).stopped, "1-2", "")
    stopped = web.get("/topic/stopped", params={"stream": stream})
    assert stopped.status_code == 200 and table(stopped.text, "stopped")[1] == ["1-2"]
    assert web.get("/topic/terminate", params={"stream": stream}).status_code == 200
    assert 'name="token"' in web.get("/login").text


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/topic", 400, "no topic given"),
        ("/topic?stream=no-such-stream-here", 404, "there is no stream"),
        ("/topic/pending?stream={s}&group=nope", 404, "no consumer group"),
        ("/topic/pending?stream={s}&after=yesterday", 400, "yesterday"),
        ("/topic/dead-letters?stream={s}&after=1-x", 400, "1-x"),
    ],
)
def test_bad_requests_get_an_error_page(
    web: Web, r: redis.Redis, redis_url: str, stream: str, path: str, status: int, says: str
) -> None:
    publish(redis_url, stream, 1)
    r.xgroup_create(stream, "g", id="0")
    response = web.get(path.format(s=stream))
    assert response.status_code == status
    assert says in text_of(response.text, "error-message")


# -- escaping, secrets, headers ---------------------------------------------------------
SCRIPT = '<script>alert("owned")</script>'


def test_html_from_redis_is_shown_as_text(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    # streamq refuses such a type name; another client may write it all the same
    foreign = {"type": SCRIPT, "data": json.dumps(SCRIPT), "meta": "{}"}
    make_dead_letters(redis_url, stream, [SCRIPT], reject=True, foreign=[foreign])
    r.xgroup_create(stream, "<img src=x onerror=alert(1)>\u202egnp.exe", id="0")
    pages = [web.get(path, params={"stream": stream}).text
             for path in ("/", "/topic", "/topic/dead-letters", "/topic/pending")]  # fmt: skip
    for page in pages:
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "\u202e" not in visible_text(page), "a bidi override is shown raw"
    letters = pages[2]
    assert "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in letters
    assert '<code class="type">&lt;script&gt;' in letters, "the type name is not shown as text"
    assert "&lt;img src=x onerror=alert(1)&gt;\\u202egnp.exe" in pages[1]


def test_no_page_shows_the_password_of_the_redis_url(redis_url: str, stream: str) -> None:
    user, password = f"dash-{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}"
    acl_on_every_master(redis_url, "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    try:
        make_dead_letters(redis_url, stream, [1])
        url = redis_url.replace("redis://", f"redis://{user}:{password}@")
        with serving(create_app(url, token=TOKEN)) as base, httpx.Client(base_url=base) as web:
            pages = [web.get(path, params={"stream": stream})
                     for path in ("/", "/topic", "/topic/live", "/topic/pending",
                                  "/topic/dead-letters", "/topic/stopped", "/login")]  # fmt: skip
            assert all(p.status_code == 200 for p in pages)
            assert f"redis://{user}@127.0.0.1" in pages[0].text
            assert not [p.url for p in pages if password in p.text]
        down = redis_url.rsplit(":", 1)[0].replace("redis://", f"redis://u:{password}@") + ":1/0"
        with serving(create_app(down, token=TOKEN)) as base, httpx.Client(base_url=base) as web:
            unreachable = web.get("/")
            assert unreachable.status_code == 503 and "cannot reach" in unreachable.text
            assert password not in unreachable.text
    finally:
        acl_on_every_master(redis_url, "DELUSER", user)


def test_an_operator_limited_to_one_topic_sees_it_and_not_the_others(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    """The README's operator ACL plus +scan: the topic's pages work; the streams it may not
    read are counted as hidden, not an error."""
    topic_with_pending(redis_url, r, stream)
    keys = Keys(stream)
    r.zadd(keys.scheduled, {"later": time.time() * 1000 + 3_600_000})
    r.hset(keys.scheduled_payloads, "later", encode_payload({"type": "job", "data": "1"}, "k-s"))
    r.hset(keys.halted, record_field("billing", "k-h"), '{"id": "1-0", "reason": "r"}')
    other = f"{stream}-other"
    other_client = sync_client(redis_url, other)  # another stream: maybe another slot
    other_client.xgroup_create(other, "g", id="$", mkstream=True)
    user, password = f"op-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    rules = acl_rules(stream, operator=True, password=password)
    acl_on_every_master(redis_url, "SETUSER", user, *rules, "+scan")
    url = redis_url.replace("redis://", f"redis://{user}:{password}@")
    try:
        with dashboard_client(url) as web:
            listing = web.get("/")
            assert listing.status_code == 200, listing.text
            names = [row[0] for row in table(listing.text, "topics")[1:]]
            assert names == [stream]
            assert "s user read are not listed" in listing.text
            for path in ("/topic", "/topic/live", "/topic/pending", "/topic/dead-letters",
                         "/topic/stopped", "/topic/terminate"):  # fmt: skip
                assert web.get(path, params={"stream": stream}).status_code == 200, path
            for path, shown in (("/topic/scheduled", "k-s"), ("/topic/halted", "k-h")):
                page = web.get(path, params={"stream": stream})
                assert page.status_code == 200 and shown in page.text, (path, page.text)
    finally:
        acl_on_every_master(redis_url, "DELUSER", user)
        other_client.delete(other)
        other_client.close()


def test_security_headers_and_host_check(web: Web) -> None:
    page = web.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    rebound = web.get("/", headers={"Host": "evil.example"})
    assert rebound.status_code == 400, "a foreign Host header (DNS rebinding) was served"


# -- the command ------------------------------------------------------------------------
@pytest.mark.slow
def test_streamq_dashboard_command_serves_on_loopback(redis_url: str, stream: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "STREAMQ_DASHBOARD_TOKEN"}
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "dashboard", "--url", redis_url, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        address = process.stdout.readline().strip() if process.stdout else ""
        assert address.startswith("http://127.0.0.1:"), address or process.communicate()[1]
        assert httpx.get(address).status_code == 200
        process.terminate()
        _, err = process.communicate(timeout=20)
        assert process.returncode == 0, err
        token = re.search(r"write token \(log in with it to change data\): (\S+)", err)
        assert token and len(token.group(1)) >= 24, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):  # also when a check above failed
            if pipe:
                pipe.close()


@pytest.mark.slow
def test_demo_serves_the_dashboard_over_live_traffic(redis_url: str) -> None:
    """`make demo-dashboard`, stopping by itself: its topics are listed while it runs, and
    it terminates them at the end."""
    env = {**os.environ, "STREAMQ_REDIS_URL": redis_url}
    process = subprocess.Popen(
        [sys.executable, "-m", "demos.dashboard", "--seconds", "6", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        lines = [process.stdout.readline() for _ in range(3)] if process.stdout else []
        address = re.search(r"open (http://127\.0\.0\.1:\d+/)", "".join(lines))
        assert address, f"no address in {lines}"
        topics = re.findall(r"demo-(?:orders|emails)-[0-9a-f]+", lines[1])
        listed = [row[0] for row in table(httpx.get(address.group(1)).text, "topics")[1:]]
        assert set(topics) <= set(listed), f"demo topics {topics} not in {listed}"
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):  # also when a check above failed
            if pipe:
                pipe.close()
    assert process.returncode == 0, err
    assert "demo topics terminated" in out
    for topic in topics:  # one at a time: on a cluster they may be on different slots
        with sync_client(redis_url, topic) as client:
            assert not client.exists(topic), f"demo topic {topic} left behind"
