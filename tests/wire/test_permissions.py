"""The ACL streamq needs: the start-up check names what is missing, and the documented
``ACL SETUSER`` lines are enough to run a queue without one refusal (ACL LOG stays empty)."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import (
    CleanupPolicy,
    ConfigError,
    Message,
    MessageQueue,
    PermissionDeniedError,
    RateLimit,
    RedisFailure,
    Reject,
    Retry,
    StartFrom,
    Throttle,
)
from streamq.flow.gate import FlowGate
from streamq.flow.settings import FlowConfig
from streamq.publish.periodic_runner import tick_time
from streamq.publish.ticks import claim_tick
from streamq.testing import TEST_TIMINGS, delete_stream_keys
from streamq.topic.cleanup import has_xdelex
from streamq.topic.partitions import partition_streams
from streamq.wire.client import connect
from streamq.wire.keys import Keys
from streamq.wire.permission_check import check_permissions
from streamq.wire.permissions import (
    PERMISSIONS,
    PROBE_COMMANDS,
    acl_rules,
    acl_setuser,
    names_for,
)
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _single_node(on_cluster: bool) -> None:
    if on_cluster:
        pytest.skip("ACL users are set per node: these tests set them on one node only")


PASSWORD = "s3cret-pw"
SECURITY_GUIDE = Path(__file__).parents[2] / "docs" / "operating" / "security.md"
MakeUser = Callable[[list[str]], Awaitable[str]]


@pytest.fixture
async def acl_user(client: aioredis.Redis) -> AsyncIterator[MakeUser]:
    """Factory: create an ACL user with these rules; every one is deleted after the test."""
    made: list[str] = []

    async def make(rules: list[str]) -> str:
        user = f"streamq-test-{uuid.uuid4().hex[:8]}"
        await client.execute_command("ACL", "SETUSER", user, *rules)
        made.append(user)
        return user

    yield make
    if made:
        await client.execute_command("ACL", "DELUSER", *made)


@pytest.fixture
async def newer(client: aioredis.Redis) -> bool:
    """Whether the server has the commands the README says to add on newer servers
    (``+xdelex`` on Redis >= 8.2, with ``+client|setinfo``): the documented ACL there."""
    return await has_xdelex(client)


def user_url(url: str, user: str) -> str:
    parts = urlsplit(url)
    netloc = f"{quote(user)}:{quote(PASSWORD)}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def without(rules: list[str], *dropped: str) -> list[str]:
    assert set(dropped) <= set(rules), f"{dropped} not in {rules}"
    return [r for r in rules if r not in dropped]


async def check_as(redis_url: str, user: str, stream: str, **kwargs: bool) -> None:
    as_user = aioredis.Redis.from_url(user_url(redis_url, user))
    try:
        await check_permissions(as_user, stream, **kwargs)
    finally:
        await as_user.aclose()


async def refusals(client: aioredis.Redis, *users: str) -> list[dict[str, object]]:
    """ACL LOG entries of ``users``: every command the server refused them, but redis-py's
    CLIENT SETINFO on connect (refusal ignored; the documented lines omit it for Redis 7.0)."""
    log = await client.acl_log()
    return [
        e for e in log if str(e.get("username")) in users and e.get("object") != "client|setinfo"
    ]


# -- the data -------------------------------------------------------------------------


async def test_every_listed_command_is_well_formed_for_the_server(
    client: aioredis.Redis, stream: str
) -> None:
    """A malformed dry run would read as "probe refused" and skip the check silently."""
    names, user = names_for(stream), await client.execute_command("ACL", "WHOAMI")
    for permission in PERMISSIONS:
        args = permission.bind(names)
        try:
            reply = await client.execute_command("ACL", "DRYRUN", user, *args)
        except RedisFailure as e:  # streamq's clients raise streamq's errors
            assert permission.optional and "not found" in str(e), (args, e)
            continue
        assert reply == b"OK", (args, reply)


async def test_a_refused_command_is_a_permission_error(
    redis_url: str, stream: str, acl_user: MakeUser
) -> None:
    """NOPERM at run time (an ACL changed under a running service) is its own error.
    The user may not ask CLUSTER SLOTS either: read as "a single node" (redis-py drops the
    NOPERM code from the text: such a user could not connect at all before)."""
    user = await acl_user(["on", f">{PASSWORD}", f"~{stream}", "+xlen"])
    deployment = connect(user_url(redis_url, user))
    try:
        client = deployment.client_for(stream)
        assert await client.xlen(stream) == 0
        with pytest.raises(PermissionDeniedError, match=repr(stream)) as caught:
            await client.xadd(stream, {"type": "a"})
        assert isinstance(caught.value, RedisFailure)
    finally:
        await deployment.aclose()


def test_the_security_guide_shows_the_acl_lines_the_tests_prove() -> None:
    readme = SECURITY_GUIDE.read_text()
    assert acl_setuser("orders-service", "orders") in readme
    assert acl_setuser("orders-operator", "orders", operator=True) in readme


# -- the check ------------------------------------------------------------------------


async def test_documented_acl_with_the_probe_commands_passes(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool, client: aioredis.Redis
) -> None:
    service = await acl_user(acl_rules(stream, password=PASSWORD, newer=newer))
    await check_as(redis_url, service, stream)
    await check_as(redis_url, service, stream, consuming=False)
    # the probe passed for a user the lines restrict, not for one that may run anything
    flush = await client.execute_command("ACL", "DRYRUN", service, "FLUSHALL")
    assert flush != b"OK", "the documented lines let the user run FLUSHALL"
    other = await client.execute_command(
        "ACL", "DRYRUN", service, "XADD", f"other-{{{stream}}}", "*", "a", "1"
    )
    assert other != b"OK", "the documented lines let the user write another stream"


async def test_missing_script_permissions_are_named_with_the_fix(
    redis_url: str, client: aioredis.Redis, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    rules = acl_rules(stream, password=PASSWORD, newer=newer)
    user = await acl_user(without(rules, "+evalsha", "+script|load"))
    with pytest.raises(ConfigError) as caught:
        await check_as(redis_url, user, stream)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError) and PASSWORD not in message
    assert f"evalsha on {stream!r}" in message
    assert f"evalsha on {Keys(stream).cleanup_lock!r}" in message
    assert "script|load (load a script the server lacks" in message
    assert "+evalsha +script|load" in message
    # the fix line, as given, is enough
    fix = message.splitlines()[-1].split(": ", 1)[1].split()
    assert fix[:3] == ["ACL", "SETUSER", user]
    await client.execute_command(*fix)
    await check_as(redis_url, user, stream)


async def test_missing_own_keys_and_channel_are_named(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    keys = Keys(stream)
    rules = acl_rules(stream, password=PASSWORD, newer=newer)
    user = await acl_user(without(rules, f"~streamq:{{{stream}}}:*", f"&{keys.control}"))
    with pytest.raises(ConfigError) as caught:
        await check_as(redis_url, user, stream)
    message = str(caught.value)
    for key in (keys.dead_letters, keys.stopped, keys.unrouted, keys.cleanup_lock):
        assert f"access the '{key}' key" in message, key
    assert f"subscribe on {keys.control!r}" in message
    assert f"access the '{keys.control}' channel" in message
    assert f"~streamq:{{{stream}}}:* &{keys.control}" in message


async def test_a_publisher_needs_only_what_opening_and_publishing_take(
    redis_url: str, stream: str, acl_user: MakeUser
) -> None:
    probe = [f"+{c}" for c in PROBE_COMMANDS]
    own = f"~streamq:{{{stream}}}:*"  # opening reads the topic's partition record (HGET)
    resend = ["+eval", "+time", "+xrevrange"]  # a publish sent again, checked (script)
    user = await acl_user(
        ["on", f">{PASSWORD}", f"~{stream}", own, "+xgroup|create", "+xadd", "+hget", *resend,
         *probe]
    )  # fmt: skip
    await check_as(redis_url, user, stream, consuming=False)
    with pytest.raises(ConfigError, match="xreadgroup on"):
        await check_as(redis_url, user, stream)


async def test_cleanup_commands_are_checked_only_when_asked(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    rules = acl_rules(stream, password=PASSWORD, newer=newer)
    user = await acl_user(without(rules, "+xtrim", "+xdel"))
    await check_as(redis_url, user, stream, cleanup=False)
    with pytest.raises(ConfigError, match="xtrim on"):
        await check_as(redis_url, user, stream)


async def test_a_user_that_may_not_dry_run_is_not_checked(
    redis_url: str, stream: str, acl_user: MakeUser, caplog: pytest.LogCaptureFixture
) -> None:
    """The probe is best effort: without ACL DRYRUN (or WHOAMI) it returns, logged at DEBUG."""
    caplog.set_level(logging.DEBUG, logger="streamq.wire.permissions")
    no_dry_run = await acl_user(acl_rules(stream, password=PASSWORD, probe=False))
    no_whoami = await acl_user(["on", f">{PASSWORD}", "+acl|dryrun"])
    await check_as(redis_url, no_dry_run, stream)
    await check_as(redis_url, no_whoami, stream)
    skipped = [r for r in caplog.records if r.name == "streamq.wire.permissions"]
    assert len(skipped) == 2
    assert all(r.levelno == logging.DEBUG and "not checked" in r.getMessage() for r in skipped)


# -- the documented ACL runs a queue ------------------------------------------------


async def test_documented_acls_run_a_queue_without_one_refusal(
    redis_url: str,
    client: aioredis.Redis,
    stream: str,
    acl_user: MakeUser,
    newer: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A service (SUBSCRIBE only) consumes, retries, renews leases, dead-letters, cleans
    up and auto-stops; an operator publishes, stops, resumes, replays and purges dead
    letters, and terminates the topic. The server refuses neither a single command."""
    caplog.set_level(logging.DEBUG)
    service = await acl_user(acl_rules(stream, password=PASSWORD, newer=newer))
    operator = await acl_user(acl_rules(stream, operator=True, password=PASSWORD, newer=newer))
    cleanup = CleanupPolicy(
        enabled=True, interval=0.2, max_stream_length=0, min_retention=0,
        dead_letter_retention=3600,
    )  # fmt: skip
    svc = MessageQueue(
        user_url(redis_url, service), stream=stream, group="g", consumer="svc",
        start=StartFrom.EARLIEST, cleanup=cleanup, config=TEST_TIMINGS,
    )  # fmt: skip
    ops = MessageQueue(user_url(redis_url, operator), stream=stream, group="g", consumer="ops")
    handled: list[int] = []
    tries: Counter[str] = Counter()

    @svc.handler("job")
    async def handle(msg: Message[int]) -> None:
        tries[msg.id] += 1
        if msg.data == 1 and tries[msg.id] == 1:
            raise Retry(delay=0.1)
        if msg.data == 2:
            await anyio.sleep(1.2)  # past claim_idle (1 s): its lease is renewed
        if msg.data == 3:
            raise Reject("poison")
        handled.append(msg.data)

    async with svc, ops:
        ids = await ops.publish_many("job", [0, 1, 2, 3, 4])
        await ops.stop_message(ids[4])
        await ops.publish("nobody-handles-this", 0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(svc.run)
            await wait_for(lambda: sorted(handled) == [0, 1, 2], what="handled 0, 1, 2")
            assert "error" not in await svc.health()
            await ops.resume_message(ids[4])
            await wait_for(lambda: 4 in handled, what="resumed entry handled")
            await wait_for(lambda: _cleaned(client, stream), what="cleanup removed entries")
            (letter,) = await ops.dead_letters()
            assert letter.original_id == ids[3]
            (again,) = await ops.replay_dead_letter()
            await wait_for(lambda: _dead_again(ops, again), what="replayed poison dead again")
            assert await ops.purge_dead_letters() == 1
            await ops.terminate_topic()
            with anyio.fail_after(10):
                await svc.done.wait()
    assert svc.stop_reason == "topic_terminated"
    assert await refusals(client, service, operator) == []
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "no permissions" in m or PASSWORD in m]


async def _reported(mq: MessageQueue) -> bool:
    waiting = (await mq.topic_info()).waiting.get("g")
    return waiting is not None and waiting.pause == 1


async def _dead_again(mq: MessageQueue, entry_id: str, *, replayed: bool = False) -> bool:
    letters = await mq.dead_letters()
    if replayed:  # the replayed entry has a new ID: its data tells it apart
        return len(letters) == 1 and letters[0].original_id != entry_id
    return [d.original_id for d in letters] == [entry_id]


async def _cleaned(client: aioredis.Redis, stream: str) -> bool:
    return int(await client.xlen(stream)) < 6


async def test_opening_a_queue_without_script_permissions_fails_naming_them(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    """Before, lease renewal and the cleanup lock failed later with warnings only."""
    rules = acl_rules(stream, password=PASSWORD, newer=newer)
    user = await acl_user(without(rules, "+evalsha", "+script|load"))
    mq = MessageQueue(user_url(redis_url, user), stream=stream, group="g", consumer="c")

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        pass

    with pytest.raises(ConfigError, match="evalsha") as caught:
        async with mq:
            pass
    assert "script|load" in str(caught.value)


async def test_a_partitioned_topic_runs_with_its_generated_lines(
    redis_url: str, client: aioredis.Redis, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    """The rules of a topic of 3 partitions name each partition stream: a service consumes,
    retries and dead-letters on every partition, an operator publishes by key, stops,
    resumes, replays and terminates; the server refuses nothing."""
    rules = {"password": PASSWORD, "partitions": 3, "newer": newer}
    service = await acl_user(acl_rules(stream, **rules))  # type: ignore[arg-type]
    operator = await acl_user(acl_rules(stream, operator=True, **rules))  # type: ignore[arg-type]
    options: dict[str, object] = {"stream": stream, "group": "g", "partitions": 3}
    svc = MessageQueue(
        user_url(redis_url, service), consumer="svc", start=StartFrom.EARLIEST,
        config=TEST_TIMINGS, **options,  # type: ignore[arg-type]
    )  # fmt: skip
    ops = MessageQueue(user_url(redis_url, operator), consumer="ops", **options)  # type: ignore[arg-type]
    handled: list[int] = []
    tries: Counter[str] = Counter()

    @svc.handler("job")
    async def handle(msg: Message[int]) -> None:
        tries[msg.id] += 1
        if msg.data % 4 == 1 and tries[msg.id] == 1:
            raise Retry(delay=0.1)
        if msg.data == 3:
            raise Reject("poison")
        handled.append(msg.data)

    try:
        async with svc, ops:
            ids = await ops.publish_many("job", list(range(12)), key=lambda n: f"k{n}")
            assert {i.split(":")[0] for i in ids} == {"0", "1", "2"}, ids
            await ops.stop_message(ids[11])
            async with anyio.create_task_group() as tg:
                tg.start_soon(svc.run)
                await wait_for(lambda: len(handled) == 10, what="10 of 12 handled")
                await ops.resume_message(ids[11])
                await wait_for(lambda: 11 in handled, what="the resumed entry handled")
                (letter,) = await ops.dead_letters()
                assert letter.original_id == ids[3]
                await ops.replay_dead_letter()
                await wait_for(lambda: _dead_again(ops, ids[3], replayed=True), what="dead again")
                await ops.terminate_topic()
                with anyio.fail_after(10):
                    await svc.done.wait()
        assert svc.stop_reason == "topic_terminated"
        assert await refusals(client, service, operator) == []
    finally:
        for name in partition_streams(stream, 3):
            delete_stream_keys(redis_url, name)


def test_the_rules_of_a_partitioned_topic_name_each_partition_and_no_pattern() -> None:
    rules = acl_rules("orders", partitions=2)
    for name in partition_streams("orders", 2):
        assert f"~{name}" in rules and f"&{Keys(name).control}" in rules
    assert not [r for r in rules if r.startswith(("~", "&")) and r.endswith("p*")]


async def test_on_redis_8_2_the_base_lines_lack_only_xdelex(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    """The README's lines omit what older servers refuse in a rule; where the server has
    XDELEX the check names it, and the fix is the one the README gives (add ``+xdelex``)."""
    if not newer:
        pytest.skip("the server has no XDELEX (Redis < 8.2, Valkey): the base lines suffice")
    user = await acl_user(acl_rules(stream, password=PASSWORD))
    with pytest.raises(ConfigError) as caught:
        await check_as(redis_url, user, stream)
    _header, missing, fix = str(caught.value).splitlines()  # one missing permission
    assert missing.lstrip().startswith("- xdelex on ")
    assert fix.startswith("fix ") and fix.endswith(":scheduled:wake +xdelex")


async def test_an_ordered_consumer_runs_as_the_documented_service_user(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    """The generated lines cover ordered mode: membership, leases, fenced reads and acks,
    halted keys; a user limited to them opens an ordered consumer and handles entries."""
    service = await acl_user(acl_rules(stream, password=PASSWORD, newer=newer))
    await check_as(redis_url, service, stream, ordered=True)
    mq = MessageQueue(
        user_url(redis_url, service), stream=stream, group="g", consumer="c1",
        start=StartFrom.EARLIEST, ordered=True, ownership_lease=2,
    )  # fmt: skip
    seen: list[str] = []

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        seen.append(msg.id)

    async with mq:
        published = [await mq.publish("job", n, key="k") for n in range(3)]
        async with mq.running():
            await wait_for(lambda: len(seen) == 3, what="the ordered entries")
    assert seen == published


async def test_ordered_mode_without_its_commands_is_named_at_open(
    redis_url: str, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    rules = [r for r in acl_rules(stream, password=PASSWORD, newer=newer) if r != "+hincrby"]
    service = await acl_user(rules)
    with pytest.raises(ConfigError, match=r"hincrby on .*:owner:g. \(a new fencing token\)"):
        await check_as(redis_url, service, stream, ordered=True)


async def test_a_periodic_publisher_runs_as_the_documented_service_user(
    redis_url: str, client: aioredis.Redis, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    """Claiming, renewing, publishing, giving up and taking over periodic ticks: the
    server refuses none of what the tick scripts send."""
    service = await acl_user(acl_rules(stream, password=PASSWORD, newer=newer))
    ghost_tick = 1_767_225_600_000
    await claim_tick(
        client, stream, "tick", ghost_tick, mode="new", owner="ghost", lease=0.001, window=600
    )  # a claimer that died before publishing: the service takes its tick over
    mq = MessageQueue(
        user_url(redis_url, service), stream=stream, group="g", consumer="c1",
        start=StartFrom.EARLIEST, config=TEST_TIMINGS,
    )  # fmt: skip
    seen: list[str] = []
    calls = 0

    @mq.handler("tick")
    async def handle(msg: Message[int]) -> None:
        seen.append(msg.meta["periodic_tick"])

    @mq.periodic("tick", every=0.2)
    async def tick() -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("skip this one")  # the claim is given up
        return calls

    async with mq.running():
        await wait_for(lambda: len(seen) >= 3, what="three ticks, one of them taken over")
    assert tick_time(ghost_tick) in seen
    assert await refusals(client, service) == []


async def test_flow_control_runs_as_the_documented_service_and_operator(
    redis_url: str, client: aioredis.Redis, stream: str, acl_user: MakeUser, newer: bool
) -> None:
    """A service's flow gate (the pause record and its notices, rate-limit permits,
    throttles, its waiting report written and removed, damaged records replaced) and an
    operator's pause, resume, topic_info and terminate: the server refuses neither a
    single command."""
    service = await acl_user(acl_rules(stream, password=PASSWORD, newer=newer))
    operator = await acl_user(acl_rules(stream, operator=True, password=PASSWORD, newer=newer))
    config = FlowConfig.of({"job": RateLimit(10, by="key")})
    as_service = connect(user_url(redis_url, service))
    ops = MessageQueue(user_url(redis_url, operator), stream=stream, group="g", consumer="ops")
    gate = FlowGate(as_service.client_for(stream), stream, "g", config)
    gate.report_as("svc", lambda: {"pause": 1})
    await client.set(Keys(stream).rate("g", "job", per_key=True, key="k"), "damaged")
    await client.set(Keys(stream).waiting("g"), "damaged")
    try:
        async with ops, anyio.create_task_group() as tg:
            await ops.publish("job", 1)
            async with anyio.create_task_group() as reporting:
                await reporting.start(gate.run)
                await wait_for(lambda: _reported(ops), what="the waiting report")
                reporting.cancel_scope.cancel()
            assert not await client.exists(Keys(stream).waiting("g"))  # removed at the stop
            await tg.start(gate.run)
            await anyio.sleep(0.2)  # subscribed to the flow channel
            await ops.pause("job")
            await wait_for(lambda: gate.paused("job"), what="the pause, through its notice")
            assert (await gate.take("job", "k", 3)).granted == 1
            await gate.throttle("job", "k", Throttle(5))
            assert (await gate.throttled("job", ["k"]))["k"] > 4
            assert (await ops.topic_info()).paused == {"g": ["job"]}
            assert await ops.resume("job")
            await ops.terminate_topic()
            tg.cancel_scope.cancel()
    finally:
        await as_service.aclose()
    assert await refusals(client, service, operator) == []
