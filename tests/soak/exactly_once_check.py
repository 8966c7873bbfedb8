"""The end check of the soak's exactly-once mode (:mod:`tests.soak.exactly_once`).

Against every entry of the topic (each an input of the ledger, whether its publish was
acknowledged or raised after the entry was added): exactly one row in PostgreSQL's
``ledger``, one count in the Redis hash ``applied``, one receipt, and both sets of
balances equal to the totals of those transfers (the checks of ``make demo-exactly-once``,
:func:`demos.exactly_once.problems`). Against what the producers sent: every entry whose
publish was acknowledged is in the topic, and no transfer is in it twice, except one of a
plain publish that raised and was sent again by its producer (a new publish, as
documented: counted apart).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demos.exactly_once import Observed, observe, off_by, problems
from streamq import MessageQueue
from tests.soak.exactly_once import SoakTransfer, read_raised, receipts_stream
from tests.soak.tally import read_published

PAGE = 5_000
SHOWN = 5
STORES = ("PostgreSQL rows", "Redis effects", "receipts")


@dataclass
class Verdict:
    figures: dict[str, Any]
    problems: list[str]

    def line(self) -> str:
        f = self.figures
        stores = ", ".join(f"{s} {f[s]['missing']}/{f[s]['doubled']}" for s in (*STORES, "topic"))
        return (f"exactly-once {'PASSED' if not self.problems else 'FAILED'}: "
                f"{f['transfers_in_topic']} transfers in the topic ({f['acknowledged']} "
                f"acknowledged; {f['sent_again_after_raise']} sent again after their publish "
                f"raised, {f['topic']['resent_after_raise']} of those twice in the topic); "
                f"missing/doubled: {stores}")  # fmt: skip


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def read_topic(mq: MessageQueue) -> dict[str, SoakTransfer]:
    """Every entry of the topic's stream, by ID."""
    client, stream = mq.client_for(mq.stream), mq.stream
    found: dict[str, SoakTransfer] = {}
    low = "-"
    while page := await client.xrange(stream, min=low, count=PAGE):
        for entry_id, fields in page:
            data = {text(k): v for k, v in fields.items()}["data"]
            found[text(entry_id)] = SoakTransfer.model_validate(json.loads(data))
        low = f"({text(page[-1][0])}"
    return found


async def check(mq: MessageQueue, database: str, run_dir: Path) -> Verdict:
    """The verdict once everything settled and the consumers stopped."""
    topic = await read_topic(mq)
    seen = await observe(database, mq, mq.stream, receipts_stream(mq.stream))
    return judge(topic, seen, read_published(run_dir), read_raised(run_dir))


def judge(
    topic: dict[str, SoakTransfer], seen: Observed, acknowledged: dict[str, bool],
    raised: set[tuple[int, int]],
) -> Verdict:  # fmt: skip
    """The verdict on what the stores hold (see the module's docstring)."""
    found = problems(topic, seen)
    figures: dict[str, Any] = {"transfers_in_topic": len(topic), "acknowledged": len(acknowledged),
                               "sent_again_after_raise": len(raised)}  # fmt: skip
    for store, counts in zip(STORES, (seen.ledger, seen.applied, seen.receipts), strict=True):
        missing, doubled, unknown = off_by(counts, topic)
        figures[store] = {"missing": len(missing), "doubled": len(doubled), "unknown": len(unknown)}
    refs = Counter((t.producer, t.seq) for t in topic.values())
    twice = [r for r, n in refs.items() if n > 1]
    resent = [r for r in twice if r in raised and r[0] % 2 == 0]  # plain publish, raised
    written_twice = sorted(set(twice) - set(resent))
    absent = sorted(i for i in acknowledged if i not in topic)
    figures["topic"] = {"missing": len(absent), "doubled": len(written_twice),
                        "resent_after_raise": len(resent)}  # fmt: skip
    if written_twice:
        found.append(f"the topic holds {len(written_twice)} transfers (producer, seq) more than "
                     f"once, not as a plain publish that raised sent again: "
                     f"{written_twice[:SHOWN]}")  # fmt: skip
    if absent:
        found.append(f"{len(absent)} entries acknowledged by their publish are not in the "
                     f"topic: {absent[:SHOWN]}")  # fmt: skip
    return Verdict(figures, found)
