"""The dashboard's scheduled messages: listed for everyone, cancelled only with the write
token."""

from __future__ import annotations

import httpx
import pytest
import redis

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq import Publisher
from streamq.wire.keys import Keys
from tests.helpers.dashboard import log_in, table
from tests.helpers.scheduled import SHOWN_ID, schedule_under_an_id_not_utf8

Web = httpx.Client


def test_scheduled_messages_are_listed_and_cancelled_with_the_token(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    with Publisher(redis_url, stream) as publisher:
        publisher.publish("remind", {"user": 7}, delay=3600, schedule_id="remind-7", key="u7")
        publisher.publish("report", {}, delay=7200, schedule_id="report-1")
    page = web.get("/topic/scheduled", params={"stream": stream})
    assert page.status_code == 200  # a topic with only scheduled messages exists
    rows = table(page.text, "scheduled")
    assert [row[:2] for row in rows[1:]] == [["remind-7", "remind"], ["report-1", "report"]]
    assert rows[1][3] == "u7"
    assert "Scheduled (2)" in page.text
    refused = web.post("/topic/scheduled/cancel", data={"stream": stream, "id": "remind-7"})
    assert refused.status_code == 403
    assert r.zcard(Keys(stream).scheduled) == 2
    csrf = log_in(web)
    done = web.post(
        "/topic/scheduled/cancel", data={"csrf": csrf, "stream": stream, "id": "remind-7"}
    )
    assert done.status_code == 303
    after = web.get(done.headers["location"]).text
    assert "cancelled scheduled message remind-7" in after
    assert [row[0] for row in table(after, "scheduled")[1:]] == ["report-1"]
    again = web.post(
        "/topic/scheduled/cancel", data={"csrf": csrf, "stream": stream, "id": "remind-7"}
    )
    assert "is not waiting" in web.get(again.headers["location"]).text


def test_the_scheduled_page_lists_periodic_publishers(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    keys = Keys(stream)
    r.hset(keys.periodic, mapping={
        "report:spec": '{"type": "report", "every": 60, "cron": null}', "report": "1700000040000",
        "junk:spec": "not json",
        "zoned:spec": '{"type": "report", "every": null, "cron": "0 9 * * *", '
                      '"timezone": "Europe/Paris"}',
        "nowhere:spec": '{"type": "report", "every": null, "cron": "0 9 * * *", '
                        '"timezone": "Mars/Olympus_Mons"}',
    })  # fmt: skip
    with Publisher(redis_url, stream) as publisher:
        publisher.publish("remind", {}, delay=3600)
    page = web.get("/topic/scheduled", params={"stream": stream}).text
    rows = table(page, "periodic")
    assert [row[:3] for row in rows[1:]] == [
        ["report", "report", "every 60s"],
        ["zoned", "report", "cron 0 9 * * * (Europe/Paris)"],
    ]  # a zone this system lacks is not listed
    assert rows[1][3].startswith("2023-11-14T22:14")


def test_a_scheduled_id_that_is_not_utf8_is_listed_escaped(
    web: Web, r: redis.Redis, redis_url: str, stream: str
) -> None:
    schedule_under_an_id_not_utf8(redis_url, r, stream)
    page = web.get("/topic/scheduled", params={"stream": stream})
    assert page.status_code == 200, page.text
    assert [row[:2] for row in table(page.text, "scheduled")[1:]] == [[SHOWN_ID, "report"]]
