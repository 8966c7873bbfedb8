"""The `streamq` command as a shell user runs it: output and exit codes, errors included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from streamq._ids import StreamId
from streamq.testing import delete_stream_keys
from tests.helpers.cli import HOME_ENV, streamq, terminal_unsafe
from tests.helpers.clients import sync_client

pytestmark = pytest.mark.slow


def test_help_lists_every_command() -> None:
    out = streamq("--help", url=None).stdout
    for command in ("server", "publish", "info", "pending", "tail", "dlq", "stop-message",
                    "resume-message", "terminate", "cleanup"):  # fmt: skip
        assert command in out, f"--help does not list {command}"


def test_bench_is_not_a_command_of_the_installed_tool() -> None:
    """bench/ is not in the wheel: the command would only work from the source tree."""
    assert "bench" not in streamq("--help", url=None).stdout
    result = streamq("bench", url=None)
    assert result.returncode == 2 and "invalid choice: 'bench'" in result.stderr


def test_publish_info_pending_tail(redis_url: str, stream: str) -> None:
    r = sync_client(redis_url, stream)
    published = streamq(
        "publish", stream, "email", '{"to":"a@b.c"}', "--meta", "k=v", url=redis_url
    )
    assert published.returncode == 0, published.stderr
    entry_id = published.stdout.strip()
    fields = r.xrange(stream)[0][1]
    assert fields.pop(b"pub")  # the publisher's marker (streamq.publish.resend)
    assert fields == {
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
    assert json.loads(tail.stdout)["id"] == entry_id


def test_dlq_list_shows_a_letters_key(redis_url: str, stream: str) -> None:
    r = sync_client(redis_url, stream)
    r.xadd(stream, {"type": "job", "data": "1"})
    r.xadd(
        f"streamq:{{{stream}}}:dlq",
        {"original_id": "1-0", "type": "job", "data": "2", "key": "cust-7", "error": "boom"},
    )
    r.xadd(f"streamq:{{{stream}}}:dlq", {"original_id": "1-1", "type": "job", "data": "3"})
    keyed, keyless = streamq("dlq", "list", stream, url=redis_url).stdout.splitlines()[::2]
    assert "  key cust-7  " in keyed, keyed
    assert " key " not in keyless, "a letter without a key shows none"


def test_publish_at_a_priority_level(redis_url: str, stream: str) -> None:
    """``--priority`` publishes to that level of a topic with priorities (its ID names the
    level's stream); a level the topic does not have is a usage error."""
    from streamq import Publisher
    from streamq.topic.partitions import partition_streams

    with Publisher(redis_url, stream, priorities=3) as publisher:
        publisher.publish("job", 0)  # the topic and its record of 3 levels
    try:
        urgent = streamq("publish", stream, "job", "1", "--priority", "0", url=redis_url)
        assert urgent.returncode == 0, urgent.stderr
        assert urgent.stdout.strip().startswith("0:")  # level 0 of the one partition
        assert sync_client(redis_url, f"{stream}:q0").xlen(f"{stream}:q0") == 1
        beyond = streamq("publish", stream, "job", "1", "--priority", "3", url=redis_url)
        assert beyond.returncode == 2 and "priority" in beyond.stderr, beyond.stderr
    finally:
        for name in (stream, f"{stream}:q0", f"{stream}:q2", *partition_streams(stream, 1)):
            delete_stream_keys(redis_url, name)


def test_stop_resume_dlq_cleanup_terminate(redis_url: str, stream: str) -> None:
    r = sync_client(redis_url, stream)
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
        (("publish", "{stream}", "t", "{}", "--meta", "novalue"), 2, "--meta takes KEY=VALUE"),
        (("pending", "{stream}", "nogroup"), 1, "consumer group 'nogroup' does not exist"),
        (("dlq", "list", "no-such-stream"), 1, "stream 'no-such-stream' does not exist"),
        (("dlq", "replay", "no-such-stream"), 1, "stream 'no-such-stream' does not exist"),
        (("tail", "no-such-stream", "--seconds", "2"), 1, "stream 'no-such-stream' does not"),
        (("tail", "{stream}", "--from", "x"), 2, "invalid stream entry ID"),
        (("--url", "notaurl", "info", "{stream}"), 2, "invalid server URL"),
        (("info", "{stream}", "--url", "redis://h:port/0"), 2, "invalid server URL"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(
    redis_url: str, stream: str, args: tuple[str, ...], code: int, message: str
) -> None:
    sync_client(redis_url, stream).xadd(stream, {"type": "x", "data": "1"})
    result = streamq(*(a.replace("{stream}", stream) for a in args), url=redis_url)
    assert result.returncode == code, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [("dlq", "list"), ("dlq", "replay"), ("pending",)])
def test_a_name_holding_another_type_than_a_stream_is_said_so(
    redis_url: str, stream: str, command: tuple[str, ...]
) -> None:
    """A name another application uses for a string: not "no dead letters", exit 0."""
    client = sync_client(redis_url, stream)
    client.set(stream, "theirs")
    try:
        args = (*command, stream, *(["g"] if command == ("pending",) else []))
        result = streamq(*args, url=redis_url)
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"{stream!r} is not a stream: it holds a string" in result.stderr, result.stderr
    finally:
        client.delete(stream)


def test_unreachable_server_and_missing_url() -> None:
    down = streamq("info", "s", url="redis://127.0.0.1:1/0")
    assert down.returncode == 3 and "cannot reach the server" in down.stderr
    assert "Traceback" not in down.stderr
    missing = streamq("info", "s", url=None)
    assert missing.returncode == 2 and "STREAMQ_REDIS_URL" in missing.stderr


def test_server_command_prints_a_working_url() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamq.cli", "server"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, env=os.environ | HOME_ENV,
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


def test_global_options_after_the_command(redis_url: str, stream: str) -> None:
    sync_client(redis_url, stream).xadd(stream, {"type": "x", "data": "1"})
    for args in (
        ("info", stream, "--url", redis_url),
        ("--url", redis_url, "info", stream),
        ("dlq", "list", stream, "--url", redis_url),
    ):
        result = streamq(*args, url=None)
        assert result.returncode == 0, (args, result.stderr)


def test_refused_credentials_are_not_an_unreachable_server(redis_url: str) -> None:
    parts = urlsplit(redis_url)
    netloc = f"nobody:wrong@{parts.hostname}:{parts.port}"
    result = streamq("info", "s", url=urlunsplit(parts._replace(netloc=netloc)))
    assert result.returncode == 2, result.stderr
    assert "failed to authenticate" in result.stderr and "cannot reach" not in result.stderr
    assert "wrong" not in result.stderr, "the password must not be echoed"
    assert len(result.stderr.strip().splitlines()) == 1


def test_tail_prints_one_json_object_per_line(redis_url: str, stream: str) -> None:
    r = sync_client(redis_url, stream)
    ids = [
        r.xadd(stream, {"type": "email", "data": '{"to":"a@b.c","n":[1,2]}', "meta": '{"k":"v"}'}),
        r.xadd(stream, {"type": "email", "data": "{nope"}),
        r.xadd(stream, {"data": "NaN", "meta": "[1]", "extra": "x"}),
        r.xadd(stream, {"type": "email", "data": "{}", "key": "user-7", "ver": "2"}),
    ]
    result = streamq("tail", stream, "--from", "0", "--count", "4", url=redis_url)
    assert result.returncode == 0, result.stderr
    first, second, third, keyed = (json.loads(line) for line in result.stdout.splitlines())
    assert first == {
        "id": ids[0].decode(),
        "type": "email",
        "data": {"to": "a@b.c", "n": [1, 2]},
        "meta": {"k": "v"},
    }
    assert (second["data"], second["meta"]) == ("{nope", {})
    assert "not valid JSON" in second["data_error"]
    assert (third["type"], third["data"], third["meta"]) == (None, "NaN", "[1]")
    assert "data_error" in third and "meta_error" in third
    assert third["other_fields"] == {"extra": "x"}
    assert (keyed["key"], keyed["ver"]) == ("user-7", "2") and "other_fields" not in keyed


def test_text_from_redis_is_escaped_before_the_terminal(redis_url: str, stream: str) -> None:
    r = sync_client(redis_url, stream)
    r.xadd(stream, {"type": "x", "data": "1"})
    group = "g\x1b[31m"
    r.xgroup_create(stream, group, id="0")
    r.xreadgroup(group, "c\x1b]0;pwned\x07\r\x9b\u202e", {stream: ">"})
    r.xadd(
        f"streamq:{{{stream}}}:dlq",
        {
            "original_id": "1-0", "type": "t\x1b[2J", "data": "1", "error": "boom\r\x1b[2K\x85",
            "error_type": "x.Y\x1b[0m", "traceback": "Traceback\n  File \"a\x1b[1m\"\nY: z\x07",
        },
    )  # fmt: skip
    for args in (("info", stream), ("pending", stream, group), ("dlq", "list", stream),
                 ("info", "no\x1b[2Jstream")):  # fmt: skip
        result = streamq(*args, url=redis_url)
        out = result.stdout + result.stderr
        assert not terminal_unsafe(out), (args, out)
        assert "\\x1b" in out, (args, out)


def test_dlq_list_over_malformed_letters_shows_type_traceback_and_whole_reasons(
    redis_url: str, stream: str
) -> None:
    r = sync_client(redis_url, stream)
    reason = "invalid payload: " + "code must match ^[A-Z]{3}-\\d{4}(-[a-z]+)?$; " * 6
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "app.py", line 12, in handle\n    charge(card)\n'
        '  File "pay.py", line 40, in charge\n    raise PaymentError("declined")\n'
        "myapp.PaymentError: declined\n"
    )
    dlq = f"streamq:{{{stream}}}:dlq"
    r.xadd(dlq, {"attempts": "abc", "type": b"\xffok", "note": "by hand"})
    r.xadd(
        dlq,
        {"original_id": "1-0", "type": "pay", "data": "{}", "group": "g", "consumer": "c1",
         "error": reason, "attempts": "3", "dead_at_ms": "1700000000000",
         "error_type": "myapp.PaymentError", "traceback": traceback},
    )  # fmt: skip
    result = streamq("dlq", "list", stream, url=redis_url)
    assert result.returncode == 0, result.stderr
    assert reason in result.stdout, "the reason must be shown whole"
    assert "myapp.PaymentError" in result.stdout
    assert 'File "pay.py", line 40, in charge' in result.stdout
    assert 'raise PaymentError("declined")' in result.stdout
    assert "\\xffok" in result.stdout or "\ufffdok" in result.stdout
    full = streamq("dlq", "list", stream, "--full", url=redis_url).stdout
    assert 'File "app.py", line 12, in handle' in full


def test_pending_lists_every_stream_of_a_topic_with_partitions_and_levels(
    redis_url: str, stream: str
) -> None:
    import anyio

    from streamq import MessageQueue
    from streamq.testing import delete_stream_keys
    from streamq.wire.partition_names import topic_streams

    async def publish_and_read() -> list[str]:
        async with MessageQueue(redis_url, stream=stream, group="g", partitions=2,
                                priorities=3) as mq:  # fmt: skip
            ids = [await mq.publish("job", n, key=f"k{n}", priority=n % 3) for n in range(6)]
            for name in mq.streams:  # consumer w1 takes every entry: all pending
                await mq.client_for(name).xreadgroup("g", "w1", {name: ">"})
            return ids

    try:
        ids = anyio.run(publish_and_read)
        listed = streamq("pending", stream, "g", url=redis_url)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        assert sorted(row[0] for row in rows) == sorted(ids), listed.stdout
        assert {row[1] for row in rows} == {"w1"}
        some = streamq("pending", stream, "g", "--count", "2", url=redis_url)
        assert len(some.stdout.splitlines()[1:]) == 2, some.stdout
        missing = streamq("pending", stream, "nogroup", url=redis_url)
        assert missing.returncode == 1 and "'nogroup' does not exist" in missing.stderr
    finally:
        for name in topic_streams(stream, 2, 3):
            delete_stream_keys(redis_url, name)


def test_dlq_lists_replays_and_purges_the_dead_letters_of_a_partitioned_topic(
    redis_url: str, stream: str
) -> None:
    from streamq.testing import delete_stream_keys
    from streamq.wire.partition_names import topic_streams
    from tests.helpers.dashboard import make_dead_letters

    try:
        make_dead_letters(redis_url, stream, [1, 2, 3, 4], partitions=2)  # two per partition
        listed = streamq("dlq", "list", stream, url=redis_url)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count("ValueError") >= 4, listed.stdout
        replayed = streamq("dlq", "replay", stream, url=redis_url)
        assert replayed.returncode == 0 and replayed.stdout.startswith("replayed 4:"), replayed
        make_dead_letters(redis_url, stream, [5], partitions=2)
        purged = streamq("dlq", "purge", stream, url=redis_url)
        assert purged.returncode == 0 and "purged" in purged.stdout, purged
        assert streamq("dlq", "list", stream, url=redis_url).stdout.strip() == "no dead letters"
    finally:
        for name in topic_streams(stream, 2, 1):
            delete_stream_keys(redis_url, name)
    gone = streamq("dlq", "list", stream, url=redis_url)
    assert gone.returncode == 1 and "does not exist" in gone.stderr, gone


def test_cleanup_removes_the_acknowledged_entries_of_every_stream_of_a_topic(
    redis_url: str, stream: str
) -> None:
    import anyio

    from streamq import MessageQueue

    async def publish_read_and_ack() -> None:
        async with MessageQueue(redis_url, stream=stream, group="g", partitions=2,
                                priorities=3) as mq:  # fmt: skip
            for n in range(12):
                await mq.publish("job", n, key=f"k{n}", priority=n % 3)
            for name in mq.streams:  # group g reads and acknowledges every entry
                client = mq.client_for(name)
                rows = await client.xreadgroup("g", "w1", {name: ">"})
                await client.xack(name, "g", *[entry_id for entry_id, _ in rows[0][1]])

    anyio.run(publish_read_and_ack)
    options = ("--max-length", "0", "--min-retention", "0")
    dry = streamq("cleanup", stream, *options, "--dry-run", url=redis_url)
    assert dry.returncode == 0 and dry.stdout.splitlines()[-1].startswith(
        "would remove 12 entries over 6 streams"
    ), dry.stdout
    done = streamq("cleanup", stream, *options, url=redis_url)
    assert done.returncode == 0 and "removed 12 entries over 6 streams" in done.stdout, done.stdout
    assert sum(line.startswith(f"{stream}") for line in done.stdout.splitlines()) == 6


def test_tail_goes_on_from_an_id_it_printed_of_a_partitioned_topic(
    redis_url: str, stream: str
) -> None:
    """``--from`` takes the partition-qualified IDs ``tail`` prints (``"1:<ms>-<seq>"``):
    every partition goes on after that ID, so the entries after it are printed."""

    def at(shown_id: str) -> StreamId:
        return StreamId.parse(shown_id.split(":")[1])

    import anyio

    from streamq import MessageQueue
    from streamq.testing import delete_stream_keys
    from streamq.wire.partition_names import topic_streams

    async def publish() -> list[str]:
        async with MessageQueue(redis_url, stream=stream, group=None, partitions=2) as mq:
            return [await mq.publish("job", n, key=f"k{n}") for n in range(6)]

    try:
        ids = anyio.run(publish)
        first = streamq("tail", stream, "--from", "0", "--count", "2", url=redis_url)
        assert first.returncode == 0, first.stderr
        last_shown = json.loads(first.stdout.splitlines()[-1])["id"]
        rest = streamq("tail", stream, "--from", last_shown, "--seconds", "2", url=redis_url)
        assert rest.returncode == 0, rest.stderr
        shown = [json.loads(line)["id"] for line in rest.stdout.splitlines()]
        after = [i for i in ids if StreamId.parse(i.split(":")[1]) > at(last_shown)]
        assert sorted(shown) == sorted(after), (last_shown, shown)
        bad = streamq("tail", stream, "--from", "7:1-0", "--count", "1", url=redis_url)
        assert bad.returncode == 2 and "partition" in bad.stderr, bad.stderr
    finally:
        for name in topic_streams(stream, 2, 1):
            delete_stream_keys(redis_url, name)
