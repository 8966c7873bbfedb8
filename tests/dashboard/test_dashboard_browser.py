"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright
with ``executable_path`` set to it; no downloaded browser): open the topics, open a topic,
watch its lag change after publishing, a partitioned topic's partitions, replay a dead
letter with the token, screenshots.

``make test`` installs chromium and playwright when they are missing; these tests skip,
saying why, only where that was impossible.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")
pytest.importorskip(
    "playwright.sync_api",
    reason="the playwright package is missing (make test installs it: pip install playwright)",
)

from playwright.sync_api import Browser, Page, expect, sync_playwright

from streamq.cli.render import one_line
from streamq.dashboard import create_app
from streamq.dashboard.app import LOOPBACK_HOSTS
from streamq.dashboard.samples import SampleStore
from streamq.testing import delete_stream_keys
from streamq.wire.keys import Keys
from tests.helpers.clients import sync_client
from tests.helpers.dashboard import (
    TOKEN,
    forget_topic,
    make_dead_letters,
    partitioned_topic,
    publish,
    serving,
)

pytestmark = pytest.mark.slow
# Chromium as root needs no sandbox; the rest keeps it off a closed network's hosts.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]  # fmt: skip
LIVE_TIMEOUT_MS = 15_000  # the page polls every 2 s; a loaded machine may be slow


def chromium_path() -> str:
    found = os.environ.get("STREAMQ_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.skip("Debian's chromium is not installed (make test installs it: "
                    "apt-get install chromium); set $STREAMQ_CHROMIUM to use another")  # fmt: skip
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture
def site(redis_url: str) -> Iterator[str]:
    with serving(create_app(redis_url, token=TOKEN, allowed_hosts=LOOPBACK_HOSTS)) as base:
        yield base


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser tab; the test fails if a page logged an error (a CSP refusal, a
    script error, a missing file)."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    context.close()
    assert not errors, f"the browser reported errors: {errors}"


def is_png(path: Path) -> bool:
    return path.stat().st_size > 10_000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_open_topics_open_a_topic_and_watch_the_lag_change(
    page: Page, site: str, redis_url: str, stream: str, tmp_path: Path
) -> None:
    publish(redis_url, stream, 3)
    with sync_client(redis_url, stream) as r:
        r.xgroup_create(stream, "billing", id="0")
    page.goto(site + "/")
    expect(page.locator("h1")).to_have_text("Topics")
    page.locator("#topics").get_by_role("link", name=stream, exact=True).click()
    expect(page.locator("h1")).to_have_text(stream)
    expect(page.locator("#total-lag")).to_have_text("3")
    expect(page.locator("#chart canvas").first).to_be_visible()
    expect(page.locator("#chart-hint")).to_have_count(0)  # the no-JavaScript note is gone
    publish(redis_url, stream, 5)
    expect(page.locator("#total-lag")).to_have_text("8", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#length")).to_have_text("8")
    # the chart is redrawn with each poll's samples (after htmx settles the swap)
    expect(page.locator("#chart")).to_have_attribute("data-points", re.compile(r"^([2-9]|\d\d+)$"))
    shot = tmp_path / "topic.png"
    page.screenshot(path=str(shot), full_page=True)
    assert is_png(shot), "the screenshot is not a PNG of a rendered page"


def test_a_partitioned_topic_shows_its_partitions_and_their_lag(
    page: Page, site: str, redis_url: str, tmp_path: Path
) -> None:
    topic = f"test-{uuid.uuid4().hex[:12]}"
    try:
        partitioned_topic(redis_url, topic)  # 3 partitions of 3 entries; 1 of each read
        page.goto(site + "/")
        listed = page.locator("#topics tr", has=page.get_by_role("link", name=topic, exact=True))
        expect(listed).to_have_count(1)
        listed.get_by_role("link", name=topic, exact=True).click()
        expect(page.locator("#partition-count")).to_have_text("3")
        partitions = page.locator("#partitions tbody tr")
        expect(partitions).to_have_count(3)
        expect(page.locator("#total-lag")).to_have_text("6")
        partitioned_topic(redis_url, topic, entries=6, read=0)  # 2 more in each
        expect(page.locator("#total-lag")).to_have_text("12", timeout=LIVE_TIMEOUT_MS)
        expect(partitions.nth(1).locator("td").nth(4)).to_have_text("4")  # partition 1's lag
        expect(page.locator("#chart canvas").first).to_be_visible()
        shot = tmp_path / "partitions.png"
        page.screenshot(path=str(shot), full_page=True)
        assert is_png(shot), "the screenshot is not a PNG of a rendered page"
    finally:
        forget_topic(redis_url, topic, 3)


def test_replay_a_dead_letter_with_the_token(
    page: Page, site: str, redis_url: str, stream: str, tmp_path: Path
) -> None:
    make_dead_letters(redis_url, stream, [{"order": 42}])
    r = sync_client(redis_url, stream)
    page.goto(f"{site}/topic/dead-letters?stream={stream}")
    expect(page.locator("article.letter")).to_have_count(1)
    expect(page.locator("article.letter .reason")).to_contain_text("cannot handle {'order': 42}")
    expect(page.get_by_role("button", name="Replay", exact=True)).to_have_count(0)
    page.get_by_role("link", name="Log in with the write token").click()
    page.get_by_label("Write token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("h1")).to_have_text("Dead letters")  # back where it came from
    page.screenshot(path=str(tmp_path / "dead-letters.png"), full_page=True)
    page.get_by_role("button", name="Replay", exact=True).click()
    expect(page.locator(".flash.ok")).to_contain_text("replayed dead letter")
    expect(page.locator("article.letter")).to_have_count(0)
    assert r.xlen(Keys(stream).dead_letters) == 0
    assert r.xrevrange(stream, count=1)[0][1][b"data"] == b'{"order":42}'
    r.close()
    assert is_png(tmp_path / "dead-letters.png")


def test_pages_are_readable_without_javascript(
    browser: Browser, site: str, redis_url: str, stream: str
) -> None:
    publish(redis_url, stream, 2)
    with sync_client(redis_url, stream) as r:
        r.xgroup_create(stream, "billing", id="0")
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        tab.goto(f"{site}/topic?stream={stream}")
        expect(tab.locator("#total-lag")).to_have_text("2")
        expect(tab.locator("#groups")).to_contain_text("billing")
        expect(tab.get_by_text("The chart needs JavaScript")).to_be_visible()
    finally:
        context.close()


def test_a_stream_named_with_control_characters_goes_through_forms_and_actions(
    page: Page, site: str, redis_url: str
) -> None:
    """The browser rewrites NUL and CR in form fields (and CR LF in option values): names
    travel encoded, so the filter form and every action reach the very stream."""
    stream = f"q\x00 n\r\ne\tü/%2F%20+&名 {uuid.uuid4().hex[:8]}"
    group, shown_stream = "g\r\nx\x00", one_line(stream)
    letters = Keys(stream).dead_letters
    r = sync_client(redis_url, stream)
    try:
        ids = [r.xadd(stream, {"type": "job", "data": str(i)}).decode() for i in range(3)]
        r.xgroup_create(stream, "audit", id="0")
        r.xgroup_create(stream, group, id="0")
        r.xreadgroup(group, "c1", {stream: ">"}, count=2)
        for i in range(2):
            r.xadd(letters, {"type": "job", "data": f'"letter {i}"', "original_id": ids[2]})
        page.goto(site + "/")
        page.locator("#topics a", has_text=shown_stream).click()
        expect(page.locator("h1")).to_have_text(shown_stream)
        page.get_by_role("link", name="Pending", exact=True).click()
        page.get_by_label("Group").select_option(label=f"{one_line(group)} (2)")
        page.get_by_role("button", name="Show").click()
        expect(page.locator("#pending tbody tr")).to_have_count(2)
        page.get_by_role("link", name="log in to change").click()
        page.get_by_label("Write token").fill(TOKEN)
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("#pending tbody tr")).to_have_count(2)  # back where it came from
        page.get_by_role("button", name="Stop", exact=True).first.click()
        expect(page.locator(".flash.ok")).to_contain_text(f"stopped {ids[0]}")
        expect(page.locator("#pending tbody tr")).to_have_count(1)
        page.get_by_role("link", name="Stopped IDs (1)").click()
        page.get_by_role("button", name="Resume", exact=True).click()
        expect(page.locator(".flash.ok")).to_contain_text(f"resumed {ids[0]}")
        page.get_by_role("link", name="Dead letters (2)").click()
        page.get_by_role("button", name="Replay", exact=True).first.click()
        expect(page.locator(".flash.ok")).to_contain_text("replayed dead letter")
        page.get_by_label("Type the topic's name to purge all").fill(shown_stream)
        page.get_by_role("button", name="Purge", exact=True).click()
        expect(page.locator(".flash.ok")).to_contain_text("purged 1 dead letter(s)")
        assert r.xlen(stream) == 4 and r.xrevrange(stream, count=1)[0][1][b"data"] == b'"letter 0"'
        page.get_by_role("link", name="Terminate").click()
        page.get_by_label("Type the topic's name to confirm").fill(shown_stream)
        page.get_by_role("button", name="Terminate").click()
        expect(page.locator(".flash.ok")).to_contain_text("terminated")
        assert not r.exists(stream) and not r.exists(letters)
    finally:
        r.close()
        delete_stream_keys(redis_url, stream)


# uPlot draws its axes on a canvas: read the x axis's ticks (times) and their labels (the
# strings drawn) from the chart's uPlot instance, and the years of both as the browser
# sees them (its time zone draws the labels).
X_AXIS = """() => {
  const u = document.getElementById("chart").uplot;
  const splits = u.axes[0]._splits || [];
  return {
    min: u.scales.x.min, max: u.scales.x.max, labels: (u.axes[0]._values || []).map(String),
    years: splits.map((t) => new Date(t * 1000).getFullYear()),
    thisYear: new Date().getFullYear(),
  };
}"""


def test_the_chart_of_one_sample_shows_the_last_minute_of_today(
    page: Page, redis_url: str, stream: str, tmp_path: Path
) -> None:
    """With a single sample uPlot alone would pick an x axis of years (2027 to 2029)."""
    publish(redis_url, stream, 3)
    app = create_app(redis_url, token=TOKEN, allowed_hosts=LOOPBACK_HOSTS)
    app.state.samples = SampleStore(min_interval=3600)  # the first sample stays the only one
    with serving(app) as base:
        page.goto(f"{base}/topic?stream={stream}")
        expect(page.locator("#chart canvas").first).to_be_visible()
        expect(page.locator("#chart")).to_have_attribute("data-points", "1")
        shot = tmp_path / "one-sample.png"
        page.screenshot(path=str(shot), full_page=True)
        axis = page.evaluate(X_AXIS)
    now = time.time()
    seen = f"x axis {axis}; screenshot: {shot}"
    assert axis["labels"] and axis["years"], f"no ticks on the time axis: {seen}"
    assert set(axis["years"]) == {axis["thisYear"]}, f"ticks outside this year: {seen}"
    years_drawn = {int(y) for y in re.findall(r"\b(?:19|20)\d\d\b", " ".join(axis["labels"]))}
    assert years_drawn <= {axis["thisYear"]}, f"labels name another year: {seen}"
    assert now - 600 < axis["min"] < axis["max"] < now + 600, f"not a window around now: {seen}"
    assert axis["max"] - axis["min"] <= 600, f"the window is not minutes: {seen}"
    assert is_png(shot), f"the screenshot is not a PNG of a rendered page: {shot}"


def test_the_access_badge_says_read_only_only_without_a_token(
    page: Page, redis_url: str, stream: str, tmp_path: Path
) -> None:
    publish(redis_url, stream, 1)
    badge = page.locator("header .badge")
    with serving(create_app(redis_url, token=None, allowed_hosts=LOOPBACK_HOSTS)) as base:
        page.goto(f"{base}/topic?stream={stream}")
        expect(badge).to_have_text("read-only")
        login_links = page.locator("header").get_by_role("link", name=re.compile("log in", re.I))
        expect(login_links).to_have_count(0)
        page.locator("header").screenshot(path=str(tmp_path / "read-only.png"))
    with serving(create_app(redis_url, token=TOKEN, allowed_hosts=LOOPBACK_HOSTS)) as base:
        page.goto(f"{base}/topic?stream={stream}")
        expect(badge).to_have_text("log in to change")  # writable, not logged in
        page.locator("header").screenshot(path=str(tmp_path / "not-logged-in.png"))
        page.locator("header").get_by_role("link", name="log in to change").click()
        page.get_by_label("Write token").fill(TOKEN)
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("h1")).to_have_text(stream)  # back where it came from
        expect(badge).to_have_text("write access")
        expect(page.locator("header")).not_to_contain_text("read-only")
        page.locator("header").screenshot(path=str(tmp_path / "logged-in.png"))
    for name in ("read-only", "not-logged-in", "logged-in"):
        shot = tmp_path / f"{name}.png"
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"not a PNG: {shot}"


def test_pause_and_resume_a_group_and_a_type_with_the_token(
    page: Page, site: str, redis_url: str, stream: str
) -> None:
    publish(redis_url, stream, 1)
    r = sync_client(redis_url, stream)
    r.xgroup_create(stream, "billing", id="0")
    page.goto(f"{site}/topic?stream={stream}")
    groups = page.locator("#groups")
    expect(groups.get_by_role("button", name="Pause", exact=True)).to_have_count(0)
    page.get_by_role("link", name="Log in with the write token").click()
    page.get_by_label("Write token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("h1")).to_have_text(stream)
    groups.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator(".flash.ok")).to_contain_text("paused group 'billing'")
    expect(groups.locator("td.paused")).to_contain_text("whole group")
    assert r.hkeys(Keys(stream).paused("billing")) == [b"*"]
    form = page.locator("#pause-type form")
    form.get_by_label("Type").fill("invoice")
    form.get_by_role("button", name="Pause", exact=True).click()
    expect(page.locator(".flash.ok")).to_contain_text("paused type 'invoice' in group 'billing'")
    groups.get_by_role("button", name="Resume").first.click()  # the whole group's
    expect(page.locator(".flash.ok")).to_contain_text("resumed group 'billing'")
    expect(groups.locator("td.paused")).to_contain_text("invoice")
    assert r.hkeys(Keys(stream).paused("billing")) == [b"invoice"]
    r.close()


def test_compressed_and_encrypted_dead_letters_as_shown_with_and_without_a_keyring(
    page: Page, site: str, redis_url: str, stream: str
) -> None:
    pytest.importorskip("cryptography", reason="the payload tests need the [crypto] extra")
    from streamq import Keyring
    from tests.dashboard.test_dashboard_payloads import SECRETS, sealed_letters
    from tests.payload.helpers import KEY1

    sealed_letters(redis_url, stream)
    page.goto(f"{site}/topic/dead-letters?stream={stream}")
    letters = page.locator("article.letter")
    expect(letters).to_have_count(2)
    expect(letters.nth(0).locator(".stored")).to_have_text("stored zstd: shown decoded")
    expect(letters.nth(0).locator("pre.data")).to_contain_text('"name":"customer 199"')
    expect(letters.nth(1).locator(".stored")).to_have_text("stored aesgcm with key 'k1'")
    expect(letters.nth(1).locator(".encrypted")).to_contain_text("this dashboard has no keyring")
    expect(letters.nth(1).locator("pre.data")).to_have_count(0)
    assert "4111" not in page.content()
    with serving(create_app(redis_url, token=None, keyring=Keyring({"k1": KEY1}, "k1"))) as keyed:
        page.goto(f"{keyed}/topic/dead-letters?stream={stream}")
        sealed = page.locator("article.letter").nth(1)
        expect(sealed.locator("pre.data")).to_have_text('{"card":"4111-1111"}')
        expect(sealed.locator("pre.meta")).to_contain_text('"email":"ada@example.org"')
        expect(sealed.locator(".encrypted")).to_have_count(0)
        assert not any(secret in page.content() for secret in SECRETS)
