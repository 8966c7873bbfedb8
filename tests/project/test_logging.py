"""Issue 15, structured logging: every record from a running consumer says which stream,
group and consumer, and which entry (id, type, delivery) it is about; JSON output."""

from __future__ import annotations

import io
import json
import logging
import warnings
from dataclasses import replace

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import Message, MessageQueue, RetryPolicy
from streamq.logs import configure_logging
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

handler_log = logging.getLogger("tests.handler")


def fields(record: logging.LogRecord) -> dict[str, object]:
    names = ("stream", "group", "consumer", "entry_id", "type", "delivery")
    found = {n: getattr(record, f"streamq_{n}", None) for n in names}
    return {n: value for n, value in found.items() if value is not None}


async def test_consumer_records_carry_the_consumer_and_the_entry(
    make_queue: QueueFactory,
    stream: str,
    client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    mq = make_queue(retry=RetryPolicy(attempts=1, max_deliveries=2))
    done: list[int] = []

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handler_log.info("handling %s", msg.data, extra={"stream": "the handler's own"})
        if msg.data == 2:
            raise ValueError("job 2 is broken")
        done.append(msg.data)

    async with mq, anyio.create_task_group() as tg:
        ok_id = await mq.publish("job", 1)
        bad_id = await mq.publish("job", 2)
        await client.xreadgroup("g", "c1", {stream: ">"}, count=1)  # c1's pending: ok_id
        await tg.start(mq.run)
        await wait_for(lambda: done == [1] and mq.stats()["failed"] == 1, what="both")
        await mq.stop()

    identity = {"stream": stream, "group": "g", "consumer": "c1"}
    mine = [r for r in caplog.records if r.name == "tests.handler"]
    assert [fields(r) for r in mine[:2]] == [
        {**identity, "entry_id": ok_id, "type": "job", "delivery": 2},
        {**identity, "entry_id": bad_id, "type": "job", "delivery": 1},
    ]
    failed = next(r for r in caplog.records if r.getMessage().startswith("handler failed"))
    assert fields(failed) == {**identity, "entry_id": bad_id, "type": "job", "delivery": 1}
    assert failed.exc_info is not None and "job 2 is broken" in str(failed.exc_info[1])
    recovering = next(r for r in caplog.records if r.getMessage().startswith("recovering"))
    assert fields(recovering) == identity, "consumer-level records carry the identity only"
    outside = logging.getLogger("tests").makeRecord("tests", logging.INFO, "f", 1, "x", (), None)
    assert fields(outside) == {}, "no context leaks out of the consumer's tasks"


async def test_each_record_of_a_worker_carries_the_entry_it_is_about(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """One worker handles a job, then an entry nobody here handles, then a job whose
    handler leaves a task running: each record names its own entry, never the one before."""
    caplog.set_level(logging.INFO)
    mq = make_queue(concurrency=1)
    done: list[int] = []

    async def later() -> None:
        await anyio.sleep(0.05)  # the worker has moved on to the next entry meanwhile
        handler_log.info("later")
        done.append(-1)

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handler_log.info("job %s", msg.data)
        if msg.data == 2:
            tg.start_soon(later)
        done.append(msg.data)

    async with mq, anyio.create_task_group() as tg:
        first = await mq.publish("job", 1)
        other = (await mq.client.xadd(mq.stream, {"type": "other", "data": "0"})).decode()
        second, third = await mq.publish_many("job", [2, 3])
        await tg.start(mq.run)
        await wait_for(lambda: len(done) == 4, what="the jobs and the late task")
        await mq.stop()
    by_message = {r.getMessage(): fields(r) for r in caplog.records}
    assert [by_message[f"job {n}"]["entry_id"] for n in (1, 2, 3)] == [first, second, third]
    unrouted = next(v for k, v in by_message.items() if k.startswith("no handler for type"))
    assert (unrouted["entry_id"], unrouted["type"]) == (other, "other")
    assert by_message["later"]["entry_id"] == second, "a task keeps its entry's context"


async def test_batch_records_carry_the_batch_ids(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tests.handler")
    mq = make_queue()
    seen: list[int] = []

    @mq.batch_handler("job", size=3, timeout=0.05)
    async def jobs(msgs: list[Message[int]]) -> None:
        handler_log.info("batch of %d", len(msgs))
        seen.extend(m.data for m in msgs)

    async with mq, anyio.create_task_group() as tg:
        ids = await mq.publish_many("job", [1, 2, 3])
        await tg.start(mq.run)
        await wait_for(lambda: len(seen) == 3, what="the batch")
        await mq.stop()
    (record,) = [r for r in caplog.records if r.name == "tests.handler"]
    assert fields(record)["entry_id"] == ids and fields(record)["type"] == "job"


def test_json_lines_carry_the_fields_extras_and_traceback() -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    try:
        log = logging.getLogger("tests.json")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed %s", "x", extra={"order": 7})
        record = log.makeRecord("tests.json", logging.INFO, "f", 1, "m", (), None)
        record.streamq_stream, record.streamq_entry_id = "orders", "1-0"
        logging.getLogger().handlers[0].handle(record)
    finally:
        logging.getLogger().handlers.clear()
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "ERROR" and first["message"] == "failed x"
    assert first["logger"] == "tests.json" and first["order"] == 7
    assert "Traceback" in first["exc_info"] and "RuntimeError: boom" in first["exc_info"]
    assert second["stream"] == "orders" and second["entry_id"] == "1-0"
    assert "streamq_stream" not in second


def test_python_warnings_are_log_records_of_the_chosen_format() -> None:
    """In a process streamq configures (``streamq run --log-format json``), a warning a
    library emits is a JSON line too, not a plain line on stderr among them."""
    out = io.StringIO()
    # an earlier test's configure_logging left logging's capture on, but pytest put its own
    # showwarning back after that test: start from no capture, as a process does
    logging.captureWarnings(False)
    configure_logging("INFO", "json", stream=out)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("an old API", DeprecationWarning, stacklevel=1)
    finally:
        logging.getLogger().handlers.clear()
        logging.captureWarnings(False)
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "WARNING" and record["logger"] == "py.warnings", record
    assert "DeprecationWarning: an old API" in record["message"], record


def test_text_lines_end_with_the_fields() -> None:
    record = logging.makeLogRecord(
        {"name": "t", "levelname": "INFO", "msg": "hello", "streamq_stream": "s"}
    )
    out = io.StringIO()
    configure_logging("INFO", "text", stream=out)
    try:
        logging.getLogger().handlers[0].handle(record)
    finally:
        logging.getLogger().handlers.clear()
    assert out.getvalue().rstrip().endswith("t: hello [stream=s]")


def test_a_bad_log_format_names_the_choices() -> None:
    from streamq import ConfigError

    with pytest.raises(ConfigError, match="text, json"):
        configure_logging("INFO", "yaml")


def logged_traceback(records: list[logging.LogRecord], starts: str) -> str:
    record = next(r for r in records if r.getMessage().startswith(starts))
    assert record.exc_info is not None, f"{starts!r} logged without a traceback"
    return logging.Formatter().formatException(record.exc_info)


async def run_until_failed(mq: MessageQueue, type_name: str) -> None:
    async with mq, anyio.create_task_group() as tg:
        await mq.publish_many(type_name, [1, 2])
        await tg.start(mq.run)
        await wait_for(lambda: mq.stats()["failed"] == 2, what="both deliveries failed")
        await mq.stop()


RETRIED = RetryPolicy(attempts=3, backoff=0.01, jitter=0.01, max_deliveries=2)


@pytest.mark.parametrize(
    ("max_deliveries", "starts"), [(2, "handler failed"), (1, "dead-lettered")]
)
async def test_a_failed_handler_is_logged_with_its_own_traceback_once(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture, max_deliveries: int, starts: str
) -> None:
    caplog.set_level(logging.INFO, logger="streamq")
    mq = make_queue(retry=replace(RETRIED, max_deliveries=max_deliveries))

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        raise ValueError("job is broken")

    await run_until_failed(mq, "job")
    text = logged_traceback(caplog.records, starts)
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "During handling" not in text and "tenacity" not in text, text
    assert text.count('raise ValueError("job is broken")') == 1, text
    assert text.rstrip().endswith("ValueError: job is broken"), text


async def test_a_handlers_own_exception_chain_is_logged_as_it_is(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamq")
    mq = make_queue(retry=RETRIED)

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        try:
            dict[str, int]()["missing"]
        except KeyError:
            raise ValueError("job is broken")  # noqa: B904 - the implicit chain is the case

    await run_until_failed(mq, "job")
    text = logged_traceback(caplog.records, "handler failed")
    assert text.count("Traceback (most recent call last)") == 2, text
    assert text.count("During handling") == 1 and "KeyError: 'missing'" in text, text
    assert "tenacity" not in text, text


async def test_a_failed_batch_is_logged_with_the_handlers_own_traceback_once(
    make_queue: QueueFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamq")
    mq = make_queue(retry=RETRIED)

    @mq.batch_handler("job", size=2, timeout=0.05)
    async def jobs(msgs: list[Message[int]]) -> None:
        raise ValueError("batch is broken")

    await run_until_failed(mq, "job")
    text = logged_traceback(caplog.records, "handler failed")
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "During handling" not in text and "tenacity" not in text, text


async def test_a_format_string_naming_the_fields_formats_every_record(
    make_queue: QueueFactory,
) -> None:
    """``%(streamq_entry_id)s`` in a handler's format (docs/operating/logs.md) formats
    every record: those made outside an entry or a consumer have the fields as None."""
    formatter = logging.Formatter("%(streamq_consumer)s %(streamq_entry_id)s %(message)s")
    lines: list[str] = []
    failures: list[BaseException] = []

    class Formatting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                lines.append(formatter.format(record))
            except Exception as e:  # what logging would print as "--- Logging error ---"
                failures.append(e)

    mq = make_queue()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        handler_log.warning("handling")

    capture, streamq_log = Formatting(logging.INFO), logging.getLogger("streamq")
    logging.getLogger().addHandler(capture)
    level, _ = streamq_log.level, streamq_log.setLevel(logging.INFO)  # "consumer c1 stopping"
    try:
        async with mq:
            entry_id = await mq.publish("job", 1)
            async with mq.running():
                await wait_for(lambda: mq.stats()["handled"] == 1, what="the entry handled")
        logging.getLogger("tests.after").warning("outside any consumer")
    finally:
        logging.getLogger().removeHandler(capture)
        streamq_log.setLevel(level)
    assert failures == [], f"records the format could not take: {failures}"
    assert f"{mq.consumer} {entry_id} handling" in lines
    assert any(line.endswith(f"consumer {mq.consumer} stopping: stopped") for line in lines)
    assert "None None outside any consumer" in lines
