"""The `streamq` command as a shell user runs it: output and exit codes, errors included."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

pytestmark = pytest.mark.slow


def streamq(
    *args: str, url: str | None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMQ_REDIS_URL"}
    if url:
        env["STREAMQ_REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "streamq.cli", *args],
        env=env, capture_output=True, text=True, timeout=60, input=stdin,
    )  # fmt: skip


def test_help_lists_every_command() -> None:
    out = streamq("--help", url=None).stdout
    for command in ("server", "publish", "info", "pending", "tail", "dlq", "stop-message",
                    "resume-message", "terminate", "cleanup", "bench"):  # fmt: skip
        assert command in out, f"--help does not list {command}"


def test_publish_info_pending_tail(redis_url: str, stream: str) -> None:
    r = redis.Redis.from_url(redis_url)
    published = streamq(
        "publish", stream, "email", '{"to":"a@b.c"}', "--meta", "k=v", url=redis_url
    )
    assert published.returncode == 0, published.stderr
    entry_id = published.stdout.strip()
    assert r.xrange(stream)[0][1] == {
        b"type": b"email",
        b"data": b'{"to":"a@b.c"}',
        b"meta": b'{"k":"v"}',
    }
    r.xgroup_create(stream, "workers", id="0")
    r.xreadgroup("workers", "w1", {stream: ">"})
    info = streamq("info", stream, url=redis_url)
    assert info.returncode == 0
    assert "length        1" in info.stdout
    assert "workers" in info.stdout and "w1(1)" in info.stdout
    pending = streamq("pending", stream, "workers", url=redis_url)
    assert entry_id in pending.stdout and "w1" in pending.stdout
    tail = streamq("tail", stream, "--from", "0", "--count", "1", url=redis_url)
    assert tail.stdout.startswith(entry_id) and '"type": "email"' in tail.stdout


def test_stop_resume_dlq_cleanup_terminate(redis_url: str, stream: str) -> None:
    r = redis.Redis.from_url(redis_url)
    entry_id = r.xadd(stream, {"type": "job", "data": "1"}).decode()
    r.xgroup_create(stream, "g", id="$")
    assert (
        streamq("stop-message", stream, entry_id, url=redis_url).stdout.strip()
        == f"stopped {entry_id}"
    )
    assert entry_id in streamq("info", stream, url=redis_url).stdout
    assert streamq("resume-message", stream, entry_id, url=redis_url).returncode == 0
    assert streamq("dlq", "list", stream, url=redis_url).stdout.strip() == "no dead letters"
    r.xadd(
        f"streamq:{{{stream}}}:dlq",
        {"original_id": "1-0", "type": "job", "data": "2", "error": "boom"},
    )
    assert "boom" in streamq("dlq", "list", stream, url=redis_url).stdout
    assert "replayed 1" in streamq("dlq", "replay", stream, url=redis_url).stdout
    dry = streamq("cleanup", stream, "--dry-run", url=redis_url)
    # the replayed entry came after group g's position: g has not read it, so it stays
    assert dry.returncode == 0 and "would remove 1 " in dry.stdout, dry.stdout
    assert r.xlen(stream) == 2, "--dry-run removed entries"
    beyond = streamq("cleanup", stream, "--dry-run", "--beyond-pending", url=redis_url)
    assert "would remove 1 " in beyond.stdout, beyond.stdout + beyond.stderr
    refused = streamq("terminate", stream, url=redis_url, stdin="")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert streamq("terminate", stream, "--yes", url=redis_url).returncode == 0
    assert not r.exists(stream)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("info", "no-such-stream"), 1, "stream 'no-such-stream' does not exist"),
        (("stop-message", "{stream}", "not-an-id"), 2, "invalid stream entry ID"),
        (("stop-message", "{stream}", "1-1"), 1, "does not exist in stream"),
        (("publish", "{stream}", "bad type", "{}"), 2, "invalid message type"),
        (("publish", "{stream}", "t", "{nope"), 2, "not valid JSON"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(
    redis_url: str, stream: str, args: tuple[str, ...], code: int, message: str
) -> None:
    redis.Redis.from_url(redis_url).xadd(stream, {"type": "x", "data": "1"})
    result = streamq(*(a.replace("{stream}", stream) for a in args), url=redis_url)
    assert result.returncode == code, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unreachable_server_and_missing_url() -> None:
    down = streamq("info", "s", url="redis://127.0.0.1:1/0")
    assert down.returncode == 3 and "cannot reach the server" in down.stderr
    assert "Traceback" not in down.stderr
    missing = streamq("info", "s", url=None)
    assert missing.returncode == 2 and "STREAMQ_REDIS_URL" in missing.stderr


def test_server_command_prints_a_working_url() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "server"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("redis://127.0.0.1:")
        assert redis.Redis.from_url(url).ping()
    finally:
        process.terminate()  # SIGTERM, as a service manager stops it
        process.wait(timeout=10)
        process.stdout.close()  # type: ignore[union-attr]
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url).ping()  # the server went with the command, not orphaned
