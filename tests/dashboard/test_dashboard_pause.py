"""Pausing and resuming a consumer group, or a type in it, from the dashboard: shown in
the groups table, toggled behind the write token as every other action."""

from __future__ import annotations

import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq.dashboard.names import encoded
from streamq.wire.keys import Keys
from tests.helpers.dashboard import (
    TOKEN,
    csrf_of,
    log_in,
    row_starting,
    topic_with_pending,
    visible_text,
)

Web = httpx.Client


def paused_cell(page: str) -> str:
    header = row_starting(page, "groups", "Group")
    return row_starting(page, "groups", "billing")[header.index("Paused")].strip()


def text_at(web: Web, response: httpx.Response) -> str:
    """The text of the page an action sent the browser back to."""
    return visible_text(web.get(response.headers["location"]).text)


def test_a_group_and_a_type_are_paused_and_resumed_from_the_topic_page(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    assert (
        "Log in with the write token</a> to pause or resume"
        in web.get("/topic", params={"stream": stream}).text
    )
    csrf = log_in(web)
    page = web.get("/topic", params={"stream": stream}).text
    assert paused_cell(page).startswith("-") and 'action="/topic/pause"' in page
    group = {"csrf": csrf, "stream": stream, "group64": encoded("billing")}
    paused = web.post("/topic/pause", data=group)
    assert paused.status_code == 303 and paused.headers["location"].startswith("/topic?")
    page = web.get(paused.headers["location"]).text
    assert "paused group 'billing'" in visible_text(page) and paused_cell(page).startswith(
        "whole group"
    )
    assert r.hkeys(Keys(stream).paused("billing")) == [b"*"]
    assert r.hkeys(Keys(stream).paused("audit")) == []  # the other group goes on
    typed = web.post("/topic/pause", data={**group, "type": "email"})
    assert "paused type 'email' in group 'billing'" in text_at(web, typed)
    again = web.post("/topic/pause", data={**group, "type": "email"})
    assert "was paused already" in text_at(web, again)
    resumed = web.post("/topic/unpause", data=group)
    page = web.get(resumed.headers["location"]).text
    assert "resumed group 'billing'" in visible_text(page) and paused_cell(page).startswith("email")
    web.post("/topic/unpause", data={**group, "type": "email"})
    assert not r.exists(Keys(stream).paused("billing"))
    gone = web.post("/topic/unpause", data={**group, "type": "email"})
    assert "was not paused" in text_at(web, gone)


def test_a_script_pauses_with_the_bearer_token_and_is_told_what_went_wrong(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    ok = web.post("/topic/pause", data={"stream": stream, "group": "audit"}, headers=auth)
    assert (ok.status_code, ok.text) == (200, "paused group 'audit'")
    assert r.hkeys(Keys(stream).paused("audit")) == [b"*"]
    bad_type = web.post(
        "/topic/pause", data={"stream": stream, "group": "audit", "type": "a b"}, headers=auth
    )
    assert bad_type.status_code == 400 and "pause/resume type" in bad_type.text
    nobody = web.post("/topic/pause", data={"stream": stream, "group": "nobody"}, headers=auth)
    assert nobody.status_code == 404 and "has no consumer group 'nobody'" in nobody.text
    no_group = web.post("/topic/unpause", data={"stream": stream}, headers=auth)
    assert no_group.status_code == 400
    assert r.hkeys(Keys(stream).paused("audit")) == [b"*"]


def test_the_pause_form_needs_the_csrf_token_of_the_session(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    csrf = log_in(web)
    assert csrf == csrf_of(web.get("/topic", params={"stream": stream}).text)
    refused = web.post("/topic/pause", data={"stream": stream, "group": "billing"})
    assert refused.status_code == 403 and not r.exists(Keys(stream).paused("billing"))


def test_the_topic_page_says_where_the_entries_consumers_hold_back_are_counted(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    text = visible_text(web.get("/topic", params={"stream": stream}).text)
    assert "counted by its own process" in text and "streamq_waiting_entries" in text
