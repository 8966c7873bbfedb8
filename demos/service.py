"""`make demo-service`: a service run by `streamq run`, as in production.

1. `streamq run demos.service_app:app --workers 2 --metrics-port P --health-port Q`: an App
   of two queues (orders, emails) in two supervised worker processes.
2. Another process publishes 20 orders and 10 emails (`python -m demos.service publish`):
   with no URL anywhere, it reaches the same shared embedded server as the workers.
3. Worker 0 is killed with SIGKILL while it holds entries: the supervisor restarts it under
   the same consumer names, it recovers its own pending entries first, nothing is lost.
4. /readyz and /metrics answer for both workers; SIGTERM drains them: exit 0, no pending.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import redis

from demos._common import created, run, spawn, where
from streamq import Publisher
from streamq.server import default_url, free_port

ROOT = Path(__file__).resolve().parent.parent
ORDERS, EMAILS = 20, 10


def publish() -> None:
    """The second process: a sync producer (a web view, a script) with no URL configured."""
    from demos.service_app import EMAILS as EMAIL_STREAM
    from demos.service_app import ORDERS as ORDER_STREAM
    from handlers.email_handler import Email
    from handlers.order_handler import Order

    with Publisher(stream=ORDER_STREAM) as orders, Publisher(stream=EMAIL_STREAM) as emails:
        customers = ("ada", "bob", "eve")
        orders.publish_many("order", [
            Order(order_id=f"o-{i}", customer=customers[i % 3], amount=Decimal(i))
            for i in range(ORDERS)
        ])  # fmt: skip
        emails.publish_many("email", [
            Email(to=f"user{i}@example.com", subject="receipt") for i in range(EMAILS)
        ])  # fmt: skip
        print(f"  publisher (pid {os.getpid()}) -> {orders.url}: {ORDERS} orders, {EMAILS} emails")


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, "{}"


def check(condition: bool, failure: str) -> None:
    if not condition:
        raise SystemExit(f"demo failed: {failure}")


def wait(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo failed: timed out waiting for {what}")
        time.sleep(0.05)


class Run:
    """The `streamq run` process and its endpoints."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.health, self.metrics = free_port(), free_port()
        command = [
            sys.executable, "-m", "streamq.cli", "run", "demos.service_app:app",
            "--workers", "2", "--metrics-port", str(self.metrics),
            "--health-port", str(self.health), "--log-format", "json",
        ]  # fmt: skip
        print("$ streamq run demos.service_app:app --workers 2 --metrics-port P --health-port Q")
        with open(log, "w") as out:
            self.process = spawn(command, cwd=ROOT, env=env, stdout=out, stderr=out)

    def stop(self) -> None:
        """Drain the workers (SIGTERM) and wait for them; kill them if that hangs."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def ready(self) -> dict[str, Any]:
        code, body = get(self.health, "/readyz")
        report: dict[str, Any] = json.loads(body or "{}")
        report["code"] = code
        return report

    def worker(self, slot: int) -> dict[str, Any]:
        workers = self.ready().get("workers", [])
        return workers[slot] if len(workers) > slot else {}


def pending(client: redis.Redis, stream: str, group: str) -> dict[str, int]:
    consumers = client.xpending(stream, group)["consumers"] or []
    return {c["name"]: int(c["pending"]) for c in consumers}


def main() -> None:
    prefix = f"demo-service-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "DEMO_PREFIX": prefix}
    os.environ["DEMO_PREFIX"] = prefix
    from demos.service_app import DONE
    from demos.service_app import EMAILS as EMAIL_STREAM
    from demos.service_app import ORDERS as ORDER_STREAM

    created(ORDER_STREAM, EMAIL_STREAM, DONE)  # removed when the demo ends, however
    url = default_url()  # this process is a user of the shared server too
    print(f"service demo on {where()} ({url}), shared by every process below")
    client = redis.Redis.from_url(url, decode_responses=True)
    log = Path(tempfile.mkdtemp(prefix="demo-service-")) / "run.log"
    service = Run(env, log)
    try:
        wait(lambda: service.ready().get("ready"), "both workers ready")
        for w in service.ready()["workers"]:
            names = ", ".join(q["consumer"] for q in w["queues"])
            print(f"  worker {w['slot']} (pid {w['pid']}): consumers {names}")

        producer = spawn([sys.executable, "-m", "demos.service", "publish"], cwd=ROOT, env=env)
        check(producer.wait() == 0, "the publisher process failed")
        wait(lambda: pending(client, ORDER_STREAM, "billing").get("billing-0", 0) >= 2,
             "worker 0 busy")  # fmt: skip
        victim = service.worker(0)["pid"]
        held = [e["message_id"] for e in client.xpending_range(
            ORDER_STREAM, "billing", min="-", max="+", count=100, consumername="billing-0")]  # fmt: skip
        os.kill(victim, signal.SIGKILL)
        print(f"  SIGKILL worker 0 (pid {victim}) holding {len(held)} pending orders")
        wait(lambda: service.worker(0).get("restarts") == 1 and service.worker(0).get("ready"),
             "worker 0 back")  # fmt: skip
        back = service.worker(0)
        names = ", ".join(q["consumer"] for q in back["queues"])
        print(f"  worker 0 restarted (pid {back['pid']}) as {names}")

        wait(lambda: client.hlen(DONE) == ORDERS + EMAILS, "every message handled")
        done = client.hgetall(DONE).values()
        by_worker = {c: sum(1 for d in done if d.startswith(c)) for c in
                     ("billing-0", "billing-1", "mailer-0", "mailer-1")}  # fmt: skip
        left = sum(pending(client, ORDER_STREAM, "billing").values())
        print(f"  nothing lost: {sum(' order ' in d for d in done)}/{ORDERS} orders, "
              f"{sum(' email ' in d for d in done)}/{EMAILS} emails, pending {left}")  # fmt: skip
        print(f"  handled by: {by_worker}")
        recovered = {client.hget(DONE, entry_id).split()[0] for entry_id in held}
        print(f"  the {len(held)} orders worker 0 held were handled by {', '.join(recovered)}")
        check(left == 0 and recovered == {"billing-0"}, "worker 0's entries were not recovered")

        code, body = get(service.metrics, "/metrics")
        print(f"  GET /metrics -> {code}")
        for line in body.splitlines():
            if line.startswith(("streamq_handled_total", "streamq_group_lag")):
                print(f"    {line}")
        print(f"  GET /readyz -> {service.ready()['code']}")

        with Publisher(url, ORDER_STREAM) as publisher:
            publisher.publish_many("order", [
                {"order_id": f"late-{i}", "customer": "ada", "amount": "1"} for i in range(4)
            ])  # fmt: skip

        def in_hand() -> int:
            return sum(pending(client, ORDER_STREAM, "billing").values())

        # every late order read by a worker (none in the middle of a read), some still running
        wait(lambda: in_hand() + client.hlen(DONE) - ORDERS - EMAILS == 4, "all read")
        in_flight = in_hand()
        service.process.send_signal(signal.SIGTERM)
        code = service.process.wait(timeout=30)
        left = sum(pending(client, ORDER_STREAM, "billing").values())
        handled = client.hlen(DONE) - ORDERS - EMAILS
        print(f"  SIGTERM with {in_flight} orders in flight: drained, exit code {code}, "
              f"pending {left}, late orders handled {handled}/4")  # fmt: skip
        check(code == 0 and left == 0 and handled == 4, "the drain left work behind")
        workers_log = [json.loads(line) for line in log.read_text().splitlines()
                       if line.startswith("{")]  # fmt: skip
        billed = next(r for r in workers_log if r["logger"] == "demo.service")
        fields = {k: billed[k] for k in ("stream", "group", "consumer", "entry_id", "type")}
        print(f"  a JSON log line of a worker: {fields}")
    finally:  # the workers end before the demo's keys are removed: none writes after
        service.stop()
        shutil.rmtree(log.parent, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["publish"]:
        publish()
    else:
        run(main)
