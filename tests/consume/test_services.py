"""Building services: routers, middlewares, typed publishers (against the real server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from streamq import (
    App,
    ConfigError,
    Message,
    MessageFormatError,
    MessageQueue,
    RetryPolicy,
    Router,
)
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


class Signup(BaseModel):
    user: str


class Click(BaseModel):
    button: str


def signup_router(seen: list[str]) -> Router:
    """What a module of a service holds: its own Router and handlers."""
    router = Router()

    @router.handler("signup")
    async def welcome(msg: Message[Signup]) -> None:
        seen.append(f"welcome {msg.data.user}")

    @router.batch_handler("click", size=10, timeout=0.1)
    async def count(msgs: list[Message[Click]]) -> None:
        seen.append(f"{len(msgs)} clicks")

    return router


async def run_until(mq: MessageQueue, done: Any, timeout: float = 10) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(mq.run)
        await wait_for(done, timeout=timeout)
        await mq.stop()


async def test_a_routers_handlers_run_on_the_queue_that_includes_it(
    make_queue: QueueFactory,
) -> None:
    seen: list[str] = []
    mq = make_queue()
    mq.include_router(signup_router(seen))
    async with mq:
        await mq.publish("signup", Signup(user="ada"))
        await mq.publish_many("click", [Click(button="a"), Click(button="b")])
        await run_until(mq, lambda: "welcome ada" in seen and "2 clicks" in seen)


async def test_a_type_registered_twice_names_both_places(make_queue: QueueFactory) -> None:
    mq = make_queue()
    mq.include_router(signup_router([]))
    other = Router()

    @other.handler("signup")
    async def again(msg: Message[Signup]) -> None: ...

    with pytest.raises(ConfigError) as caught:
        mq.include_router(other)
    text = str(caught.value)
    here = Path(__file__).name
    assert "'signup' is registered twice" in text, text
    assert text.count(here) == 2 and "welcome" in text and "again" in text, text

    with pytest.raises(ConfigError, match="registered twice"):

        @mq.handler("signup")
        async def on_the_queue(msg: Message[Signup]) -> None: ...


async def test_handlers_of_a_router_are_plain_functions() -> None:
    router = Router()
    calls: list[str] = []

    @router.handler("signup")
    async def welcome(msg: Message[Signup]) -> None:
        calls.append(msg.data.user)

    message = Message(
        id="1-0", type="signup", data=Signup(user="eve"), meta={}, delivery_count=1,
        stream="users", group="mailer",
    )  # fmt: skip
    await welcome(message)
    assert calls == ["eve"] and router.message_types == ("signup",)


async def test_middlewares_run_outer_first_around_every_handler_call(
    make_queue: QueueFactory,
) -> None:
    trail: list[str] = []

    def tracing(name: str) -> Any:
        async def mw(msg: Any, call_next: Any) -> Any:
            what = f"{len(msg)} msgs" if isinstance(msg, list) else msg.type
            trail.append(f"{name}>{what}")
            result = await call_next(msg)
            trail.append(f"<{name}")
            return result

        return mw

    router = Router(middlewares=[tracing("router")])

    @router.handler("signup")
    def welcome(msg: Message[Signup]) -> None:  # a plain def: runs in a thread, as usual
        trail.append(f"handler {msg.data.user}")

    @router.batch_handler("click", size=2, timeout=0.1)
    async def count(msgs: list[Message[Click]]) -> None:
        trail.append(f"batch {len(msgs)}")

    mq = make_queue()
    mq.add_middleware(tracing("queue"))
    App(mq, routers=[router], middlewares=[tracing("app")])
    async with mq:
        await mq.publish("signup", Signup(user="ada"))
        await run_until(mq, lambda: trail.count("<app") == 1)
        await mq.publish_many("click", [Click(button="a"), Click(button="b")])
        await run_until(mq, lambda: trail.count("<app") == 2)
    assert trail == [
        "app>signup", "queue>signup", "router>signup", "handler ada", "<router", "<queue",
        "<app", "app>2 msgs", "queue>2 msgs", "router>2 msgs", "batch 2", "<router", "<queue",
        "<app",
    ]  # fmt: skip


async def test_what_a_middleware_raises_is_the_entrys_failure(
    make_queue: QueueFactory, client: Any
) -> None:
    calls = 0

    async def broken(msg: Any, call_next: Any) -> Any:
        nonlocal calls
        calls += 1
        raise RecursionError("the middleware broke")

    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=2, backoff=0.01))
    mq.add_middleware(broken)
    handled: list[str] = []

    @mq.handler("signup")
    async def welcome(msg: Message[Signup]) -> None:
        handled.append(msg.id)

    async with mq:
        await mq.publish("signup", Signup(user="ada"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: calls >= 2, timeout=20)

            async def dead_lettered() -> bool:
                return len(await mq.dead_letters()) == 1

            await wait_for(dead_lettered, timeout=20)
            await mq.stop()
        (letter,) = await mq.dead_letters()
    assert "the middleware broke" in letter.error and not handled
    assert await pending_count(client, mq.stream, "g") == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestWarning")
def test_a_middleware_of_another_shape_is_refused() -> None:
    mq = MessageQueue("redis://127.0.0.1:1/0", stream="s")

    def not_async(msg: Any, call_next: Any) -> Any: ...

    async def three(a: Any, b: Any, c: Any) -> Any: ...

    for mw in (not_async, three):
        with pytest.raises(ConfigError, match="middleware"):
            mq.add_middleware(mw)  # type: ignore[arg-type]  # a shape the types refuse too


async def test_an_app_refusing_its_middlewares_leaves_the_queues_own(
    make_queue: QueueFactory,
) -> None:
    trail: list[str] = []

    async def own(msg: Any, call_next: Any) -> Any:
        trail.append(f"own {msg.type}")
        return await call_next(msg)

    async def stamp(message_type: str, data: Any, meta: Any, call_next: Any) -> Any:
        trail.append(f"stamp {message_type}")
        return await call_next(message_type, data, meta)

    def not_async(msg: Any, call_next: Any) -> Any: ...

    mq = make_queue()
    mq.add_middleware(own)
    mq.add_middleware(stamp)

    @mq.handler("signup")
    async def welcome(msg: Message[Signup]) -> None:
        trail.append(f"handler {msg.data.user}")

    with pytest.raises(ConfigError, match="middleware"):
        App(mq, middlewares=[stamp, not_async])  # nothing of the App's is added
    async with mq:
        await mq.publish("signup", Signup(user="ada"))
        await run_until(mq, lambda: "handler ada" in trail)
    assert trail == ["stamp signup", "own signup", "handler ada"]


def test_routers_for_an_app_of_several_queues_is_an_error() -> None:
    a = MessageQueue("redis://127.0.0.1:1/0", stream="a")
    b = MessageQueue("redis://127.0.0.1:1/0", stream="b")
    with pytest.raises(ConfigError, match="include each router into its queue"):
        App(a, b, routers=[Router()])


async def test_a_typed_publisher_refuses_another_model(
    make_queue: QueueFactory, client: Any
) -> None:
    mq = make_queue()
    signups = mq.publisher("signup", Signup)
    async with mq:
        first = await signups.publish(Signup(user="ada"))
        ids = await signups.publish_many([Signup(user="bob"), Signup(user="cy")])
        with pytest.raises(MessageFormatError, match="'signup' messages carry Signup, got Click"):
            await signups.publish(Click(button="x"))  # type: ignore[arg-type]
        with pytest.raises(MessageFormatError):
            await signups.publish_many([Signup(user="dan"), Click(button="x")])  # type: ignore[list-item]
        assert await client.xlen(mq.stream) == 3
        handled: list[str] = []

        @mq.handler("signup")
        async def welcome(msg: Message[Signup]) -> None:
            handled.append(msg.data.user)

        await run_until(mq, lambda: len(handled) == 3)
    assert handled == ["ada", "bob", "cy"] and len({first, *ids}) == 3


@pytest.mark.slow
def test_mypy_rejects_publishing_another_model(tmp_path: Path) -> None:
    import subprocess
    import sys

    snippet = tmp_path / "typed.py"
    snippet.write_text(
        "from pydantic import BaseModel\nfrom streamq import MessageQueue\n"
        "class Email(BaseModel):\n    to: str\n"
        "class Click(BaseModel):\n    button: str\n"
        "async def main() -> None:\n"
        "    emails = MessageQueue(stream='s').publisher('email', Email)\n"
        "    await emails.publish(Email(to='a'))\n"
        "    await emails.publish(Click(button='b'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(snippet)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    assert 'Argument 1 to "publish" of "TypedPublisher" has incompatible type "Click"' in (
        result.stdout
    ), result.stdout
    assert result.stdout.count("error:") == 1, result.stdout


async def test_a_routers_periodic_publishers_join_the_queue(make_queue: QueueFactory) -> None:
    router, other = Router(), Router()

    @router.periodic("report", every=0.2)
    def report() -> dict[str, int]:
        return {"n": 1}

    @other.periodic("report", every=60)
    def report_again() -> dict[str, int]:
        return {"n": 2}

    mq = make_queue()
    reports = []

    @mq.handler("report")
    async def keep(msg: Message[dict[str, int]]) -> None:
        reports.append(msg.data)

    mq.include_router(router)
    assert [p.name for p in mq.periodics] == ["report"]
    with pytest.raises(ConfigError, match="periodic publisher named 'report'"):
        mq.include_router(other)
    async with mq:
        await run_until(mq, lambda: len(reports) >= 2)
    assert reports[0] == {"n": 1}


async def test_a_typed_publisher_schedules_too(make_queue: QueueFactory) -> None:
    mq = make_queue()
    signups = mq.publisher("signup", Signup)
    async with mq:
        scheduled_id = await signups.publish(Signup(user="later"), delay=3600)
        (waiting,) = await mq.scheduled()
        assert waiting.type == "signup" and str(waiting.id) == str(scheduled_id)
        assert await mq.cancel_scheduled(scheduled_id)


async def test_publish_middlewares_wrap_every_publish(
    make_queue: QueueFactory, client: Any
) -> None:
    trail: list[str] = []

    async def stamp(message_type: str, data: Any, meta: Any, call_next: Any) -> Any:
        trail.append(f"before {message_type}")
        entry_id = await call_next(message_type, data, {**(meta or {}), "origin": "checkout"})
        trail.append(f"after {entry_id}")
        return entry_id

    async def refuse_drafts(message_type: str, data: Any, meta: Any, call_next: Any) -> Any:
        if isinstance(data, Signup) and data.user.startswith("draft"):
            raise ValueError("drafts are not published")
        return await call_next(message_type, data, meta)

    mq = make_queue()
    mq.add_middleware(stamp)
    App(mq, middlewares=[refuse_drafts])
    async with mq:
        first = await mq.publish("signup", Signup(user="ada"))
        more = await mq.publish_many("signup", [Signup(user="bob"), Signup(user="cy")])
        with pytest.raises(ValueError, match="drafts"):
            await mq.publish("signup", Signup(user="draft-1"))
        rows = await client.xrange(mq.stream)
    assert [row[0].decode() for row in rows] == [first, *more]
    assert all(b'"origin":"checkout"' in row[1][b"meta"] for row in rows)
    assert trail == [
        "before signup", f"after {first}", "before signup", f"after {more[0]}",
        "before signup", f"after {more[1]}",
    ]  # fmt: skip


async def test_publish_checks_the_model_of_a_type_this_process_handles(
    make_queue: QueueFactory, client: Any
) -> None:
    mq = make_queue()

    @mq.handler("signup")
    async def welcome(msg: Message[Signup]) -> None: ...

    async with mq:
        await mq.publish("signup", Signup(user="ada"))
        await mq.publish("signup", {"user": "bob"})  # a dict that validates is fine
        with pytest.raises(MessageFormatError, match="'signup' messages carry Signup, got Click"):
            await mq.publish("signup", Click(button="x"))
        await mq.publish("signup", {"name": "no user"})  # plain data: the consumer validates
        with pytest.raises(MessageFormatError):
            await mq.publish_many("signup", [Signup(user="cy"), Click(button="x")])
        await mq.publish("click", Click(button="x"))  # no handler here: not checked
        assert await client.xlen(mq.stream) == 4


async def test_a_scheduled_publish_through_a_publish_middleware_returns_its_scheduled_id(
    make_queue: QueueFactory,
) -> None:
    """The ID comes back as the send returned it: a ScheduledId stays one (it names the
    scheduled message, to cancel it), whatever middlewares it went through."""
    from streamq import ScheduledId

    mq = make_queue()

    async def passing(message_type: str, data: Any, meta: Any, call_next: Any) -> Any:
        return await call_next(message_type, data, meta)

    mq.add_middleware(passing)
    async with mq:
        scheduled = await mq.publish("job", 1, delay=60)
        assert isinstance(scheduled, ScheduledId), type(scheduled)
