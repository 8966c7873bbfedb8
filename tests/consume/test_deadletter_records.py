"""What a dead letter records: the error's type, a bounded traceback, the reason, and a
listing that survives malformed letters (split from test_deadletter.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from streamq import DeadLetter, Message, RetryPolicy
from streamq.message import RawEntry
from streamq.topic.deadletter import MAX_ERROR_CHARS, DeadLetters, dead_letter_fields
from streamq.wire.keys import Keys
from tests.consume.test_deadletter import run_until_dead
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory

pytestmark = pytest.mark.anyio


class PaymentError(Exception):
    pass


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def _raise_deep(depth: int) -> None:
    """Alternates with _deeper so that traceback does not fold the frames."""
    _deeper(depth - 1)


def _deeper(depth: int) -> None:
    if depth <= 0:
        raise PaymentError("card declined by the innermost frame")
    _raise_deep(depth - 1)


def _caught(func: Callable[[], object]) -> BaseException:
    try:
        func()
    except Exception as e:
        return e
    raise AssertionError("did not raise")


async def _write_letter(
    client: aioredis.Redis, stream: str, exception: BaseException | None
) -> DeadLetter:
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    entry_id = (await client.xadd(stream, {"type": "pay", "data": "{}"})).decode()
    await client.xreadgroup("g", "c1", {stream: ">"})
    letters = DeadLetters(client, stream)
    entry = RawEntry(entry_id, {b"type": b"pay", b"data": b"{}"}, delivery_count=3)
    await letters.write(entry, group="g", consumer="c1", error="boom", exception=exception)
    assert await pending_count(client, stream, "g") == 1, "acked by the consumer's Acker"
    (letter,) = await letters.list()
    return letter


async def test_dead_letter_keeps_error_type_and_traceback(
    client: aioredis.Redis, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    error = _caught(lambda: dict[str, int]()["missing"])
    with caplog.at_level(logging.WARNING, logger="streamq.topic.deadletter"):
        letter = await _write_letter(client, stream, error)
    assert letter.error_type == "builtins.KeyError"
    assert letter.traceback is not None
    assert "KeyError: 'missing'" in letter.traceback and "_caught" in letter.traceback
    (record,) = [r for r in caplog.records if r.name == "streamq.topic.deadletter"]
    assert record.levelno >= logging.WARNING and record.exc_info is not None
    assert record.exc_info[1] is error


async def test_dead_letter_traceback_is_bounded_and_keeps_the_innermost_frames(
    client: aioredis.Redis, stream: str
) -> None:
    error = _caught(lambda: _raise_deep(300))
    letter = await _write_letter(client, stream, error)
    assert letter.error_type == f"{__name__}.PaymentError"
    assert letter.traceback is not None
    assert len(letter.traceback) <= 8192
    assert letter.traceback.rstrip().endswith("card declined by the innermost frame")
    assert "in _deeper" in letter.traceback.splitlines()[-3]
    assert "chars cut" in letter.traceback.splitlines()[0]


@pytest.mark.parametrize(  # ids in plain ASCII: a lone surrogate cannot be reported
    "error",
    [UnprintableError(), PaymentError("undecodable \udc80 byte")],
    ids=["unprintable", "lone-surrogate"],
)
async def test_dead_letter_of_an_awkward_exception(
    client: aioredis.Redis, stream: str, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception whose str() raises, or holds a lone surrogate, is dead-lettered."""
    # the log line is not what this test checks: kept out of the captured output, which
    # a parallel runner cannot carry with a lone surrogate in it
    with caplog.at_level(logging.CRITICAL, logger="streamq.topic.deadletter"):
        letter = await _write_letter(client, stream, _caught(lambda: _raise(error)))
    assert letter.error_type == f"{__name__}.{type(error).__name__}"
    assert letter.traceback and type(error).__name__ in letter.traceback


def _raise(error: BaseException) -> None:
    raise error


async def test_dead_letter_without_exception_has_no_traceback(
    client: aioredis.Redis, stream: str
) -> None:
    letter = await _write_letter(client, stream, None)
    assert (letter.error, letter.error_type, letter.traceback) == ("boom", None, None)


async def test_malformed_dead_letters_are_listed(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    mq = make_queue()
    dlq = Keys(mq.stream).dead_letters
    await client.xadd(dlq, {"attempts": "abc", "dead_at_ms": "soon", "type": b"\xff\xfeok"})
    await client.xadd(dlq, {"note": "written by hand"})
    async with mq:
        first, second = await mq.dead_letters()
    assert (first.attempts, first.dead_at_ms, first.original_id) == (0, 0, "")
    assert first.type is not None and first.type.endswith("ok")
    assert (second.type, second.data, second.error, second.error_type) == (None, None, "", None)


def test_from_fields_never_raises() -> None:
    weird: dict[bytes, bytes] = {
        b"original_id": b"\x80\x81",
        b"attempts": b"\xff",
        b"dead_at_ms": b"-",
        b"error": b"\xc3",
        b"error_type": b"x.Y",
        b"traceback": b"Traceback...\nY: z",
    }
    letter = DeadLetter.from_fields(b"1-1", weird)
    assert letter.id == "1-1" and letter.attempts == 0 and letter.error_type == "x.Y"
    assert letter.traceback == "Traceback...\nY: z"


def test_a_long_reason_is_cut_saying_so() -> None:
    entry = RawEntry("1-1", {b"type": b"t", b"data": b"{}"})
    fields = dead_letter_fields(entry, group="g", consumer="c", error="x" * 10_000)
    error = fields["error"]
    assert isinstance(error, bytes) and len(error.decode()) == MAX_ERROR_CHARS
    cut = 10_000 - error.count(b"x")
    assert error.decode().endswith(f"x… [cut {cut:,} characters]"), error[-40:]
    assert "error_type" not in fields and "traceback" not in fields


class Email(BaseModel):
    to: str


async def test_a_payload_failing_validation_is_one_warning_line(
    make_queue: QueueFactory, client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad input is an expected outcome: one WARNING line with the short reason, the
    traceback at DEBUG and in the dead letter, nothing at ERROR."""
    caplog.set_level(logging.DEBUG, logger="streamq")
    mq = make_queue()

    @mq.handler("email")
    async def email(msg: Message[Email]) -> None:
        raise AssertionError("never called")

    async with mq:
        fields = {"type": "email", "data": '{"subject": "no recipient"}'}
        bad = (await client.xadd(mq.stream, fields)).decode()
        await run_until_dead(mq, 1)
        (letter,) = await mq.dead_letters()
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in loud] == [logging.WARNING], [r.getMessage() for r in loud]
    (line,) = loud
    assert line.exc_info is None and "Traceback" not in line.getMessage()
    assert line.getMessage() == f"dead-lettered {bad} (email): {letter.error}"
    assert "to: Field required" in letter.error and "\n" not in letter.error
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert any(bad in r.getMessage() for r in debug), "the traceback at DEBUG"
    assert letter.traceback and "ValidationError" in letter.traceback
    assert letter.error_type == "pydantic_core._pydantic_core.ValidationError"


@pytest.mark.parametrize(("length", "whole"), [(3_000, True), (10_000, False)])
async def test_a_long_handler_error_is_kept_to_the_documented_limit(
    make_queue: QueueFactory, length: int, whole: bool
) -> None:
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=1))

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        raise ValueError("x" * length)

    async with mq:
        await mq.publish("job", 1)
        await run_until_dead(mq, 1)
        (letter,) = await mq.dead_letters()
    if whole:
        assert letter.error.endswith("ValueError: " + "x" * length), letter.error[-80:]
        return
    assert len(letter.error) == MAX_ERROR_CHARS
    prefix = letter.error.index("x")
    kept = letter.error.rindex("x") + 1 - prefix
    cut = length - kept
    assert letter.error.endswith(f"… [cut {cut:,} characters]"), letter.error[-80:]
