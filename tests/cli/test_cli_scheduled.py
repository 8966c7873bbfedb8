"""``streamq publish --delay`` and ``streamq scheduled list|cancel``, as a shell user runs them."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import redis

from tests.helpers.cli import streamq
from tests.helpers.scheduled import SHOWN_ID, schedule_under_an_id_not_utf8

pytestmark = pytest.mark.slow


def test_schedule_list_and_cancel_from_the_shell(redis_url: str, stream: str) -> None:
    published = streamq(
        "publish", stream, "remind", '{"user": 7}', "--delay", "3600", "--schedule-id", "r-7",
        url=redis_url,
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    assert published.stdout.strip() == "r-7"
    listed = streamq("scheduled", "list", stream, url=redis_url)
    assert listed.returncode == 0 and listed.stdout.startswith("r-7  remind  due ")
    rows = streamq("scheduled", "list", stream, "--json", url=redis_url).stdout.splitlines()
    assert [json.loads(row)["id"] for row in rows] == ["r-7"]
    assert streamq("scheduled", "cancel", stream, "r-7", url=redis_url).returncode == 0
    again = streamq("scheduled", "cancel", stream, "r-7", url=redis_url)
    assert again.returncode == 1 and "not waiting" in again.stderr
    assert streamq("scheduled", "list", stream, url=redis_url).stdout.strip() == (
        "no scheduled messages"
    )
    bad = streamq("publish", stream, "remind", "{}", "--delay", "-5", url=redis_url)
    assert bad.returncode == 2 and "delay" in bad.stderr


def test_periodic_publishers_are_listed_from_the_shell(redis_url: str, stream: str) -> None:
    from streamq.wire.keys import Keys
    from tests.helpers.clients import sync_client

    with sync_client(redis_url, stream) as r:
        r.hset(Keys(stream).periodic, "hourly:spec", '{"type": "report", "every": null, '
               '"cron": "0 * * * *"}')  # fmt: skip
        r.hset(Keys(stream).periodic, "morning:spec", '{"type": "report", "every": null, '
               '"cron": "0 9 * * *", "timezone": "Europe/Paris"}')  # fmt: skip
    listed = streamq("scheduled", "periodic", stream, url=redis_url)
    assert listed.returncode == 0, listed.stderr
    hourly, morning = listed.stdout.splitlines()
    assert hourly.startswith("hourly  report  cron 0 * * * *  last never  next ")
    assert morning.startswith("morning  report  cron 0 9 * * * (Europe/Paris)  last never  next ")
    next_tick = datetime.fromisoformat(morning.rpartition("next ")[2])
    assert next_tick.astimezone(ZoneInfo("Europe/Paris")).hour == 9  # 07:00 or 08:00 UTC
    rows = [json.loads(line) for line in streamq(
        "scheduled", "periodic", stream, "--json", url=redis_url).stdout.splitlines()]  # fmt: skip
    assert [row["timezone"] for row in rows] == [None, "Europe/Paris"]


def test_info_shows_how_many_wait_and_the_next_due_time(redis_url: str, stream: str) -> None:
    assert streamq("publish", stream, "job", "1", url=redis_url).returncode == 0
    scheduled = streamq("publish", stream, "job", "2", "--delay", "3600", url=redis_url)
    assert scheduled.returncode == 0, scheduled.stderr
    out = streamq("info", stream, url=redis_url).stdout
    assert "scheduled     1 (next due 20" in out
    listed = json.loads(streamq("info", stream, "--json", url=redis_url).stdout)
    assert listed["scheduled"] == 1 and listed["next_due"].startswith("20")


def test_a_scheduled_id_that_is_not_utf8_is_listed_escaped(
    redis_url: str, r: redis.Redis, stream: str
) -> None:
    schedule_under_an_id_not_utf8(redis_url, r, stream)
    listed = streamq("scheduled", "list", stream, url=redis_url)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{SHOWN_ID}  report  due "), listed.stdout
    as_json = streamq("scheduled", "list", stream, "--json", url=redis_url)
    assert as_json.returncode == 0, as_json.stderr
    assert [json.loads(row)["id"] for row in as_json.stdout.splitlines()] == [SHOWN_ID]
