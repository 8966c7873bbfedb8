"""A consumer process for the ``consumer_rss_mb`` figure: consume N entries, print max RSS."""

from __future__ import annotations

import resource
import sys

import anyio

from .workload import fresh_stream, noop_consumer, prefill, queue


async def main(url: str, n: int) -> None:
    stream = fresh_stream("rss")
    await prefill(url, stream, n)
    mq = queue(url, stream)
    noop_consumer(mq, n)
    async with mq:
        await mq.run(handle_signals=False)
        await mq.client.delete(stream)


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM belongs to the current image; ru_maxrss on Linux keeps
    the peak of the parent that forked us across exec, which would overstate it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]))
    print(peak_rss_mb())
