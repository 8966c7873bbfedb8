"""The type and key of a scheduled message, read from an excerpt of its stored payload.

A listing of what waits (``scheduled()``, ``streamq scheduled list``, the dashboard) shows
each message's type and key, not its data, which may be megabytes: it reads the first and
last :data:`EXCERPT_BYTES` of each payload, cut on the server
(:func:`streamq.wire.excerpts.hash_excerpts`). The payload is the JSON array
``["type", "email", "data", "...", ..., "key", "k"]`` that :mod:`.scheduling` writes: the
type comes first, the key (when there is one) last. A value that does not fit its
excerpt (a key of more than 8 KB), like a damaged payload, is listed as None.
"""

from __future__ import annotations

import json

from ..wire.excerpts import ValueExcerpt

EXCERPT_BYTES = 8192
_DECODER = json.JSONDecoder()
_KEY_PAIR = '"key","'


def listed_fields(excerpt: ValueExcerpt | None) -> tuple[str | None, str | None]:
    """The type and the key of a stored payload, from its excerpt (None: unknown)."""
    if excerpt is None:
        return None, None
    head = excerpt.head.decode(errors="replace")
    leading = _leading_items(head)
    message_type = _value_of(leading, "type")
    if excerpt.whole:
        return message_type, _value_of(leading, "key")
    return message_type, _last_key(excerpt.tail.decode(errors="replace"))


def _leading_items(text: str) -> list[object]:
    """The items of a JSON array whose text is cut: those that end before the cut."""
    items: list[object] = []
    if not text.startswith("["):
        return items
    at = 1
    while at < len(text):
        try:
            item, end = _DECODER.raw_decode(text, at)
        except ValueError:
            break
        items.append(item)
        if text[end : end + 1] != ",":
            break
        at = end + 1
    return items


def _value_of(items: list[object], name: str) -> str | None:
    for i in range(0, len(items) - 1, 2):
        if items[i] == name and isinstance(items[i + 1], str):
            return str(items[i + 1])
    return None


def _last_key(tail: str) -> str | None:
    """The value of a ``"key"`` pair that ends the array whose last bytes are ``tail``.

    Inside a JSON string every ``"`` is escaped, so ``,"key","`` occurs only between items.
    """
    at = tail.rfind(_KEY_PAIR)
    while at > 0:
        if tail[at - 1] == ",":
            try:
                pair = json.loads("[" + tail[at:])
            except ValueError:
                return None
            ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)
            return str(pair[1]) if ok else None
        at = tail.rfind(_KEY_PAIR, 0, at)
    return None
