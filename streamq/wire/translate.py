"""redis-py's errors as streamq's: the one place where a server's error text is read.

Every client streamq makes (:mod:`streamq.wire.client`) raises streamq's errors only: its
commands (:class:`~streamq.wire.following.FollowingRedis`), pipelines and hand-packed
writes (:mod:`streamq.wire.resp`) pass what they raise through :func:`translate`, so no
loop above the wire sees a ``redis.exceptions`` class.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis import exceptions as rx

from ..errors import (
    AuthenticationFailedError,
    GroupExistsError,
    GroupNotFoundError,
    PermissionDeniedError,
    RedisFailure,
    ServerUnavailableError,
    StreamNotFoundError,
    UnknownCommandError,
    WrongTypeError,
)
from .timeouts import POOL_WAIT
from .urls import redact

# Error replies of a cluster that is changing: a slot moved (MOVED) or moving (ASK,
# TRYAGAIN), a failover under way (CLUSTERDOWN, MASTERDOWN). redis-py raises each as its
# own class (the text no longer starts with the code; MovedError is an AskError).
RECONFIGURING: tuple[type[rx.ResponseError], ...] = (
    rx.AskError, rx.TryAgainError, rx.ClusterDownError,
)  # fmt: skip

# Errors after which a retry on a fresh connection may succeed.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    rx.ConnectionError,
    rx.TimeoutError,
    ServerUnavailableError,
    ConnectionError,
    OSError,
)
# Replies a server sends while it is loading or failing over, or a cluster node sends for a
# slot it does not serve (yet): wait and retry, never "group deleted".
_TRANSIENT_REPLIES = (
    "LOADING", "BUSY ", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED ", "ASK ", "CLUSTERDOWN",
)  # fmt: skip

# A sentinel as redis-py's "No master found" names it: the repr of its client, pool and
# connection (two kilobytes), then " - " and the error it raised.
_SENTINEL_CLIENT = re.compile(
    r"<redis\.(?:asyncio\.)?client\.Redis\(.*?\bhost=([^,]+),port=(\d+),.*?\)>\)>\)> - "
)

# Commands whose third argument is a consumer group: ``XACK stream group ...``.
_GROUP_THIRD = frozenset({"XACK", "XACKDEL", "XCLAIM", "XAUTOCLAIM", "XPENDING", "XREADGROUP"})
# Sub-commands whose fourth argument is one: ``XGROUP CREATE stream group ...``.
_GROUP_FOURTH = frozenset({"XGROUP", "XINFO"})


def is_transient(error: BaseException) -> bool:
    if isinstance(error, rx.AuthenticationError | AuthenticationFailedError):
        return False
    if isinstance(error, TRANSIENT_ERRORS + RECONFIGURING):
        return True
    return isinstance(error, rx.ResponseError) and str(error).startswith(_TRANSIENT_REPLIES)


def is_loading(error: BaseException) -> bool:
    """Whether ``error`` (streamq's or redis-py's, or what it was raised from) is a server
    answering ``LOADING``: it is starting (reading its data), not down; wait for it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, rx.BusyLoadingError) or "loading the dataset" in str(current):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


@contextmanager
def translated(stream: str, group: str | None = None) -> Iterator[None]:
    """Translate redis-py errors raised in the block (``raise ... from e``); streamq's own
    errors (from an inner boundary) pass as they are. For code that talks to a server
    other than through streamq's clients (those translate by themselves)."""
    try:
        yield
    except RedisFailure:
        raise
    except (rx.RedisError, OSError) as e:
        raise translate(e, stream, group) from e


def translate_command(error: BaseException, stream: str, args: Sequence[Any]) -> RedisFailure:
    """:func:`translate` for an error of the command ``args`` on ``stream``'s client (a
    node's client: ``stream`` empty, the command's key named instead)."""
    return translate(error, stream or _key_of(args), group_of(args))


def translate(error: BaseException, stream: str, group: str | None = None) -> RedisFailure:
    """The streamq error for a redis-py error or an OSError (raise it ``from error``); also
    for an error reply read in place of a result (a pipeline, ``raise_errors=False``)."""
    if isinstance(error, RedisFailure):
        return error
    if isinstance(error, rx.ResponseError):
        return _reply_error(error, stream, group)
    if isinstance(error, rx.AuthenticationError):
        return AuthenticationFailedError(f"the server refused the credentials: {error}")
    text = redact(str(error))  # a client's error may name the URL it was given
    if isinstance(error, rx.ConnectionError | rx.TimeoutError | OSError):
        if "No connection available" in text:
            return ServerUnavailableError(
                f"no free connection in the client's pool after {POOL_WAIT:g}s ({text})"
            )
        return ServerUnavailableError(f"cannot reach the server: {_sentinels_named(text)}")
    return RedisFailure(text)


def _sentinels_named(text: str) -> str:
    """``text`` with each sentinel named by its address, when it is redis-py's "No master
    found" (which names them by the repr of their clients)."""
    if not text.startswith("No master found for "):
        return text
    text = _SENTINEL_CLIENT.sub(lambda found: f"sentinel {found[1]}:{found[2]}: ", text)
    service = text.removeprefix("No master found for ").replace(" : ", ": ", 1)
    return f"no master found for {service}"


def group_of(args: Sequence[Any]) -> str | None:
    """The consumer group a stream command names (``XREADGROUP GROUP g``, ``XACK s g``,
    ``XGROUP CREATE s g``), None for other commands."""
    words = _words(args)
    name = words[0].upper() if words else ""
    if name in _GROUP_THIRD and len(words) > 2:
        return words[2]
    if name in _GROUP_FOURTH and len(words) > 3:
        return words[3]
    return None


def _key_of(args: Sequence[Any]) -> str:
    return _text(args[1]) if len(args) > 1 else ""  # ("XGROUP CREATE", key, ...) too


def _words(args: Sequence[Any]) -> list[str]:
    """The command's words (redis-py sends ``"XGROUP CREATE"`` as one argument)."""
    if not args:
        return []
    return [*_text(args[0]).split(), *(_text(a) for a in args[1:4])]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _reply_error(error: rx.ResponseError, stream: str, group: str | None) -> RedisFailure:
    """An error reply as streamq's error: the one place where reply text is matched."""
    text = str(error)
    if text.startswith("NOGROUP"):
        named = "consumer group" if group is None else f"consumer group {group!r}"
        return GroupNotFoundError(f"{named} or stream {stream!r} does not exist ({text})")
    if text.startswith("BUSYGROUP"):
        return GroupExistsError(f"consumer group {group!r} of {stream!r} exists ({text})")
    if _no_stream(text):
        return StreamNotFoundError(f"stream {stream!r} does not exist ({text})")
    if text.lower().startswith("unknown command"):
        return UnknownCommandError(f"the server does not know the command ({text})")
    if text.startswith("WRONGTYPE"):
        return WrongTypeError(f"a key of {stream!r} holds another type ({text})")
    if text.startswith(("WRONGPASS", "NOAUTH")):
        return AuthenticationFailedError(f"the server refused the credentials: {text}")
    if isinstance(error, rx.NoPermissionError) or text.startswith("NOPERM"):
        return PermissionDeniedError(f"the Redis user may not do this on {stream!r}: {text}")
    if isinstance(error, RECONFIGURING):
        code = type(error).__name__.removesuffix("Error")
        return ServerUnavailableError(f"the cluster is reconfiguring ({code} {text})")
    if is_transient(error):
        return ServerUnavailableError(f"server not ready: {text}")
    return RedisFailure(text)


def _no_stream(text: str) -> bool:
    # Redis 7 wakes a blocked XREADGROUP with "UNBLOCKED the stream key no longer exists"
    # when the stream is deleted (Valkey answers NOGROUP on the next read); XGROUP SETID
    # on a missing key says that the subcommand "requires the key to exist".
    return (
        "no such key" in text.lower()
        or text.startswith("UNBLOCKED the stream key")
        or "requires the key to exist" in text
    )
