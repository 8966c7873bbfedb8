"""A producer process for the scheduled-lateness figure: schedule N messages at a steady
rate, each due DELAY seconds after it is sent. Usage:
python -m bench.scheduled_producer URL STREAM RATE N DELAY"""

from __future__ import annotations

import sys
import time

from streamq import Publisher

from .workload import payload


def main(url: str, stream: str, rate: int, total: int, delay: float) -> None:
    with Publisher(url, stream=stream) as publisher:
        start = time.perf_counter()
        for i in range(total):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            publisher.publish("email", payload(i), delay=delay)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
