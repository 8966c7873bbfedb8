"""Email messages, handled in decorator form."""

from __future__ import annotations

import logging

from pydantic import BaseModel, Field

from streamq import Message, MessageQueue

log = logging.getLogger(__name__)


class Email(BaseModel):
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    subject: str
    body: str = ""


def install(mq: MessageQueue, outbox: list[Email]) -> None:
    """Register the email handler on ``mq``; sent emails are appended to ``outbox``."""

    @mq.handler("email")
    async def send_email(msg: Message[Email]) -> None:
        outbox.append(msg.data)
        print(f"  email  {msg.id}  to={msg.data.to:<24} subject={msg.data.subject!r}")


__all__ = ["Email", "install"]
