"""Decorators written without their parentheses: ``@mq.handler`` or ``@mq.periodic`` alone
above a function makes Python pass the function as the message type, and the decorator
would register nothing, silently. Refused at once, saying what to write."""

from __future__ import annotations

from .errors import HandlerError


def refuse_bare(owner: str, decorator: str, message_type: object, arguments: str) -> None:
    """Raise HandlerError if ``message_type`` is a function: ``@<owner>.<decorator>`` was
    written alone (``owner``: ``mq`` or ``router``); ``arguments`` is what to write between
    the parentheses."""
    if not callable(message_type):
        return
    name = getattr(message_type, "__name__", "the function")
    raise HandlerError(
        f"@{owner}.{decorator} takes the message type: write "
        f"@{owner}.{decorator}({arguments}) above {name}, not @{owner}.{decorator} alone"
    )
