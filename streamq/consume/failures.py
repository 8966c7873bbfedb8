"""What a handler raised, as streamq records it: a description that never raises, and the
line between a cancellation streamq asked for and one it did not.

A handler may raise anything at all. ``Exception`` subclasses are ordinary failures. A
``CancelledError`` is streamq's own only when one of the consumer's cancel scopes is
cancelled (stop, grace, ``stop_message``, ``handler_timeout``) or the task itself is being
cancelled; any other one (a handler awaiting a future cancelled elsewhere, a plain ``def``
handler raising it in its thread) is a failure like any other, and so are ``SystemExit``
and ``GeneratorExit`` raised by a handler. Letting them through would end a worker without
a trace while its entries stay in flight, stalling the consumer for good.
"""

from __future__ import annotations

import asyncio
import math

import anyio
from pydantic import ValidationError

from .._text import keep_start
from ..errors import HandlerCrashError

# For log lines and errors raised to callers; a dead letter's reason takes the whole
# description (limit=None) and is cut to its own, documented MAX_ERROR_CHARS.
MAX_DESCRIPTION = 2000


def describe(error: BaseException, limit: int | None = MAX_DESCRIPTION) -> str:
    """One line naming the error; pydantic validation errors listed field by field; cut
    to ``limit`` characters saying how many were cut (``None``: whole).

    Never raises: an exception whose ``__str__`` (or ``errors()``) raises is described by
    its class name.
    """
    name = type(error).__name__
    try:
        if isinstance(error, ValidationError):
            parts = [
                f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
                for e in error.errors()
            ]
            text = f"{error.error_count()} validation error(s): " + "; ".join(parts)
        else:
            message = str(error).replace("\n", " ")
            text = f"{name}: {message}" if message else name
    except Exception:
        text = f"{name} (its message could not be rendered)"
    return text if limit is None else keep_start(text, limit)


def cancelled_by_streamq() -> bool:
    """True when the current task is being cancelled by a cancel scope or by its owner."""
    if anyio.current_effective_deadline() == -math.inf:
        return True
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def as_failure(error: BaseException) -> BaseException:
    """The failure to record for ``error`` raised by a handler, or ``error`` itself when it
    must propagate (streamq's own cancellation, KeyboardInterrupt)."""
    if isinstance(error, Exception | KeyboardInterrupt):
        return error
    if isinstance(error, anyio.get_cancelled_exc_class()) and cancelled_by_streamq():
        return error
    crash = HandlerCrashError(
        f"the handler raised {type(error).__name__}, which streamq did not ask for "
        "(treated as a failure)"
    )
    crash.__cause__ = error
    return crash


def reraise_unless_failure(error: BaseException) -> Exception:
    """``as_failure`` for an ``except BaseException`` clause: re-raise what must propagate,
    return the failure to record otherwise."""
    failure = as_failure(error)
    if failure is error and not isinstance(error, Exception):
        raise error
    assert isinstance(failure, Exception)
    return failure
