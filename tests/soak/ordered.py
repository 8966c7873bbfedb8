"""The soak's ordered mode (``--mode ordered``): keyed jobs on a partitioned topic, consumed
with ``ordered=True``, and the check of the guarantee of docs/guides/ordering.md.

Each producer publishes jobs of its own keys (``p<producer>-k<n>``), a per-key sequence
number in the data, raised only once XADD acknowledged the entry (a chunk sent again after
a failure may put one number twice in the stream: a re-run, allowed). Each consumer
process appends one line per handler start and end to its own file (``calls-<name>-<pid>``:
written by the process itself, so a SIGKILL loses nothing it wrote, and a failed-over
master cannot lose it either)::

    S <time> <key> <seq> <entry id>
    E <time> <key> <seq> <entry id> <ok 1/0>

The check, per key: in the order of handler starts, no start has a sequence number past
the first one not yet handled to completion at that moment (re-runs of completed ones are
allowed, and order goes on from there); and no two calls overlapped in one process (they
never may), nor across processes in a run without faults (``strict``).
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio

from streamq import Message, MessageQueue, RetryPolicy, StartFrom

PARTITIONS = 4
KEYS = 50  # over all producers
LEASE = 3.0  # ownership_lease: a SIGKILLed or paused owner's partitions move after this
VIOLATIONS_SHOWN = 10


def key_name(producer: int, n: int) -> str:
    return f"p{producer}-k{n}"


class CallLog:
    """The consumer's record of its handler calls (one file per process)."""

    def __init__(self, path: Path) -> None:
        self._out: TextIO = open(path, "a", encoding="ascii")  # noqa: SIM115  # lives with the process

    def write(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()  # in the kernel: survives a SIGKILL of this process


def make_ordered_queue(
    url: str, stream: str, consumer: str, seed: int, fail_rate: float, calls: Path,
    group: str, message_type: str, work: float, max_deliveries: int,
) -> MessageQueue:  # fmt: skip
    """The ordered consumer of the soak; every handler call is written to ``calls``."""
    from tests.soak.soak_consumer import CLEANUP, Job, PoisonError, TransientError

    mq = MessageQueue(
        url or None, stream=stream, group=group, consumer=consumer, start=StartFrom.EARLIEST,
        retry=RetryPolicy(attempts=3, backoff=0.05, max_deliveries=max_deliveries),
        claim_idle=1.0, claim_interval=0.2, block=0.2, grace=5.0, ownership_lease=LEASE,
        concurrency=8, max_in_flight=32, read_count=32, partitions=PARTITIONS, ordered=True,
        cleanup=CLEANUP,
    )  # fmt: skip
    rng, log = random.Random(seed), CallLog(calls / f"calls-{consumer}-{os.getpid()}.txt")

    @mq.handler(message_type)
    async def handle(msg: Message[Job]) -> None:
        head = f"{msg.data.key} {msg.data.seq} {msg.id}"
        log.write(f"S {time.time():.6f} {head}")
        ok = False
        try:
            if msg.data.poison:
                raise PoisonError(f"poison job {msg.data.key}/{msg.data.seq}")
            if rng.random() < fail_rate:
                raise TransientError("injected transient failure")
            await anyio.sleep(rng.uniform(0, work))
            ok = True
        finally:
            log.write(f"E {time.time():.6f} {head} {int(ok)}")

    return mq


@dataclass
class Call:
    seq: int
    entry_id: str
    process: str
    start: float
    end: float | None = None  # None: the process died (or never came back) inside it
    ok: bool = False


def read_calls(run_dir: Path) -> dict[str, list[Call]]:
    """Every handler call of every consumer process, per key."""
    calls: dict[str, list[Call]] = defaultdict(list)
    for path in sorted(run_dir.glob("calls-*.txt")):
        process = path.stem.removeprefix("calls-")
        open_calls: dict[tuple[str, str], Call] = {}
        for line in path.read_text(encoding="ascii").splitlines():
            parts = line.split()
            if len(parts) < 5 or (parts[0] == "E" and len(parts) < 6):
                continue  # a line cut by a SIGKILL
            kind, at, key, seq, entry_id = (
                parts[0],
                float(parts[1]),
                parts[2],
                int(parts[3]),
                parts[4],
            )
            if kind == "S":
                call = Call(seq, entry_id, process, at)
                open_calls[(key, entry_id)] = call
                calls[key].append(call)
            elif (ended := open_calls.pop((key, entry_id), None)) is not None:
                ended.end, ended.ok = at, parts[5] == "1"
    return calls


def handled_ids(calls: dict[str, list[Call]]) -> dict[str, int]:
    """Entry ID -> completed handler calls (the tally's ``handled`` in ordered mode)."""
    handled: dict[str, int] = defaultdict(int)
    for key_calls in calls.values():
        for call in key_calls:
            if call.ok:
                handled[call.entry_id] += 1
    return dict(handled)


@dataclass
class OrderReport:
    skips: list[dict[str, Any]] = field(default_factory=list)
    same_process_overlaps: list[dict[str, Any]] = field(default_factory=list)
    cross_process_overlaps: list[dict[str, Any]] = field(default_factory=list)
    reruns: int = 0
    keys: int = 0
    calls: int = 0

    def problems(self, strict: bool) -> list[str]:
        found = []
        if self.skips:
            found.append(f"ORDER: {len(self.skips)} handler calls skipped ahead, first "
                          f"{self.skips[:VIOLATIONS_SHOWN]}")  # fmt: skip
        if self.same_process_overlaps:
            found.append(f"ORDER: {len(self.same_process_overlaps)} overlapping calls of one key "
                          f"in one process, first {self.same_process_overlaps[:VIOLATIONS_SHOWN]}")  # fmt: skip
        if strict and self.cross_process_overlaps:
            found.append(f"ORDER: {len(self.cross_process_overlaps)} overlapping calls of one key "
                          f"without faults, first {self.cross_process_overlaps[:VIOLATIONS_SHOWN]}")  # fmt: skip
        return found

    def figures(self) -> dict[str, Any]:
        return {"ordered_keys": self.keys, "ordered_calls": self.calls,
                "ordered_reruns": self.reruns, "ordered_skips": len(self.skips),
                "ordered_overlaps_same_process": len(self.same_process_overlaps),
                "ordered_overlaps_across_processes": len(self.cross_process_overlaps)}  # fmt: skip


def check_order(calls: dict[str, list[Call]]) -> OrderReport:
    """Check every key's calls (see the module docstring)."""
    report = OrderReport(keys=len(calls), calls=sum(map(len, calls.values())))
    for key, key_calls in sorted(calls.items()):
        check_key(key, key_calls, report)
    return report


def check_key(key: str, calls: list[Call], report: OrderReport) -> None:
    # Events in time order; at one instant an end comes before a start.
    events = [(c.start, 1, i) for i, c in enumerate(calls)]
    events += [(c.end, 0, i) for i, c in enumerate(calls) if c.ok and c.end is not None]
    completed: set[int] = set()
    first_open, running = 0, dict[int, Call]()
    for at, kind, i in sorted(events):
        call = calls[i]
        if kind == 0:
            completed.add(call.seq)
            while first_open in completed:
                first_open += 1
            continue
        if call.seq > first_open:
            report.skips.append({"key": key, "seq": call.seq, "entry": call.entry_id,
                                 "process": call.process, "at": round(at, 3),
                                 "not_completed_yet": first_open})  # fmt: skip
        elif call.seq in completed:
            report.reruns += 1
        for j, other in list(running.items()):
            if other.end is not None and other.end <= at:
                del running[j]
                continue
            row = {"key": key, "a": (other.seq, other.process, round(other.start, 3)),
                   "b": (call.seq, call.process, round(at, 3))}  # fmt: skip
            same = other.process == call.process and other.end is not None
            (report.same_process_overlaps if same else report.cross_process_overlaps).append(row)
        running[i] = call
