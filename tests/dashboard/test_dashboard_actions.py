"""The dashboard's actions over HTTP: each refused with 403 without the write token (no
session, a wrong Bearer token, a missing or stale CSRF token, another origin, a read-only
dashboard) and leaving the data as it was; with the token, each does what it says."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq.cli.render import one_line
from streamq.dashboard import create_app
from streamq.dashboard.app import LOOPBACK_HOSTS
from streamq.dashboard.names import encoded
from streamq.dashboard.throttle import MAX_TOTAL_FAILURES, WINDOW, LoginThrottle
from streamq.testing import delete_stream_keys
from streamq.wire.keys import Keys
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import (
    TOKEN,
    csrf_of,
    log_in,
    make_dead_letters,
    publish,
    serving,
    table,
    topic_with_pending,
)

Web = httpx.Client


# -- the write token --------------------------------------------------------------------
ACTIONS = [
    "/topic/stop", "/topic/resume", "/topic/dead-letters/replay",
    "/topic/dead-letters/replay-all", "/topic/dead-letters/purge", "/topic/terminate",
    "/topic/pause", "/topic/unpause",
]  # fmt: skip


def action_form(stream: str, entry_id: str, letter_id: str, path: str) -> dict[str, str]:
    ids = {
        "/topic/stop": entry_id,
        "/topic/resume": entry_id,
        "/topic/dead-letters/replay": letter_id,
    }
    return {"stream": stream, "id": ids.get(path, ""), "confirm": stream, "group": "g"}


@pytest.fixture
def victim(r: redis.Redis, redis_url: str, stream: str) -> tuple[str, str]:
    """A topic with an entry, a stopped entry, a dead letter and a type paused in group
    ``g``: (entry ID, letter ID)."""
    make_dead_letters(redis_url, stream, [1])
    entry_id = publish(redis_url, stream, 1)[0]
    r.hset(Keys(stream).stopped, entry_id, "")
    r.hset(Keys(stream).paused("g"), "job", "1700000000000")
    return entry_id, r.xrange(Keys(stream).dead_letters)[0][0].decode()


def snapshot(r: redis.Redis, stream: str) -> tuple[object, ...]:
    keys = Keys(stream)
    return (r.xlen(stream), r.xrange(keys.dead_letters), r.hgetall(keys.stopped),
            r.xinfo_groups(stream), r.hgetall(keys.paused("g")))  # fmt: skip


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
    assert "log in to change" in web.get("/").text


# -- guessing the token -----------------------------------------------------------------
@pytest.fixture
def throttled_site(redis_url: str) -> Iterator[str]:
    """A dashboard that refuses an address after 3 wrong tokens within 3 s."""
    app = create_app(redis_url, token=TOKEN, allowed_hosts=LOOPBACK_HOSTS)
    app.state.access.throttle = LoginThrottle(max_failures=3, window=3.0)
    with serving(app) as base:
        yield base


def from_address(base: str, address: str) -> httpx.Client:
    """A client of ``base`` whose connections come from the loopback ``address``."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=base, transport=transport, timeout=30)


def test_wrong_tokens_from_one_address_get_429_for_a_while(throttled_site: str) -> None:
    with from_address(throttled_site, "127.0.0.1") as guesser:
        for _ in range(3):
            assert guesser.post("/login", data={"token": "guess"}).status_code == 403
        refused = guesser.post("/login", data={"token": "guess"})
        assert refused.status_code == 429 and "too many wrong tokens" in refused.text
        wait = int(refused.headers["retry-after"])
        assert 1 <= wait <= 3
        right = guesser.post("/login", data={"token": TOKEN})
        assert right.status_code == 429 and not guesser.cookies, "a throttled login succeeded"
        bearer = guesser.post("/topic/stop", data={"stream": "s", "id": "1-0"},
                              headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert bearer.status_code == 429
        with from_address(throttled_site, "127.0.0.2") as other:
            assert other.post("/login", data={"token": TOKEN}).status_code == 303
        time.sleep(wait)
        assert guesser.post("/login", data={"token": TOKEN}).status_code == 303


def test_wrong_bearer_tokens_count_as_guesses_too(throttled_site: str) -> None:
    wrong = {"Authorization": "Bearer not-the-token"}
    with from_address(throttled_site, "127.0.0.1") as script:
        for _ in range(3):
            response = script.post("/topic/stop", data={"stream": "s", "id": "1-0"}, headers=wrong)
            assert response.status_code == 403
        assert script.post("/login", data={"token": TOKEN}).status_code == 429


def test_guesses_from_rotating_loopback_addresses_are_throttled_together(
    redis_url: str,
) -> None:
    """Every 127.x.y.z is loopback: one wrong guess per address never reaches the limit of
    an address, so wrong tokens are counted for all addresses together too."""
    app = create_app(redis_url, token=TOKEN, allowed_hosts=LOOPBACK_HOSTS)
    with serving(app) as base:
        statuses = []
        for n in range(2, 2 + MAX_TOTAL_FAILURES + 5):
            with from_address(base, f"127.0.{n // 250}.{n % 250 + 1}") as guesser:
                statuses.append(guesser.post("/login", data={"token": f"guess-{n}"}).status_code)
        assert statuses[:MAX_TOTAL_FAILURES] == [403] * MAX_TOTAL_FAILURES
        assert set(statuses[MAX_TOTAL_FAILURES:]) == {429}, statuses
        with from_address(base, "127.0.9.9") as newcomer:
            right = newcomer.post("/login", data={"token": TOKEN})
            assert right.status_code == 429 and not newcomer.cookies
            assert 1 <= int(right.headers["retry-after"]) <= WINDOW


def test_the_throttle_forgets_old_failures_and_successful_addresses() -> None:
    now = [1000.0]
    throttle = LoginThrottle(max_failures=2, window=60.0, max_addresses=2, clock=lambda: now[0])
    throttle.failed("a")
    now[0] += 30
    throttle.failed("a")
    assert throttle.retry_after("a") == 30  # until the first failure is 60 s old
    now[0] += 30
    assert throttle.retry_after("a") is None
    throttle.failed("b")
    throttle.failed("b")
    throttle.succeeded("b")
    assert throttle.retry_after("b") is None
    for address in ("c", "c", "d", "d", "e"):  # at most 2 addresses remembered
        throttle.failed(address)
    assert throttle.retry_after("c") is None and throttle.retry_after("d") == 60


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
    assert missing.status_code == 404 and "is not stopped" in missing.text
    typo = web.post("/topic/terminate", data={"stream": stream, "confirm": "?"}, headers=auth)
    assert typo.status_code == 400 and "not terminated" in typo.text
    # a form the script got wrong: the reason in plain text too, not the error page's HTML
    release = web.post("/topic/halted/release", data={"stream": stream}, headers=auth)
    assert release.status_code == 400 and release.headers["content-type"].startswith(
        "text/plain"
    ), release.headers
    assert release.text.strip() == "the form has no 'group'", release.text
    gone = web.post("/topic/stop", data={"stream": f"{stream}-none", "id": "1-0"}, headers=auth)
    assert gone.headers["content-type"].startswith("text/plain") and "<html" not in gone.text


def test_a_name_with_control_characters_round_trips_through_the_forms(
    web: Web, redis_url: str
) -> None:
    """The pages' forms carry names encoded (stream64, group64); scripts may send them
    plain; a purge is confirmed with the name as the page shows it."""
    stream = f"n\x00\r\n\t ü/%+&{uuid.uuid4().hex[:8]}"
    group = "g\r\n\x00"
    r = sync_client(redis_url, stream)
    try:
        entry_id = r.xadd(stream, {"type": "job", "data": "1"}).decode()
        r.xgroup_create(stream, "other", id="0")
        r.xgroup_create(stream, group, id="0")
        r.xreadgroup(group, "c1", {stream: ">"})
        for _ in range(2):
            r.xadd(Keys(stream).dead_letters, {"type": "job", "data": "2"})
        page = web.get("/topic/pending", params={"stream": stream}).text
        stream64, group64 = encoded(stream), encoded(group)
        assert f'name="stream64" value="{stream64}"' in page and f'value="{group64}"' in page
        filtered = web.get("/topic/pending", params={"stream64": stream64, "group64": group64})
        assert [row[0] for row in table(filtered.text, "pending")[1:]] == [entry_id]
        csrf = log_in(web)
        stop = web.post("/topic/stop", data={"csrf": csrf, "stream64": stream64, "id": entry_id})
        assert stop.status_code == 303 and r.hexists(Keys(stream).stopped, entry_id)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=web.base_url, headers=bearer) as script:  # no session
            resume = script.post("/topic/resume", data={"stream": stream, "id": entry_id})
            assert resume.status_code == 200 and "resumed" in resume.text
            bad = script.post("/topic/dead-letters/purge", data={"stream64": "*", "confirm": "x"})
            assert bad.status_code == 400 and "not a name encoded" in bad.text
            purge = {"stream64": stream64, "confirm": one_line(stream)}
            purged = script.post("/topic/dead-letters/purge", data=purge)
            assert purged.text == "purged 2 dead letter(s)"
    finally:
        r.close()
        delete_stream_keys(redis_url, stream)
