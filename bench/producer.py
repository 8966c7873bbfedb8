"""A producer process for the latency figure: publish N messages at a steady rate, each
carrying its send time. Usage: python -m bench.producer URL STREAM RATE N"""

from __future__ import annotations

import sys
import time

from streamq import Publisher

from .workload import payload


def main(url: str, stream: str, rate: int, total: int) -> None:
    with Publisher(url, stream=stream) as publisher:
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            publisher.publish("email", payload(i, t=time.time()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
