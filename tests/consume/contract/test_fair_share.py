"""Fair share between keys (DESIGN.md "Flow control", docs/guides/flow-control.md): with
``max_per_key=N`` at most N entries of one publish key run at once, and the keys of
waiting entries take turns for the handler slots, so one tenant's burst does not hold up
the others. Shared and fan-out mode; ordered mode runs one entry of a key at a time
already and refuses the setting."""

from __future__ import annotations

import anyio
import pytest

from streamq import ConfigError, Message
from tests.consume.contract.modes import Mode
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

ORDERED_DOC = "docs/guides/flow-control.md (ordered mode runs one entry of a key at a time)"


async def test_one_keys_burst_holds_at_most_its_share_and_other_keys_go_first(
    mode: Mode,
) -> None:
    mode.skip_unless("shared", "fanout", does_not="take max_per_key", where=ORDERED_DOC)
    mq = mode.queue(concurrency=4, max_per_key=1, max_in_flight=64, read_count=64)
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    order: list[str] = []
    release = anyio.Event()

    @mq.handler("job")
    async def job(msg: Message[int]) -> None:
        key = msg.key or ""
        running[key] = running.get(key, 0) + 1
        most[key] = max(most.get(key, 0), running[key])
        order.append(key)
        if key == "big":
            await release.wait()
        running[key] -= 1

    async with mq:
        await mq.publish_many("job", list(range(20)), key="big")  # one tenant's burst first
        await mq.publish_many("job", list(range(6)), key=lambda n: f"small-{n % 3}")
        async with mq.running():
            await wait_for(lambda: order.count("big") == 1 and len(order) == 7,
                           what="the small tenants' entries run while 'big' waits")  # fmt: skip
            release.set()
            await wait_for(lambda: len(order) == 26, what="all 26 handled")
    assert most["big"] == 1, f"{most['big']} entries of one key ran at once with max_per_key=1"


async def test_ordered_mode_refuses_max_per_key(mode: Mode) -> None:
    mode.skip_unless("ordered", does_not="refuse max_per_key", where="its docstring")
    with pytest.raises(ConfigError, match="max_per_key"):
        mode.queue(max_per_key=2)
