"""Text shown to people (the ``streamq`` command's tables, the dashboard's pages) made safe.

Every text that comes from Redis (names, types, reasons, tracebacks) is escaped before it
reaches a terminal or a page: an entry must not be able to send escape sequences (ESC, CSI,
OSC), rewrite a line (CR) or reorder text (bidi controls). Shared by :mod:`streamq.cli` and
:mod:`streamq.dashboard`, which otherwise do not import each other's rendering. Long texts
(an error, a traceback) are cut to a bound saying how much was cut, as a dead letter keeps
them and as the pages show them (:func:`keep_start`, :func:`keep_end`).
"""

from __future__ import annotations

# C0 and C1 controls and DEL (Unicode category Cc), the line and paragraph separators, and
# the bidirectional formatting characters ("Trojan Source").
_UNSAFE = [*range(0x20), *range(0x7F, 0xA0)]
_UNSAFE_WIDE = [0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F)]
_UNSAFE_WIDE += range(0x2066, 0x206A)
_ONE_LINE = {c: f"\\x{c:02x}" for c in _UNSAFE} | {c: f"\\u{c:04x}" for c in _UNSAFE_WIDE}
_ONE_LINE.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})
_MULTI_LINE = {c: e for c, e in _ONE_LINE.items() if c != ord("\n")}


def one_line(value: object) -> str:
    """``value`` as text with every control character escaped, newlines included."""
    return str(value).translate(_ONE_LINE)


def cut(value: object, limit: int) -> str:
    """``value`` as :func:`one_line` shows it, at most ``limit`` characters: cut between
    characters (never inside an escape), ending in ``…`` where cut. For a table column."""
    shown = one_line(value)
    if len(shown) <= limit:
        return shown
    kept: list[str] = []
    room = max(limit - 1, 0)  # the "…"
    for char in str(value):
        piece = char.translate(_ONE_LINE)
        if len(piece) > room:
            break
        kept.append(piece)
        room -= len(piece)
    return "".join(kept) + "…"


def terminal_safe(text: str) -> str:
    """``text`` with every control character but the newline escaped."""
    return text.translate(_MULTI_LINE)


def age(ms: int | None) -> str:
    """How long ago ``ms`` milliseconds is, for people: ``4.2s``, ``3.0m``, ``1.5h``.
    A time just below zero (Redis's idle times read against a clock a little behind) is
    ``0.0s``."""
    if ms is None:
        return "-"
    seconds = max(ms, 0) / 1000
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def keep_end(text: str, limit: int) -> str:
    """``text`` cut from the start to at most ``limit`` chars, at a line boundary."""
    if len(text) <= limit:
        return text
    tail = text[len(text) - limit + 40 :]
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return f"… ({len(text) - len(tail)} chars cut)\n{tail}"


def keep_start(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` chars, the marker saying how many were cut
    included (``… [cut 6,024 characters]``)."""
    if len(text) <= limit:
        return text
    kept = limit
    for _ in range(3):  # the marker's length depends on the count it names
        marker = f"… [cut {len(text) - kept:,} characters]"
        kept = max(limit - len(marker), 0)
    return text[:kept] + f"… [cut {len(text) - kept:,} characters]"
