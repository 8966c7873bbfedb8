"""The key an entry is rate-limited under (``RateLimit(by=...)``), for the flow stage of
shared mode (:mod:`.flow_stage`) and the lanes of ordered mode (:mod:`.lane_flow`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._log_summary import LogSummary
from ..flow.gate import FlowGate
from ..message import Message, RawEntry
from .routes import Route

log = logging.getLogger(__name__)


def rate_key_of(
    gate: FlowGate,
    route: Route,
    entry: RawEntry,
    publish_key: str | None,
    message: Callable[[Route, RawEntry], Message[Any]],
    summary: LogSummary,
) -> str | None:
    """The key ``entry`` is limited under: None for a limit of the whole type (no decoding),
    its publish key for ``by="key"``, else what the limit's function says of its Message.
    An entry whose payload does not decode is limited as keyless (the dispatcher
    dead-letters it); a ``by`` function that raises is logged (ERROR, summarised) and its
    entry limited as keyless too: a bug in the function never stops the entries."""
    rate = gate.config.rate_limits.get(route.type_name)
    if rate is None or rate.by is None:
        return None
    if rate.by == "key":
        return publish_key
    try:
        decoded = message(route, entry)
    except Exception:  # a bad payload: the dispatcher dead-letters it
        return None
    try:
        return gate.key_of(decoded)
    except Exception as e:
        summary.log(
            log, f"failing rate-limit key functions of type {route.type_name!r}", logging.ERROR,
            "the rate limit's by= function of type %r raised on %s (limited with the entries "
            "without a key): %r", route.type_name, entry.id, e, exc_info=e,
        )  # fmt: skip
        return None
