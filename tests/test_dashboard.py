"""The dashboard over HTTP (Starlette's Web in front of the real app, the session's
real server behind it): every page and action, the write token (403 without it, CSRF and
origin checks), escaping of what comes from Redis, no password of the Redis URL shown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq import Publisher
from streamq.dashboard import create_app
from streamq.dashboard.app import LOOPBACK_HOSTS
from streamq.dashboard.samples import SampleStore
from streamq.wire.keys import Keys
from tests.dashboard_helpers import (
    TOKEN,
    csrf_of,
    make_dead_letters,
    row_starting,
    serving,
    table,
    text_of,
    visible_text,
)

Web = httpx.Client


@pytest.fixture
def web(redis_url: str) -> Iterator[Web]:
    """An HTTP client of the dashboard (with a write token, served by uvicorn on loopback),
    not logged in. Samples for the chart are taken at every poll."""
    app = create_app(redis_url, token=TOKEN, allowed_hosts=LOOPBACK_HOSTS)
    app.state.samples = SampleStore(min_interval=0)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        yield client


def log_in(web: Web) -> str:
    """Log ``web`` in with the token; return the session's CSRF token."""
    response = web.post("/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303, response.text
    return csrf_of(web.get("/").text)


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


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


# -- pages ------------------------------------------------------------------------------
def test_topics_page_lists_streams_with_groups_and_their_figures(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    make_dead_letters(redis_url, stream, [1], group="workers")  # 1 entry, 1 dead letter
    topic_with_pending(redis_url, r, stream)  # 5 more; billing and audit from the start
    r.hset(Keys(stream).stopped, "1-1", "")
    lonely = f"{stream}-no-group"
    r.xadd(lonely, {"type": "x", "data": "1"})
    try:
        page = web.get("/")
        assert page.status_code == 200
        header = table(page.text, "topics")[0]
        assert header == ["Topic", "Length", "Groups", "Lag", "Pending", "Dead letters",
                          "Stopped IDs"]  # fmt: skip
        # lag: workers 5, billing 3, audit 6; pending: billing's 3
        assert row_starting(page.text, "topics", stream) == [stream, "6", "3", "14", "3", "1", "1"]
        names = [row[0] for row in table(page.text, "topics")[1:]]
        assert lonely not in names, "a stream without consumer groups is listed"
        assert not any(n.startswith("streamq:{") for n in names), "streamq's own keys listed"
    finally:
        r.delete(lonely)


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
    series = json.loads(text_of(second, "samples"))
    assert series["lag"][-2:] == [7, 15]
    assert series["pending"][-2:] == [3, 3]
    assert series["published"][0] is None and series["published"][-1] > 0
    assert series["read"][-1] == 0
    assert series["t"][-1] >= series["t"][-2]


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


# -- the write token --------------------------------------------------------------------
ACTIONS = [
    "/topic/stop", "/topic/resume", "/topic/dead-letters/replay",
    "/topic/dead-letters/replay-all", "/topic/dead-letters/purge", "/topic/terminate",
]  # fmt: skip


def action_form(stream: str, entry_id: str, letter_id: str, path: str) -> dict[str, str]:
    ids = {
        "/topic/stop": entry_id,
        "/topic/resume": entry_id,
        "/topic/dead-letters/replay": letter_id,
    }
    return {"stream": stream, "id": ids.get(path, ""), "confirm": stream}


@pytest.fixture
def victim(r: redis.Redis, redis_url: str, stream: str) -> tuple[str, str]:
    """A topic with an entry, a stopped entry and a dead letter: (entry ID, letter ID)."""
    make_dead_letters(redis_url, stream, [1])
    entry_id = publish(redis_url, stream, 1)[0]
    r.hset(Keys(stream).stopped, entry_id, "")
    return entry_id, r.xrange(Keys(stream).dead_letters)[0][0].decode()


def snapshot(r: redis.Redis, stream: str) -> tuple[object, ...]:
    keys = Keys(stream)
    return (r.xlen(stream), r.xrange(keys.dead_letters), r.hgetall(keys.stopped),
            r.xinfo_groups(stream))  # fmt: skip


@pytest.mark.parametrize("path", ACTIONS)
def test_every_action_is_refused_403_without_the_token(
    web: Web, r: redis.Redis, stream: str, victim: tuple[str, str], path: str
) -> None:
    before = snapshot(r, stream)
    form = action_form(stream, *victim, path)
    anonymous = web.post(path, data=form)
    assert anonymous.status_code == 403, f"{path} without the token: {anonymous.status_code}"
    assert "needs the write token" in anonymous.text
    wrong = web.post(path, data=form, headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 403
    csrf = log_in(web)
    no_csrf = web.post(path, data=form)
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    stale = web.post(path, data={**form, "csrf": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")})
    assert stale.status_code == 403
    cross_site = web.post(path, data={**form, "csrf": csrf},
                          headers={"Origin": "http://127.0.0.1:9999"})  # fmt: skip
    assert cross_site.status_code == 403 and "another origin" in cross_site.text
    assert snapshot(r, stream) == before, f"a refused {path} changed data"


def test_a_read_only_dashboard_refuses_login_and_actions(
    redis_url: str, r: redis.Redis, stream: str, victim: tuple[str, str]
) -> None:
    app = create_app(redis_url, token=None)
    before = snapshot(r, stream)
    with serving(app) as base, httpx.Client(base_url=base) as web:
        assert "started without a write token" in web.get("/").text
        assert web.post("/login", data={"token": ""}).status_code == 403
        for path in ACTIONS:
            response = web.post(path, data=action_form(stream, *victim, path))
            assert response.status_code == 403 and "read-only" in response.text
    assert snapshot(r, stream) == before


def test_login_with_a_wrong_token_is_refused_and_the_session_cookie_is_strict(web: Web) -> None:
    wrong = web.post("/login", data={"token": TOKEN + "x"})
    assert wrong.status_code == 403 and "not the write token" in wrong.text
    assert not web.cookies
    ok = web.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
    assert ok.status_code == 303 and ok.headers["location"] == "/", "open redirect after login"
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and TOKEN.lower() not in cookie
    page = web.get("/").text
    assert "write access" in page and TOKEN not in page
    assert web.post("/logout", data={"csrf": csrf_of(page)}).status_code == 303
    assert "Log in with the token" in web.get("/").text


# -- actions with the token -------------------------------------------------------------
def test_stop_and_resume_an_entry(web: Web, r: redis.Redis, redis_url: str, stream: str) -> None:
    ids = topic_with_pending(redis_url, r, stream)
    csrf = log_in(web)
    stopped = web.post("/topic/stop", data={"csrf": csrf, "stream": stream, "id": ids[0]})
    assert stopped.status_code == 303
    page = web.get(stopped.headers["location"]).text
    assert f"stopped {ids[0]} (taken from 1 group(s)" in page
    assert table(page, "stopped")[1][0] == ids[0]
    assert r.hexists(Keys(stream).stopped, ids[0])
    resumed = web.post("/topic/resume", data={"csrf": csrf, "stream": stream, "id": ids[0]})
    page = web.get(resumed.headers["location"]).text
    assert f"resumed {ids[0]}" in page and "No stopped entries." in page
    again = web.post("/topic/resume", data={"csrf": csrf, "stream": stream, "id": ids[0]})
    assert "is not stopped" in web.get(again.headers["location"]).text
    bad = web.post("/topic/stop", data={"csrf": csrf, "stream": stream, "id": "tomorrow"})
    assert "tomorrow" in web.get(bad.headers["location"]).text


def test_replay_one_replay_all_and_purge_dead_letters(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    make_dead_letters(redis_url, stream, [1, 2, 3])
    dlq = Keys(stream).dead_letters
    first = r.xrange(dlq)[0][0].decode()
    csrf = log_in(web)
    one = web.post("/topic/dead-letters/replay", data={"csrf": csrf, "stream": stream, "id": first})
    assert f"replayed dead letter {first} as " in web.get(one.headers["location"]).text
    assert r.xlen(dlq) == 2 and r.xlen(stream) == 4
    assert b"replayed_from" in r.xrevrange(stream, count=1)[0][1][b"meta"]
    every = web.post("/topic/dead-letters/replay-all", data={"csrf": csrf, "stream": stream})
    assert "replayed 2 dead letter(s)" in web.get(every.headers["location"]).text
    assert r.xlen(dlq) == 0 and r.xlen(stream) == 6
    make_dead_letters(redis_url, stream, [4], group="others")
    count = r.xlen(dlq)
    typo = web.post("/topic/dead-letters/purge",
                    data={"csrf": csrf, "stream": stream, "confirm": stream + "x"})  # fmt: skip
    assert "not purged" in web.get(typo.headers["location"]).text and r.xlen(dlq) == count
    purged = web.post("/topic/dead-letters/purge",
                      data={"csrf": csrf, "stream": stream, "confirm": stream})  # fmt: skip
    assert f"purged {count} dead letter(s)" in web.get(purged.headers["location"]).text
    assert r.xlen(dlq) == 0


def test_terminate_needs_the_topic_name_typed(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    csrf = log_in(web)
    typo = web.post("/topic/terminate", data={"csrf": csrf, "stream": stream, "confirm": "yes"})
    assert "not terminated" in web.get(typo.headers["location"]).text and r.exists(stream)
    done = web.post("/topic/terminate", data={"csrf": csrf, "stream": stream, "confirm": stream})
    assert done.headers["location"] == "/"
    assert f"terminated {stream}" in web.get("/").text and not r.exists(stream)


def test_a_script_acts_with_a_bearer_token_and_gets_plain_text(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    ids = topic_with_pending(redis_url, r, stream)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    done = web.post("/topic/stop", data={"stream": stream, "id": ids[4]}, headers=auth)
    assert done.status_code == 200 and done.text.startswith(f"stopped {ids[4]}")
    missing = web.post("/topic/resume", data={"stream": stream, "id": ids[3]}, headers=auth)
    assert missing.status_code == 409 and "is not stopped" in missing.text


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


def test_no_page_shows_the_password_of_the_redis_url(
    r: redis.Redis, redis_url: str, stream: str
) -> None:
    user, password = f"dash-{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}"
    r.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
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
        r.execute_command("ACL", "DELUSER", user)


def test_security_headers_and_host_check(web: Web) -> None:
    page = web.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    rebound = web.get("/", headers={"Host": "evil.example"})
    assert rebound.status_code == 400, "a foreign Host header (DNS rebinding) was served"


# -- the command ------------------------------------------------------------------------
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
    started = time.monotonic()
    no_url = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "dashboard"], capture_output=True, text=True,
        env={k: v for k, v in env.items() if k != "STREAMQ_REDIS_URL"}, timeout=60,
    )  # fmt: skip
    assert no_url.returncode == 2 and "no server" in no_url.stderr
    assert time.monotonic() - started < 30
