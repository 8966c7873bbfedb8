"""What a plain consumer's process loads: not the retry engine until a handler fails, nor
the Sentinel clients (a URL of one node), the embedded servers or App (memory of a running
consumer); nor a cluster's slot table for a single node."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc

import pytest

from streamq.wire.slots import SlotTable

PROGRAM = """
import sys
import anyio
from pydantic import BaseModel
from streamq import Message, MessageQueue, StartFrom

class Job(BaseModel):
    n: int

mq = MessageQueue(sys.argv[1], stream=sys.argv[2], group="g", start=StartFrom.EARLIEST)
handled = []

@mq.handler("job")
async def job(msg: Message[Job]) -> None:
    handled.append(msg.data.n)
    if len(handled) == 3:
        await mq.stop()

async def main() -> None:
    async with mq:
        await mq.publish_many("job", [Job(n=i) for i in range(3)])
        await mq.run(handle_signals=False)

anyio.run(main)
assert handled == [0, 1, 2], handled
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("tenacity", "streamq", "cronsim"))))
"""


@pytest.mark.slow
def test_a_consumer_whose_handlers_succeed_loads_only_what_it_uses(
    redis_url: str, stream: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, redis_url, stream],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    loaded = set(done.stdout.split())
    assert "streamq.consume.dispatch" in loaded  # the program did consume
    assert not {m for m in loaded if m.split(".")[0] == "tenacity"}
    assert "streamq.wire.sentinel" not in loaded
    assert "streamq.server.single" not in loaded and "streamq.app" not in loaded
    assert "streamq.publish.blocking" not in loaded, "an asyncio consumer loaded the Publisher"
    assert "cronsim" not in loaded, "a queue without a cron publisher loaded cronsim"
    assert "streamq.consume.ordered" not in loaded, "a queue not ordered loaded ordered mode"
    assert "streamq.consume.fanout" not in loaded, "a queue with a group loaded fan-out"


def test_a_slot_table_takes_memory_only_once_a_cluster_is_learnt() -> None:
    tracemalloc.start()
    try:
        table = SlotTable()  # every deployment has one, a single node's too
        empty, _ = tracemalloc.get_traced_memory()
        assert empty < 10_000, f"an unused slot table holds {empty} bytes"
        assert table.owner(5) is None and table.masters() == []
        table.move(5, ("10.0.0.1", 7000))  # a MOVED reply
        assert table.owner(5) == ("10.0.0.1", 7000) and table.masters() == [("10.0.0.1", 7000)]
        assert table.owner(6) is None
    finally:
        tracemalloc.stop()
