"""Consumer processes for the RSS figures: consume N prefilled entries, print peak RSS (MB).

``python -m bench.rss_consumer URL STREAM N`` runs a streamq consumer (``consumer_rss_mb``);
with ``--raw`` a plain redis-py XREADGROUP + XACK loop (``raw_redispy_rss_mb``, the
yardstick). The stream is prefilled by the parent, so neither figure counts the producing.
"""

from __future__ import annotations

import resource
import sys

import anyio


async def streamq_consumer(url: str, stream: str, n: int) -> None:
    from .workload import noop_consumer, queue

    mq = queue(url, stream)
    noop_consumer(mq, n)
    async with mq:
        await mq.run(handle_signals=False)


async def raw_consumer(url: str, stream: str, n: int) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    await client.xgroup_create(stream, "raw", id="0")
    done = 0
    while done < n:
        reply = await client.xreadgroup("raw", "c", {stream: ">"}, count=100, block=1000)
        ids = [entry_id for entry_id, _ in reply[0][1]]
        await client.xack(stream, "raw", *ids)
        done += len(ids)
    await client.aclose()


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
    consume = raw_consumer if "--raw" in sys.argv else streamq_consumer
    url, stream, n = (a for a in sys.argv[1:] if a != "--raw")
    anyio.run(consume, url, stream, int(n))
    print(peak_rss_mb())
