"""The soak's exactly-once mode (tests/soak/exactly_once.py): its verdict fails on a
transfer missing or doubled in any store or written twice to the topic, and its consumer
process starts and handles transfers with the ledger's handler."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from demos.exactly_once import Observed, expected_balances, observe
from demos.postgres import postgres_bin, postgres_server
from streamq import MessageQueue, StartFrom
from tests.soak.exactly_once import SoakTransfer, prepare_database, receipts_stream
from tests.soak.exactly_once_check import judge
from tests.soak.processes import Consumers, finish
from tests.soak.settings import parse_settings
from tests.soak.soak_consumer import GROUP

# producer 0 publishes plainly, producer 1 with idempotency keys
TOPIC = {
    "1-0": SoakTransfer(payer="ada", payee="bob", cents=500, producer=0, seq=0),
    "2-0": SoakTransfer(payer="bob", payee="cat", cents=200, producer=1, seq=0),
    "3-0": SoakTransfer(payer="cat", payee="ada", cents=50, producer=0, seq=1),
}
ACKNOWLEDGED = dict.fromkeys(TOPIC, False)


def observed(topic: dict[str, SoakTransfer], **changes: Any) -> Observed:
    """The stores as a correct run leaves them for ``topic``, with ``changes``."""
    once = Counter(dict.fromkeys(topic, 1))
    balances = expected_balances(topic)
    correct = Observed(once.copy(), once.copy(), once.copy(), dict(balances), dict(balances),
                       len(topic))  # fmt: skip
    return replace(correct, **changes)


def test_each_transfer_once_in_every_store_passes() -> None:
    verdict = judge(TOPIC, observed(TOPIC), ACKNOWLEDGED, set())
    assert verdict.problems == []
    assert verdict.line().startswith("exactly-once PASSED: 3 transfers in the topic")
    assert "PostgreSQL rows 0/0, Redis effects 0/0, receipts 0/0, topic 0/0" in verdict.line()


def test_a_store_with_a_transfer_missing_or_doubled_fails_with_its_counts() -> None:
    balances = expected_balances(TOPIC)
    doubled = observed(TOPIC, applied=Counter({"1-0": 2, "2-0": 1, "3-0": 1}),
                       redis_balances={**balances, "ada": balances["ada"] - 500,
                                       "bob": balances["bob"] + 500})  # fmt: skip
    verdict = judge(TOPIC, doubled, ACKNOWLEDGED, set())
    assert verdict.problems[0] == "Redis hash applied: 1 transfers applied more than once: ['1-0']"
    assert verdict.figures["Redis effects"] == {"missing": 0, "doubled": 1, "unknown": 0}
    assert verdict.line().startswith("exactly-once FAILED")
    missing = observed(TOPIC, receipts=Counter({"1-0": 1, "2-0": 1}),
                       ledger=Counter({"1-0": 1, "2-0": 1, "3-0": 2}))  # fmt: skip
    verdict = judge(TOPIC, missing, ACKNOWLEDGED, set())
    assert verdict.figures["receipts"]["missing"] == 1
    assert verdict.figures["PostgreSQL rows"]["doubled"] == 1
    assert "receipts 1/0" in verdict.line() and "PostgreSQL rows 0/1" in verdict.line()


def test_a_transfer_written_twice_to_the_topic_fails_unless_its_plain_publish_raised() -> None:
    again = SoakTransfer(payer="ada", payee="bob", cents=500, producer=0, seq=0)
    topic = {**TOPIC, "4-0": again}  # the transfer (0, 0) twice, each entry handled once
    verdict = judge(topic, observed(topic), ACKNOWLEDGED, set())
    assert verdict.problems == ["the topic holds 1 transfers (producer, seq) more than once, "
                                "not as a plain publish that raised sent again: [(0, 0)]"]  # fmt: skip
    assert verdict.figures["topic"] == {"missing": 0, "doubled": 1, "resent_after_raise": 0}
    # a plain publish that raised, sent again by its producer: a new publish, counted apart
    verdict = judge(topic, observed(topic), ACKNOWLEDGED, {(0, 0), (0, 1)})
    assert verdict.problems == []
    assert verdict.figures["topic"] == {"missing": 0, "doubled": 0, "resent_after_raise": 1}
    # sent again with the same idempotency keys: never twice
    keyed = {**TOPIC, "4-0": SoakTransfer(payer="bob", payee="cat", cents=200, producer=1, seq=0)}
    verdict = judge(keyed, observed(keyed), ACKNOWLEDGED, {(1, 0)})
    assert verdict.figures["topic"]["doubled"] == 1 and len(verdict.problems) == 1


def test_an_acknowledged_entry_absent_from_the_topic_fails() -> None:
    verdict = judge(TOPIC, observed(TOPIC), {**ACKNOWLEDGED, "9-0": False}, set())
    assert verdict.problems == ["1 entries acknowledged by their publish are not in the topic: "
                                "['9-0']"]  # fmt: skip
    assert verdict.figures["topic"]["missing"] == 1


def test_the_soak_takes_the_exactly_once_mode() -> None:
    assert parse_settings(["--mode", "exactly-once", "--seed", "3"], None).mode == "exactly-once"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_a_consumer_of_the_mode_applies_transfers_once_each(
    redis_url: str, tmp_path: Path
) -> None:
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("the exactly-once mode needs Debian's postgresql (make postgres-deps)")
    stream = f"soak-eo-test-{uuid.uuid4().hex[:8]}"
    transfers = [SoakTransfer(payer="ada", payee="eve", cents=i + 1, producer=0, seq=i)
                 for i in range(20)]  # fmt: skip
    with postgres_server(bin_dir) as database:
        await prepare_database(database)
        async with MessageQueue(redis_url, stream=stream, group=GROUP,
                                start=StartFrom.EARLIEST) as admin:  # fmt: skip
            ids = await admin.publish_many("transfer", transfers)
            consumers = Consumers(redis_url, stream, count=1, seed=1, fail_rate=0.3,
                                  run_dir=tmp_path, mode="exactly-once", database=database)  # fmt: skip
            consumers.start_all()  # raises unless the process says "ready"
            try:
                seen = await settled(admin, database, stream, len(ids))
            finally:
                consumers.signal(0, signal.SIGTERM)
                output = finish(consumers.processes[0])
            assert "stopped: signal" in output, output
            topic = dict(zip(ids, transfers, strict=True))
            verdict = judge(topic, seen, dict.fromkeys(ids, False), set())
            assert verdict.problems == [], verdict.line()
            await admin.terminate_topic()
            receipts = receipts_stream(stream)
            for key in (receipts, f"{{{stream}}}:applied", f"{{{stream}}}:balances"):
                await admin.client_for(key).delete(key)  # on a cluster: each on its slot


async def settled(admin: MessageQueue, database: str, stream: str, count: int) -> Observed:
    with anyio.fail_after(60):
        while True:
            seen = await observe(database, admin, stream, receipts_stream(stream))
            if min(len(seen.ledger), len(seen.applied), len(seen.receipts)) >= count:
                return seen
            await anyio.sleep(0.2)
