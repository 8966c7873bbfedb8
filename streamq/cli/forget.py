"""``streamq forget STREAM GROUP CONSUMER``: delete a consumer name gone for good from its
group on every partition and from ordered mode's membership (see
:mod:`streamq.topic.forget`). The name's claim is taken first: a live process holding it
refuses the command, and no queue opens under the name while it runs."""

from __future__ import annotations

import argparse

from ..consume.name_claim import NameClaim, held_by_live_processes
from ..errors import ConsumerNameTakenError, StreamNotFoundError
from ..queue import MessageQueue
from ..topic.forget import Refused, forget_consumer
from .outcome import CliError


def add_forget_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument("consumer")


async def forget_command(mq: MessageQueue, args: argparse.Namespace) -> str:
    """What to print; CliError when the consumer is live, owns pending entries, or is
    not in the group."""
    topic, group, consumer = args.stream, args.group, args.consumer
    info = await mq.topic_info()
    if not info.exists:
        raise StreamNotFoundError(f"stream {topic!r} does not exist")
    if group not in {g.name for g in info.groups}:
        raise CliError(f"consumer group {group!r} does not exist in {topic!r}")
    client = mq.client_for(topic)
    live = await held_by_live_processes(client, topic, group, [consumer])
    if consumer in live:
        raise CliError(_live(consumer, group, topic, live[consumer]))
    claim = NameClaim(topic, group)
    try:
        await claim.take(client, consumer)
    except ConsumerNameTakenError:  # a process took the name meanwhile
        raise CliError(_live(consumer, group, topic, "another process")) from None
    try:
        parts = [(s, mq.client_for(s)) for s in mq.streams]
        done = await forget_consumer(client, topic, parts, group, consumer)
    finally:
        await claim.release()
    if isinstance(done, Refused):
        raise CliError(done.reason)
    member = " and its ordered membership record" if done.member else ""
    return (
        f"forgot consumer {consumer!r} of group {group!r} on {topic!r}: its entry in "
        f"{done.partitions} partition{'' if done.partitions == 1 else 's'}{member}"
    )


def _live(consumer: str, group: str, topic: str, holder: str) -> str:
    return (
        f"consumer {consumer!r} of group {group!r} on {topic!r} is live ({holder} holds its "
        "name): stop it first"
    )
