"""Handlers of three types that flow control holds back, each for its own reason: ``email``
over its rate limit (give the queue ``rate_limits=HELD_BACK_LIMITS``), ``report`` paused
(pause it), ``call`` throttled by its own handler (a 429 from the API it calls)."""

from __future__ import annotations

from streamq import Message, MessageQueue, RateLimit, Throttle

HELD_BACK_LIMITS = {"email": RateLimit(1, per=60)}  # one a minute: the first runs


def register_held_back_handlers(mq: MessageQueue, handled: list[str]) -> None:
    """Register the three handlers on ``mq``; each appends ``"<type>-<data>"`` to
    ``handled`` when it runs."""

    @mq.handler("email")
    async def email(msg: Message[int]) -> None:
        handled.append(f"email-{msg.data}")

    @mq.handler("report")
    async def report(msg: Message[int]) -> None:
        handled.append(f"report-{msg.data}")

    @mq.handler("call")
    async def call(msg: Message[int]) -> None:
        handled.append(f"call-{msg.data}")
        raise Throttle(retry_after=60)
