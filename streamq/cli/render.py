"""What the ``streamq`` command prints: tables for people, JSON lines for programs.

Every text that comes from Redis (names, types, reasons, tracebacks) is escaped before it
reaches the operator's terminal: an entry must not be able to send escape sequences (ESC,
CSI, OSC), rewrite a line (CR) or reorder text (bidi controls). Control characters are
shown as ``\\x1b``-style escapes; backslashes are left as they are, so reasons that quote
regexes or Windows paths stay readable. JSON output is produced by ``json.dumps`` with
``ensure_ascii=True``, which escapes all of them already.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .._text import age as age
from .._text import keep_start
from .._text import one_line as one_line
from .._text import terminal_safe as terminal_safe
from ..flow.waiting import REPORT_FRESH, GroupWaiting
from ..message import PUBLISH_MARKER
from ..payload.display import shown_data, shown_meta
from ..payload.keyring import Keyring
from ..topic.admin import TopicInfo
from ..topic.deadletter import DeadLetter
from ..wire.replies import Pending, text

# A reason longer than this (written by hand: streamq stores at most 4,000 chars) is cut,
# saying how much was left out.
MAX_REASON_CHARS = 4000
TRACEBACK_TAIL_LINES = 3
_COLUMNS = (b"type", b"data", b"meta")
_SHOWN_IF_SET = (b"key", b"ver")  # a message's key and schema version, when it has them
# not a field of the message: the publisher's marker (streamq.publish.resend)
_NOT_OTHER = (*_COLUMNS, *_SHOWN_IF_SET, PUBLISH_MARKER)


decoded = text  # a reply value as text; bytes that are not UTF-8 as ``\\x..`` escapes


def render_info(info: TopicInfo) -> str:
    stopped = ", ".join(one_line(i) for i in info.stopped_ids)
    lines = [
        f"stream        {one_line(info.stream)}",
        f"length        {info.length}",
        f"first / last  {one_line(info.first_id or '-')} / {one_line(info.last_id or '-')}",
        f"dead letters  {info.dead_letters}",
        f"stopped IDs   {stopped or '-'}",
        f"scheduled     {_scheduled(info)}",
        *(f"damaged       {one_line(record)}: set aside" for record in info.damaged),
        "",
        f"{'group':<20} {'last delivered':<22} {'pending':>8} {'lag':>8} "
        f"{'oldest pending':>15}  consumers",
    ]
    for g in info.groups:
        consumers = ", ".join(f"{one_line(c.name)}({c.pending})" for c in g.consumers) or "-"
        lag = "?" if g.lag is None else str(g.lag)
        lines.append(
            f"{one_line(g.name):<20} {one_line(g.last_delivered_id):<22} {g.pending:>8} "
            f"{lag:>8} {age(g.oldest_pending_age_ms):>15}  {consumers}"
        )
        if g.owner is not None:  # ordered mode on a plain stream: active/standby
            lines.append(f"  ordered owner: {owner_text(g.owner)}")
        if info.paused.get(g.name):  # flow control: mq.pause(), streamq pause
            lines.append(f"  paused: {paused_text(info.paused[g.name])}")
        if g.name in info.waiting:  # flow control: as the running consumers reported it
            lines.append(f"  waiting: {waiting_text(info.waiting[g.name])}")
    if not info.groups:
        lines.append("(no consumer groups)")
    if info.partitions:
        lines += _partition_lines(info)
    return "\n".join(lines)


def paused_text(paused: list[str]) -> str:
    """What is paused in a group, as shown: ``the whole group``, then type names."""
    return ", ".join("the whole group" if p == "*" else repr(one_line(p)) for p in paused)


def waiting_text(waiting: GroupWaiting) -> str:
    """What a group's running consumers hold back, as shown: by reason, then by whom."""
    reasons = f"pause {waiting.pause}, rate limit {waiting.rate_limit}, throttle {waiting.throttle}"
    count = len(waiting.consumers)
    whom = f"{count} consumer{'s' if count != 1 else ''}"
    return f"{reasons} (reported by {whom} within {REPORT_FRESH:g} s)"


def owner_text(owner: tuple[str, int]) -> str:
    """An ordered owner as shown: the consumer and its fencing token."""
    return f"{one_line(owner[0])} (token {owner[1]})"


def _partition_lines(info: TopicInfo) -> list[str]:
    """The streams table (a row per partition, and level on a topic with priorities);
    with an ``owner`` column while ordered consumers own any."""
    owned = any(p.owners for p in info.partitions)
    levels = any(p.priority is not None for p in info.partitions)
    lines = ["", f"{'partition':<10} " + (f"{'level':<6} " if levels else "")
             + f"{'stream':<28} {'node':<22} {'length':>8} {'lag':>8} "
             f"{'pending':>8} {'oldest pending':>15} {'dead':>6}"
             + ("  owner (ordered)" if owned else "")]  # fmt: skip
    for p in info.partitions:
        owners = ", ".join(f"{one_line(g)}: {owner_text(o)}" for g, o in sorted(p.owners.items()))
        level = f"{p.priority:<6} " if levels else ""
        lines.append(
            f"{p.partition:<10} {level}{one_line(p.stream):<28} {p.node:<22} {p.length:>8} "
            f"{'?' if p.lag is None else p.lag:>8} {p.pending:>8} "
            f"{age(p.oldest_pending_age_ms):>15} {p.dead_letters:>6}"
            + (f"  {owners or '-'}" if owned else "")
        )
    return lines


def _scheduled(info: TopicInfo) -> str:
    if info.next_due is None:
        return str(info.scheduled)
    return f"{info.scheduled} (next due {info.next_due.isoformat(timespec='seconds')})"


def render_pending(rows: Iterable[Pending]) -> str:
    lines = [f"{'id':<24} {'consumer':<24} {'idle':>10} {'deliveries':>10}"]
    lines.extend(
        f"{one_line(row.id):<24} {one_line(row.consumer):<24} "
        f"{age(row.idle_ms):>10} {row.deliveries:>10}"
        for row in rows
    )
    return "\n".join(lines)


def render_dead_letters(
    letters: Iterable[DeadLetter], *, full_traceback: bool = False, keyring: Keyring | None = None
) -> str:
    """One block per letter: a header line, the full reason, how its payload is stored
    when it is encoded (and, with ``keyring``, whether it decodes), the error type, and the
    last lines of the traceback (all of it with ``full_traceback``)."""
    return "\n".join(_dead_letter(d, full_traceback, keyring) for d in letters)


def _dead_letter(d: DeadLetter, full_traceback: bool, keyring: Keyring | None) -> str:
    dead_at = (
        datetime.fromtimestamp(d.dead_at_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        if d.dead_at_ms > 0
        else "-"
    )
    header = (
        f"{one_line(d.id)}  original {one_line(d.original_id or '-')}  "
        f"type {one_line(d.type if d.type is not None else '-')}  "
        f"{f'key {one_line(d.key)}  ' if d.key is not None else ''}attempts {d.attempts}  "
        f"group {one_line(d.group or '-')}  consumer {one_line(d.consumer or '-')}  "
        f"dead at {dead_at}"
    )
    lines = [header, f"  error: {one_line(keep_start(d.error, MAX_REASON_CHARS)) or '-'}"]
    if d.enc is not None or d.kid is not None:
        lines.append(f"  payload: {_payload_text(d, keyring)}")
    if d.error_type:
        lines.append(f"  error type: {one_line(d.error_type)}")
    if d.traceback:
        lines.extend(_traceback_lines(d.traceback, full_traceback))
    return "\n".join(lines)


def _payload_text(d: DeadLetter, keyring: Keyring | None) -> str:
    """How an encoded letter's payload is stored, and whether it decodes here."""
    stored = d.enc or "plain data, encrypted meta values"
    stored += f" with key {d.kid!r}" if d.kid is not None else ""
    stored += f", version {d.ver}" if d.ver is not None else ""
    if d.enc is None:
        return one_line(stored)
    fields = {b"type": d.type, b"data": d.data, b"enc": d.enc, b"kid": d.kid}
    _, said = shown_data({k: v.encode() for k, v in fields.items() if v is not None}, keyring)
    if "encrypted" in said:
        return one_line(f"{stored} (encrypted: give --keyring-env to check that it decrypts)")
    if "data_error" in said:
        return one_line(f"{stored}: {said['data_error']}")
    return one_line(f"{stored}: decodes{' with this keyring' if d.kid is not None else ''}")


def _traceback_lines(traceback: str, full: bool) -> list[str]:
    lines = [line for line in traceback.splitlines() if line.strip()]
    shown = lines if full else lines[-TRACEBACK_TAIL_LINES:]
    title = "traceback:" if len(shown) == len(lines) else (
        f"traceback (last {len(shown)} of {len(lines)} lines; --full shows all):"
    )  # fmt: skip
    return [f"  {title}", *(f"    {one_line(line)}" for line in shown)]


# -- tail: one JSON object per line ------------------------------------------------
def tail_line(entry_id: str, fields: Mapping[bytes, bytes], keyring: Keyring | None = None) -> str:
    """``{"id", "type", "data", "meta"}`` (and ``key``, ``ver`` when the entry has them)
    as one line of ASCII JSON: ``data`` and ``meta``
    decoded (raw text plus ``data_error``/``meta_error`` when they are not valid JSON; a
    compressed ``data`` decompressed, an encrypted one decrypted with ``keyring``, else
    ``null`` with ``encrypted``; encrypted ``meta`` values decrypted with ``keyring``),
    fields outside the wire format under ``other_fields`` (but the publisher's marker)."""
    raw_type = fields.get(b"type")
    record: dict[str, Any] = {
        "id": entry_id,
        "type": decoded(raw_type) if raw_type is not None else None,
    }
    record.update(
        (name.decode(), decoded(fields[name])) for name in _SHOWN_IF_SET if name in fields
    )
    data, said = shown_data(fields, keyring)  # encrypted, without a keyring: shown as such
    if said:
        record.update(data=None, **said)
    else:
        record.update(_decoded_json("data", data))
    raw_meta, meta_said = shown_meta(fields, keyring)
    record.update(_decoded_json("meta", raw_meta) if raw_meta is not None else {"meta": {}})
    record.update(meta_said)
    if raw_meta is not None and "meta_error" not in record and not isinstance(record["meta"], dict):
        record.update(meta=decoded(raw_meta), meta_error="not a JSON object")
    other = {decoded(k): decoded(v) for k, v in fields.items() if k not in _NOT_OTHER}
    if other:
        record["other_fields"] = other
    return json.dumps(record, ensure_ascii=True)


def _decoded_json(name: str, raw: bytes | None) -> dict[str, Any]:
    """``{name: value}``, or the raw text and ``{name}_error`` when it is not JSON."""
    if raw is None:
        return {name: None, f"{name}_error": "missing"}
    try:
        return {name: json.loads(raw, parse_constant=_no_constant)}
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        return {name: decoded(raw), f"{name}_error": f"not valid JSON: {e}"}


def _no_constant(name: str) -> Any:
    # NaN and Infinity are Python's extension, not JSON: jq would refuse the line.
    raise ValueError(f"{name} is not JSON")
