"""A consumer process that also publishes, for the client-stall test (``test_stall.py``):
frozen with SIGSTOP past the socket timeout while its reads and publishes wait for replies.

Usage: python -m tests.helpers.stall_client URL STREAM OUT_DIR

Prints ``ready`` once consuming; SIGUSR1 stops its publishers, after which it prints
``info <stream length>`` (``topic_info()`` on the connections it used) or ``info failed
<error>``; SIGTERM stops it (``stopped: signal``). Each handled message is a
line ``<id> <data>`` of OUT_DIR/handled; each publish's outcome a line of
OUT_DIR/published: ``ok <id> <n>`` (its own entry ID: returned, or carried by
NotReplicatedError), ``lost <n> <error>`` (a transient error: the entry may be in the
stream) or ``wrong <n> <error>`` (anything else: a reply out of step).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio

from streamq import Message, MessageQueue, NotReplicatedError, ServerUnavailableError, StartFrom

PUBLISHERS = {"plain": (0, 1), "durable": (2,)}  # kind: the publisher numbers of that kind
PUBLISH_EVERY = 0.005


async def publish_one(mq: MessageQueue, n: int, durable: bool) -> str:
    """The outcome line of publishing ``n`` (durable: one replica asked for, none exist)."""
    try:
        if durable:
            entry_id = await mq.publish("job", n, replicas=1, timeout=0.05)
        else:
            entry_id = await mq.publish("job", n)
    except NotReplicatedError as e:
        entry_id = e.entry_id
    except ServerUnavailableError as e:
        return f"lost {n} {' '.join(str(e).split())}"
    except Exception as e:
        return f"wrong {n} {type(e).__name__}: {' '.join(str(e).split())}"
    return f"ok {entry_id} {n}"


async def publisher(
    mq: MessageQueue, number: int, durable: bool, out: Any, state: dict[str, bool]
) -> None:
    n = number * 1_000_000
    while state["publishing"]:
        out.write(await publish_one(mq, n, durable) + "\n")
        out.flush()
        n += 1
        await anyio.sleep(PUBLISH_EVERY)


def appending(path: Path) -> TextIO:
    return open(path, "a", encoding="utf-8")  # closed at exit


async def main(url: str, stream: str, out_dir: str) -> None:
    state = {"publishing": True}
    signal.signal(signal.SIGUSR1, lambda *_: state.update(publishing=False))
    # the timings of streamq.testing's TEST_TIMINGS (not imported: it imports pytest, and a
    # queue under pytest leaves SIGTERM alone)
    mq = MessageQueue(url, stream=stream, group="g", consumer="c", start=StartFrom.EARLIEST,
                      claim_idle=1.0, claim_interval=0.2, block=0.2, grace=5.0)  # fmt: skip
    handled, published = (
        appending(Path(out_dir) / "handled"),
        appending(Path(out_dir) / "published"),
    )

    @mq.handler("job")
    async def handle(msg: Message[int]) -> None:
        handled.write(f"{msg.id} {msg.data}\n")
        handled.flush()

    async with mq, anyio.create_task_group() as tg:
        await tg.start(mq.run)
        print("ready", flush=True)
        async with anyio.create_task_group() as publishers:
            for kind, numbers in PUBLISHERS.items():
                for number in numbers:
                    publishers.start_soon(
                        publisher, mq, number, kind == "durable", published, state
                    )
        print(await info_line(mq), flush=True)
    print(f"stopped: {mq.stop_reason}", flush=True)


async def info_line(mq: MessageQueue) -> str:
    try:
        return f"info {(await mq.topic_info()).length}"
    except Exception as e:
        return f"info failed {type(e).__name__}: {' '.join(str(e).split())}"


if __name__ == "__main__":
    url, stream, out_dir = sys.argv[1:4]
    anyio.run(main, url, stream, out_dir)
