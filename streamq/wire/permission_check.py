"""The check of streamq's Redis permissions when a queue opens.

:func:`check_permissions` asks the server (``ACL DRYRUN``, Redis >= 7.0, Valkey >= 7.2)
whether the connected user may send each command of
:data:`~streamq.wire.permissions.PERMISSIONS` that the queue will send, in one round trip,
and raises :class:`~streamq.errors.ConfigError` naming every missing one and the fix. A
NOPERM at run time would otherwise only surface as a warning from a background loop (lease
renewal, the cleanup lock).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rx

from ..errors import AuthenticationFailedError, ConfigError, RedisFailure
from .permissions import Permission, Use, names_for, required, selectors
from .replies import text
from .translate import translated

# the records keep the permissions' logger name: filters set on it go on working
log = logging.getLogger("streamq.wire.permissions")


async def check_permissions(
    client: aioredis.Redis,
    stream: str,
    *,
    consuming: bool = True,
    cleanup: bool = True,
    partitioned: bool = False,
    ordered: bool = False,
) -> None:
    """Raise ConfigError if the connected user may not send what streamq will send.

    One round trip: ``ACL WHOAMI`` and an ``ACL DRYRUN`` of each command with the real key
    and channel names. ``consuming=False``: only what opening and publishing need;
    ``cleanup`` (with ``consuming``): cleanup passes too. Best effort: a user that may
    not run ``ACL DRYRUN``, or a server without it, is not checked (logged at DEBUG).
    ``ordered``: what ordered mode sends too (leases, membership, halted keys).

    Raises:
        ConfigError: naming each missing permission (command, keys or channel, why) and
            the ``ACL SETUSER`` line that grants them.
    """
    uses: list[Use] = ["open", "partition"] if partitioned else ["open"]
    if consuming:
        uses += ["consume", "cleanup"] if cleanup else ["consume"]
        uses += ["ordered"] if ordered else []
    wanted = _distinct(required(uses), names_for(stream))
    try:
        with translated(stream):
            user, replies = await _dry_run(client, wanted, names_for(stream))
    except RedisFailure as e:
        if not isinstance(e.__cause__, rx.ResponseError) or isinstance(
            e, AuthenticationFailedError
        ):
            raise  # unreachable server, refused credentials: the caller's to handle
        log.debug("permissions for %r not checked (no ACL DRYRUN here): %s", stream, e)
        return
    missing = [(p, text(r)) for p, r in zip(wanted, replies, strict=True) if _denied(p, r)]
    if missing:
        raise ConfigError(_message(user, stream, missing))


def _distinct(permissions: Sequence[Permission], names: Mapping[str, str]) -> list[Permission]:
    """One permission per command as sent (several uses share one, e.g. XACK)."""
    seen: dict[tuple[str, ...], Permission] = {}
    for p in permissions:
        seen.setdefault(p.bind(names), p)
    return list(seen.values())


async def _dry_run(
    client: aioredis.Redis, wanted: Sequence[Permission], names: Mapping[str, str]
) -> tuple[str, list[Any]]:
    """(user, one DRYRUN reply per permission); raises ResponseError if the probe failed."""
    guess = client.connection_pool.connection_kwargs.get("username") or "default"
    whoami, *replies = await _pipeline(
        client, [("ACL", "WHOAMI"), *_dry_runs(guess, wanted, names)]
    )
    if isinstance(whoami, Exception):
        raise whoami
    user = text(whoami)
    if user != guess:  # authenticated some other way (a credential provider): ask again
        replies = await _pipeline(client, _dry_runs(user, wanted, names))
    for reply in replies:
        if isinstance(reply, rx.ResponseError) and not _lacks_command(reply):
            raise reply  # refused (NOPERM), or no ACL DRYRUN on this server
    return user, replies


def _dry_runs(
    user: str, wanted: Sequence[Permission], names: Mapping[str, str]
) -> list[tuple[str, ...]]:
    return [("ACL", "DRYRUN", user, *p.bind(names)) for p in wanted]


async def _pipeline(client: aioredis.Redis, commands: Sequence[tuple[str, ...]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for args in commands:
        pipe.execute_command(*args)
    return await pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]


def _lacks_command(reply: rx.ResponseError) -> bool:
    """DRYRUN's "Command 'XDELEX' not found": the server lacks it, so streamq won't send it."""
    message = str(reply)
    return message.startswith("Command '") and message.endswith("' not found")


def _denied(permission: Permission, reply: Any) -> bool:
    if isinstance(reply, rx.ResponseError):  # the server lacks the command
        log.debug("%s not checked: %s", permission.command, reply)
        return False
    return text(reply) != "OK"


def _message(user: str, stream: str, missing: Sequence[tuple[Permission, str]]) -> str:
    names = names_for(stream)
    lines = [f"the Redis user {user!r} may not send what streamq needs for stream {stream!r}:"]
    for p, reason in missing:
        on = ", ".join(repr(t) for t in p.targets(names))
        lines.append(f"  - {p.command}{' on ' + on if on else ''} ({p.why}): {reason}")
    grants = sorted({f"+{p.command}" for p, _ in missing})
    fix = " ".join(["ACL SETUSER", user, *selectors(stream), *grants])
    lines.append(f"fix (docs, operating/security.md): {fix}")
    return "\n".join(lines)
