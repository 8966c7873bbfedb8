"""Pausing and resuming a consumer group, or a type in it, from the dashboard: shown in
the groups table, toggled behind the write token as every other action; and what the
group's running consumers hold back for flow control, by reason, as they reported it."""

from __future__ import annotations

import anyio
import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq.dashboard.names import encoded
from streamq.flow.waiting import REPORT_FRESH
from streamq.wire.keys import Keys
from tests.helpers.dashboard import (
    TOKEN,
    csrf_of,
    log_in,
    row_starting,
    text_of,
    topic_with_pending,
    visible_text,
)
from tests.helpers.held_back import HELD_BACK_LIMITS, register_held_back_handlers
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

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


def waiting_cell(page: str, group: str = "g") -> str:
    header = row_starting(page, "groups", "Group")
    return " ".join(row_starting(page, "groups", group)[header.index("Waiting")].split())


async def shown_text(web: Web, path: str, stream: str) -> str:
    response = await anyio.to_thread.run_sync(lambda: web.get(path, params={"stream": stream}))
    assert response.status_code == 200, response.text
    return response.text


@pytest.mark.anyio
async def test_the_topic_page_shows_what_running_consumers_hold_back_by_reason(
    web: Web, make_queue: QueueFactory, stream: str
) -> None:
    mq = make_queue(rate_limits=HELD_BACK_LIMITS)
    register_held_back_handlers(mq, [])  # of 4 e-mails 3 wait, 2 reports, 1 call
    async with mq:
        await mq.pause("report")
        async with mq.running():
            await mq.publish_many("email", [0, 1, 2, 3])
            await mq.publish_many("report", [0, 1])
            await mq.publish("call", 0, key="tenant-a")
            expected = "pause 2 · rate limit 3 · throttle 1"
            cell: list[str] = [""]

            async def shown() -> bool:  # the live fragment the page polls every 2 s
                cell[0] = waiting_cell(await shown_text(web, "/topic/live", stream))
                return cell[0].startswith(expected)

            await wait_for(shown, timeout=5, what=f"the page showing {expected!r}")
            assert f"({mq.consumer}: 2/3/1)" in cell[0]
            page = await shown_text(web, "/topic", stream)
            assert waiting_cell(page).startswith(expected)
            note = text_of(page, "waiting-hint")
            assert f"within the last {int(REPORT_FRESH)} s" in note
            assert "streamq_waiting_entries" in note
        # stopped: its report is removed, the page shows nothing waiting
        assert waiting_cell(await shown_text(web, "/topic/live", stream)) == "-"


def test_a_topic_without_reports_shows_nothing_waiting_and_says_where_figures_come_from(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    topic_with_pending(redis_url, r, stream)
    page = web.get("/topic", params={"stream": stream}).text
    assert waiting_cell(page, "billing") == "-" and waiting_cell(page, "audit") == "-"
    assert "as they reported them within the last" in visible_text(page)
