"""``streamq halted list|release`` and the ordered owners in ``streamq info``, as a shell
user runs them against a real ordered consumer."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
import pytest

from streamq import Message, MessageQueue, RetryPolicy
from streamq.topic.halted import halted_key, record_field
from tests.conftest import QueueFactory, sync_client, wait_for
from tests.helpers.cli import streamq, terminal_unsafe

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

LEASE = 2.0
POISON = "\x1b[31mpoison" + "x" * 200  # an escape sequence, and longer than the column


async def shell(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: streamq(*args, url=url))


def halting_queue(make_queue: QueueFactory, **kwargs: Any) -> MessageQueue:
    retry = RetryPolicy(attempts=1, backoff=0.01, max_backoff=0.05, max_deliveries=1)
    return make_queue(ordered=True, ownership_lease=LEASE, retry=retry, on_poison="halt",
                      **kwargs)  # fmt: skip


async def test_halted_keys_are_listed_and_released_from_the_shell(
    make_queue: QueueFactory, redis_url: str
) -> None:
    mq = halting_queue(make_queue, partitions=2)
    poison: set[str | None] = {"a", None}
    handled: dict[str | None, list[int]] = defaultdict(list)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        if msg.key in poison:
            raise RuntimeError(POISON)
        handled[msg.key].append(msg.data["n"])

    async with mq:
        ids = [await mq.publish("job", {"n": n}, key="a") for n in range(2)]
        keyless = await mq.publish("job", {"n": 0})  # one: keyless entries go round
        async with mq.running():

            async def both_halted() -> bool:
                return len(await mq.halted_keys()) == 2

            await wait_for(both_halted, what="key a and the keyless lane halted")
            halted = {h.key: h for h in await mq.halted_keys()}

            listed = await shell("halted", "list", mq.stream, "g", url=redis_url)
            assert listed.returncode == 0, listed.stderr
            assert not terminal_unsafe(listed.stdout), listed.stdout
            header, *rows = listed.stdout.splitlines()
            assert header.split()[:3] == ["partition", "key", "entry"], header
            assert len(rows) == 2, listed.stdout
            row_of = {("(keyless)" if "(keyless)" in row else "a"): row for row in rows}
            for key, shown in (("a", "a"), (None, "(keyless)")):
                row = row_of[shown]
                assert row.split()[:3] == [str(halted[key].partition), shown,
                                           halted[key].entry_id], row  # fmt: skip
                assert "\\x1b[31mpoison" in row and "…" in row, f"reason not cut safely: {row}"
                assert row.rstrip().endswith("-"), f"no release asked yet: {row}"
                assert len(row) < 160, f"the reason was not cut: {row}"
            as_json = await shell("halted", "list", mq.stream, "g", "--json", url=redis_url)
            objects = [json.loads(line) for line in as_json.stdout.splitlines()]
            assert {(o["key"], o["entry_id"], o["reason"].startswith("failed")) for o in objects} == {
                ("a", halted["a"].entry_id, True), (None, halted[None].entry_id, True)
            }  # fmt: skip
            assert all(o["action"] is None and POISON in o["reason"] for o in objects)

            unknown = await shell("halted", "release", mq.stream, "g", "zz", url=redis_url)
            assert unknown.returncode == 1 and "'zz' is not halted" in unknown.stderr
            assert len(unknown.stderr.splitlines()) == 1, unknown.stderr

            poison.clear()
            retried = await shell("halted", "release", mq.stream, "g", "a", url=redis_url)
            assert retried.returncode == 0, retried.stderr
            await wait_for(lambda: handled["a"] == [0, 1], what="key a retried and goes on")
            skipped = await shell(
                "halted", "release", mq.stream, "g", "--keyless", "--action", "skip",
                url=redis_url,
            )  # fmt: skip
            assert skipped.returncode == 0, skipped.stderr

            async def none_halted() -> bool:
                return await mq.halted_keys() == []

            await wait_for(none_halted, what="no key halted")
            after = await shell("halted", "list", mq.stream, "g", url=redis_url)
            assert after.stdout.strip() == "no halted keys", after.stdout
        letters = await mq.dead_letters()
        await mq.terminate_topic()
    assert [letter.original_id for letter in letters] == [keyless] and ids
    assert "skipped by an operator" in letters[0].error


def test_halted_usage_errors_are_one_line(redis_url: str, stream: str) -> None:
    with sync_client(redis_url, stream) as r:
        r.xgroup_create(stream, "g", id="0", mkstream=True)
    cases = [
        (("halted", "release", stream, "g"), 2, "needs the KEY"),
        (("halted", "release", stream, "g", "a", "--keyless"), 2, "not both"),
        (("halted", "release", stream, "g", "a", "--action", "drop"), 2, "invalid choice"),
        (("halted", "list", stream), 2, "the following arguments are required: group"),
        (("halted", "list", stream, "nogroup"), 1, "consumer group 'nogroup' does not exist"),
        (("halted", "list", f"{stream}-missing", "g"), 1, "does not exist"),
        (("halted", "release", stream, "g", "a"), 1, "key 'a' is not halted"),
    ]
    for args, code, message in cases:
        result = streamq(*args, url=redis_url)
        assert (result.returncode, result.stdout) == (code, ""), (args, result)
        assert message in result.stderr and len(result.stderr.splitlines()) == 1, (args, result)
    listed = streamq("halted", "list", stream, "g", url=redis_url)
    assert (listed.returncode, listed.stdout.strip()) == (0, "no halted keys")
    assert streamq("halted", "list", stream, "g", "--json", url=redis_url).stdout == ""


async def test_info_prints_each_partitions_ordered_owner(
    make_queue: QueueFactory, redis_url: str
) -> None:
    mq = make_queue(ordered=True, partitions=2, ownership_lease=LEASE)
    shared = make_queue(group="other", partitions=2)

    for queue in (mq, shared):

        @queue.handler("job")
        async def handle(msg: Message[Any]) -> None:
            pass

    async with mq, shared:
        await mq.publish("job", {}, key="a")
        unowned = await shell("info", mq.stream, url=redis_url)
        assert unowned.returncode == 0 and "owner" not in unowned.stdout, unowned.stdout
        async with mq.running(), shared.running():

            async def owned() -> bool:
                return all(o is not None for o in await mq.partition_owners())

            await wait_for(owned, what="both partitions owned")
            tokens = [o[1] for o in await mq.partition_owners() if o is not None]
            out = (await shell("info", mq.stream, url=redis_url)).stdout
        await mq.terminate_topic()
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("partition "))
    assert header.endswith("owner (ordered)"), out
    rows = lines[lines.index(header) + 1 :]
    assert [row.split("  ")[-1].strip() for row in rows] == [
        f"g: {mq.consumer} (token {token})" for token in tokens
    ], out
    assert "other:" not in out, "a group that is not ordered shows an owner"


async def test_info_prints_the_owner_of_an_ordered_plain_stream(
    make_queue: QueueFactory, redis_url: str
) -> None:
    mq = make_queue(ordered=True, ownership_lease=LEASE)

    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    async with mq.running():

        async def owned() -> bool:
            return (await mq.partition_owners())[0] is not None

        await wait_for(owned, what="the stream owned")
        owner = (await mq.partition_owners())[0]
        out = (await shell("info", mq.stream, url=redis_url)).stdout
    assert owner is not None
    assert f"  ordered owner: {mq.consumer} (token {owner[1]})" in out.splitlines(), out


HALTED_MANY = 3000


@pytest.fixture
def many_halted(redis_url: str, stream: str, on_cluster: bool) -> Iterator[str]:
    """``HALTED_MANY`` halted keys of group ``g`` on ``stream`` (and one of another group),
    and the URL of a user who may run every command but HGETALL: a listing that read every
    record at once would be refused."""
    if on_cluster:
        pytest.skip("ACL users are set per node")
    user = f"streamq-test-{uuid.uuid4().hex[:8]}"
    with sync_client(redis_url, stream) as r:
        r.xgroup_create(stream, "g", id="0", mkstream=True)
        record = json.dumps({"id": "1-0", "reason": "failed", "action": None})
        fields = {record_field("g", f"k{n:05}"): record for n in range(HALTED_MANY)}
        r.hset(halted_key(stream), mapping={**fields, record_field("other", "x"): record})
        r.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-hgetall")
    parts = urlsplit(redis_url)
    yield urlunsplit(parts._replace(netloc=f"{quote(user)}:pw@{parts.hostname}:{parts.port}"))
    with sync_client(redis_url, stream) as r:
        r.execute_command("ACL", "DELUSER", user)


def test_halted_list_pages_through_thousands_of_keys_up_to_its_limit(
    many_halted: str, stream: str
) -> None:
    cut_short = streamq("halted", "list", stream, "g", url=many_halted)
    assert cut_short.returncode == 0, cut_short.stderr
    header, *rows, more = cut_short.stdout.splitlines()
    assert header.split()[:2] == ["partition", "key"] and len(rows) == 1000, more
    assert more == f"... {HALTED_MANY - 1000} more: use --limit", more
    assert len({row.split()[1] for row in rows}) == 1000, "a key listed twice"

    whole = streamq("halted", "list", stream, "g", "--limit", "5000", url=many_halted)
    listed = {row.split()[1] for row in whole.stdout.splitlines()[1:]}
    assert listed == {f"k{n:05}" for n in range(HALTED_MANY)}, whole.stdout[-200:]

    as_json = streamq("halted", "list", stream, "g", "--json", "--limit", "10", url=many_halted)
    assert [json.loads(line)["key"][0] for line in as_json.stdout.splitlines()] == ["k"] * 10
    assert as_json.stderr.strip() == f"... {HALTED_MANY - 10} more: use --limit", as_json.stderr

    refused = streamq("halted", "list", stream, "g", "--limit", "0", url=many_halted)
    assert refused.returncode == 2 and "--limit" in refused.stderr, refused
