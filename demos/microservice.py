"""`make demo-microservice`: streamq inside an existing service.

The consumer runs in the background of the app (``mq.running()``, as in an ASGI lifespan),
blocking code (a Flask/Django view, here a thread) publishes with the sync ``Publisher``,
``health()`` answers a readiness probe and /metrics is served for Prometheus.
"""

from __future__ import annotations

import urllib.request

import anyio
import anyio.to_thread

from demos._common import fresh_stream, run, setup_logging
from handlers.email_handler import Email, install
from streamq import MessageQueue, Publisher, StartFrom
from streamq.metrics import serve_metrics
from streamq.server import default_url


def blocking_view(url: str, stream: str) -> list[str]:
    """What a synchronous web view would do on a sign-up."""
    with Publisher(url, stream=stream) as publisher:
        return publisher.publish_many(
            "email", [Email(to=f"user{i}@example.com", subject="Welcome") for i in range(3)]
        )


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


async def main() -> None:
    setup_logging()
    url, stream = default_url(), fresh_stream("service")
    mq = MessageQueue(url, stream=stream, group="mailer", start=StartFrom.EARLIEST)
    outbox: list[Email] = []
    install(mq, outbox)
    metrics = serve_metrics(mq, port=0)
    print(f"service up: metrics on http://127.0.0.1:{metrics.port}/metrics")
    try:
        async with mq.running():  # app startup ... app shutdown
            ids = await anyio.to_thread.run_sync(blocking_view, url, stream)
            print(f"sync view published {len(ids)} emails")
            with anyio.fail_after(10):
                while len(outbox) < 3:
                    await anyio.sleep(0.05)
            print(f"health: {await mq.health()}")
            body = await anyio.to_thread.run_sync(scrape, metrics.port)
            wanted = ("streamq_handled_total", "streamq_group_lag", "streamq_stream_length")
            for line in body.splitlines():
                if line.startswith(wanted):
                    print(f"  {line}")
        print(f"service stopped: {mq.stop_reason}; {len(outbox)} emails sent")
        async with mq:  # running() closed the queue it opened; reopen to clean up
            await mq.terminate_topic()
    finally:
        metrics.close()


if __name__ == "__main__":
    run(main)
