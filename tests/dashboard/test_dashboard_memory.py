"""The dashboard over big entries: ``streamq dashboard`` as its own process, over a topic
whose dead letters and pending entries hold 50 MB each. Pages fetch a bounded prefix of
each field (cut on the server), say how big the field was and link its download; eight
parallel loads of any page keep the process small; a download streams one field whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import psutil
import pytest

from streamq.publish.scheduling import encode_payload
from streamq.topic.halted import halted_key, record_field
from streamq.wire.keys import Keys
from tests.helpers.clients import sync_client

pytest.importorskip("jinja2", reason="the dashboard tests need the [dashboard] extra")

from streamq.dashboard.paging import HALTED_PAGE
from tests.helpers.dashboard import table

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BIG = 50 * 1024 * 1024
MAX_RSS = 150 * 1024 * 1024
PARALLEL = 8


@pytest.fixture
def dashboard(redis_url: str) -> Iterator[tuple[str, psutil.Process]]:
    """``streamq dashboard`` on a free port: its address and its process."""
    env = {k: v for k, v in os.environ.items() if k != "STREAMQ_DASHBOARD_TOKEN"}
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "dashboard", "--url", redis_url, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        address = process.stdout.readline().strip() if process.stdout else ""
        assert address.startswith("http://127.0.0.1:"), f"no address: {address!r}"
        yield address.rstrip("/"), psutil.Process(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


def big_topic(redis_url: str, stream: str) -> bytes:
    """Two pending 50 MB entries in ``stream`` and three 50 MB dead letters, written raw;
    return the first letter's data."""
    with sync_client(redis_url, stream) as r:
        datas = [bytes([65 + i]) * BIG for i in range(3)]
        r.xgroup_create(stream, "billing", id="0", mkstream=True)
        for data in datas[:2]:
            r.xadd(stream, {"type": "job", "data": data})
        r.xreadgroup("billing", "c1", {stream: ">"})
        for i, data in enumerate(datas):
            letter = {
                "original_id": f"1-{i}", "type": "job", "data": data, "meta": b"m" * BIG,
                "group": "billing", "consumer": "c1", "error": "too big", "attempts": "5",
                "dead_at_ms": str(int(time.time() * 1000)), "traceback": b"t" * BIG,
            }  # fmt: skip
            r.xadd(Keys(stream).dead_letters, letter)
        return datas[0]


class PeakRss:
    """The largest RSS of ``process`` seen while the block runs (sampled every 10 ms)."""

    def __init__(self, process: psutil.Process) -> None:
        self.process, self.peak = process, 0
        self._done = threading.Event()

    def __enter__(self) -> PeakRss:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)
        self._sample()

    def _sample(self) -> None:
        self.peak = max(self.peak, self.process.memory_info().rss)

    def _watch(self) -> None:
        while not self._done.wait(0.01):
            self._sample()


def test_parallel_page_loads_over_50_mb_entries_keep_the_dashboard_small(
    redis_url: str, stream: str, dashboard: tuple[str, psutil.Process]
) -> None:
    base, process = dashboard
    first_data = big_topic(redis_url, stream)
    name = quote(stream)
    pages = ["/", f"/topic?stream={name}", f"/topic/live?stream={name}",
             f"/topic/pending?stream={name}", f"/topic/dead-letters?stream={name}",
             f"/topic/stopped?stream={name}", f"/topic/terminate?stream={name}"]  # fmt: skip
    with httpx.Client(base_url=base, timeout=120) as web, ThreadPoolExecutor(PARALLEL) as pool:
        for path in pages:
            with PeakRss(process) as rss:
                statuses = [r.status_code for r in pool.map(web.get, [path] * PARALLEL)]
            assert set(statuses) <= {200, 503} and 200 in statuses, (path, statuses)
            assert rss.peak < MAX_RSS, f"{path}: the dashboard grew to {rss.peak >> 20} MB"
        html = web.get(f"/topic/dead-letters?stream={name}").text
        assert html.count(f"({BIG} bytes, cut)") == 9, "each big field should say it was cut"
        assert "AAAA" in html and len(html) < 3 * 1024 * 1024
        link = html.split('class="download" href="')[1].split('"')[0].replace("&amp;", "&")
        with PeakRss(process) as rss, web.stream("GET", link) as download:
            assert download.status_code == 200, download.read()[:500]
            assert "attachment" in download.headers["content-disposition"]
            digest, size = hashlib.sha256(), 0
            for chunk in download.iter_bytes():
                digest.update(chunk)
                size += len(chunk)
        assert size == BIG and digest.digest() == hashlib.sha256(first_data).digest()
        assert rss.peak < MAX_RSS, f"a download grew the dashboard to {rss.peak >> 20} MB"


SCHEDULED = 200
SCHEDULED_BIG = 2 * 1024 * 1024


def scheduled_topic(redis_url: str, stream: str) -> list[str]:
    """``SCHEDULED`` messages of 2 MB waiting in ``stream``'s schedule, stored as
    ``publish(..., delay=)`` stores them, each with a key holding quotes and backslashes;
    return their keys by due time."""
    keys = Keys(stream)
    due = int(time.time() * 1000) + 3_600_000
    names = []
    with sync_client(redis_url, stream) as r:
        r.xadd(stream, {"type": "job", "data": "1"})
        for i in range(SCHEDULED):
            key = f'k{i:03}","key","x\\"'
            data = json.dumps("x" * SCHEDULED_BIG)
            payload = encode_payload({"type": "job", "data": data}, key)
            r.hset(keys.scheduled_payloads, f"s{i:03}", payload)
            r.zadd(keys.scheduled, {f"s{i:03}": due + i})
            names.append(key)
    return names


def test_parallel_loads_of_the_scheduled_page_never_read_a_payload_whole(
    redis_url: str, stream: str, dashboard: tuple[str, psutil.Process]
) -> None:
    base, process = dashboard
    names = scheduled_topic(redis_url, stream)
    path = f"/topic/scheduled?stream={quote(stream)}"
    with httpx.Client(base_url=base, timeout=120) as web, ThreadPoolExecutor(PARALLEL) as pool:
        with PeakRss(process) as rss:
            pages = list(pool.map(web.get, [path] * PARALLEL))
        assert {p.status_code for p in pages} <= {200, 503}, [p.status_code for p in pages]
        assert rss.peak < MAX_RSS, f"the dashboard grew to {rss.peak >> 20} MB"
        html = web.get(path).text
    rows = table(html, "scheduled")[1:]
    assert len(rows) == SCHEDULED and len(html) < 1024 * 1024
    assert [row[1] for row in rows] == ["job"] * SCHEDULED
    assert [row[3] for row in rows] == names


HALTED = 100_000


def many_halted_keys(redis_url: str, stream: str) -> None:
    """``HALTED`` keys halted in ordered mode on ``stream``, as an owner records them."""
    with sync_client(redis_url, stream) as r:
        r.xadd(stream, {"type": "job", "data": "1"})
        record = json.dumps({"id": "1-0", "reason": "failed " * 20, "action": None})
        for start in range(0, HALTED, 5_000):
            fields = {record_field("billing", f"key-{n}"): record
                      for n in range(start, start + 5_000)}  # fmt: skip
            r.hset(halted_key(stream), mapping=fields)


def test_parallel_loads_of_the_halted_keys_page_read_one_page(
    redis_url: str, stream: str, dashboard: tuple[str, psutil.Process]
) -> None:
    base, process = dashboard
    many_halted_keys(redis_url, stream)
    path = f"/topic/halted?stream={quote(stream)}"
    with httpx.Client(base_url=base, timeout=120) as web, ThreadPoolExecutor(PARALLEL) as pool:
        with PeakRss(process) as rss:
            pages = list(pool.map(web.get, [path] * PARALLEL))
        assert {p.status_code for p in pages} <= {200, 503}, [p.status_code for p in pages]
        assert rss.peak < MAX_RSS, f"the dashboard grew to {rss.peak >> 20} MB"
        html = web.get(path).text
    assert len(html) < 512 * 1024, f"a page of {len(html) >> 10} KB"
    assert 0 < len(table(html, "halted")) - 1 <= 2 * HALTED_PAGE and 'rel="next"' in html
