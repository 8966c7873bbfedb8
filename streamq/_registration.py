"""Registering handlers on a queue: the ``@mq.handler`` and ``@mq.batch_handler``
decorators and ``mq.register(obj)``, over the queue's :class:`~streamq.consume.router.Router`.

Annotations are resolved with the local names of the frame that registers the handler
(a model defined inside a test or a factory function), or ``model=`` is given outright.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from .config import Duration, seconds
from .consume.router import UNSET, BatchSettings, Router

F = TypeVar("F", bound=Callable[..., Any])


class HandlerRegistry:
    """The registration methods of a queue whose routes live in ``router``."""

    router: Router

    def handler(self, message_type: str, *, model: Any = UNSET) -> Callable[[F], F]:
        """Decorator: handle entries of ``message_type`` one by one.

        ``model``: what ``data`` is validated into; by default the handler's annotation
        ``Message[Model]``, resolved with the registering frame's local names too.
        """

        def register(func: F) -> F:
            namespace = sys._getframe(1).f_locals
            self.router.add_single(message_type, func, model=model, namespace=namespace)
            return func

        return register

    def batch_handler(
        self,
        message_type: str,
        size: int | None = None,
        timeout: Duration | None = None,
        max_wait: Duration | None = None,
        *,
        model: Any = UNSET,
    ) -> Callable[[F], F]:
        """Decorator: handle entries of ``message_type`` in lists (see BatchConfig);
        ``model`` as for :meth:`handler`."""
        settings = BatchSettings(
            size=size,
            timeout=None if timeout is None else seconds(timeout, "timeout", allow_zero=False),
            max_wait=None if max_wait is None else seconds(max_wait, "max_wait"),
        )

        def register(func: F) -> F:
            namespace = sys._getframe(1).f_locals
            self.router.add_batch(message_type, func, settings, model=model, namespace=namespace)
            return func

        return register

    def register(self, handler: object) -> None:
        """Register a handler object (``message_type`` + ``handle``/``handle_batch``)."""
        self.router.add_object(handler, namespace=sys._getframe(1).f_locals)
