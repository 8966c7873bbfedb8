"""Task-local facts shared by the consumer's modules."""

from __future__ import annotations

from contextvars import ContextVar

# True inside a consumer's worker and batch tasks: stop() called from a handler must not
# wait for the drain that includes that very handler.
inside_handler: ContextVar[bool] = ContextVar("streamq_inside_handler", default=False)
