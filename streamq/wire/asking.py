"""Following ``ASK``: a command on a key of a slot being migrated.

While a slot migrates (``CLUSTER SETSLOT ... MIGRATING`` on its master, ``IMPORTING`` on the
target), the master still serves the keys it holds and answers ``ASK <slot> <host:port>``
for those already moved: the command was not run; it is to be sent once to that node,
preceded by ``ASKING`` on the same connection (which lets the target serve one command, or
one MULTI ... EXEC, of a slot that is not its own yet). The slot table does not change:
the slot stays the old master's until the migration ends, and ``MOVED`` says so then.

This module is the part without I/O, shared by the asyncio and the blocking paths
(:mod:`streamq.wire.following`, :mod:`streamq.wire.routing_sync`, :mod:`streamq.wire.resp`):
which replies are ASKs and where to, the hand-packed commands they concern, and scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis import exceptions as rx

from .slots import Address

ASKING = b"*1\r\n$6\r\nASKING\r\n"

Write = tuple[Any, bytes, list[int]]  # (a node's pool, what to write to it, positions)


def is_ask(reply: object) -> bool:
    """Whether ``reply`` is an ``ASK`` (redis-py's ``MovedError`` is an ``AskError`` too)."""
    return isinstance(reply, rx.AskError) and not isinstance(reply, rx.MovedError)


def asked_node(error: rx.AskError) -> Address:
    return str(error.host), int(error.port)


def asks_by_node(replies: Sequence[Any]) -> dict[Address, list[int]]:
    """The positions of the ASK replies among ``replies``, by the node each names."""
    asked: dict[Address, list[int]] = {}
    for position, reply in enumerate(replies):
        if is_ask(reply):
            asked.setdefault(asked_node(reply), []).append(position)
    return asked


def split_commands(packed: bytes) -> list[bytes]:
    """The commands of a hand-packed write (RESP arrays of bulk strings), one by one."""
    commands, at = [], 0
    while at < len(packed):
        start = at
        end = packed.index(b"\r\n", at)
        count, at = int(packed[at + 1 : end]), end + 2
        for _ in range(count):
            end = packed.index(b"\r\n", at)
            at = end + 2 + int(packed[at + 1 : end]) + 2
        commands.append(packed[start:at])
    return commands


def asking_each(commands: Sequence[bytes]) -> bytes:
    """``ASKING`` before each command (it admits one command): one write for all."""
    return b"".join(ASKING + command for command in commands)


def answers(replies: Sequence[Any]) -> list[Any]:
    """The commands' replies of an :func:`asking_each` write (without ASKING's ``OK``)."""
    return list(replies[1::2])


def asked_writes(pool: Any, packed: bytes, replies: Sequence[Any]) -> list[Write]:
    """For the hand-packed ``packed`` sent through ``pool`` (a routed pool: it has a
    ``router``) and its ``replies``: per node named by ASK replies, that node's pool, the
    commands to send it (each after ``ASKING``) and their positions among ``replies``."""
    router: Any = getattr(pool, "router", None)  # None: not a routed client (no cluster)
    asked = asks_by_node(replies) if router is not None else {}
    if not asked:
        return []
    commands = split_commands(packed)
    return [
        (router.pool_at(address), asking_each([commands[i] for i in positions]), positions)
        for address, positions in asked.items()
    ]


def put_answers(replies: list[Any], positions: Sequence[int], asked: Sequence[Any]) -> None:
    """The replies of an :func:`asking_each` write in place of the ASKs they answer."""
    for position, reply in zip(positions, answers(asked), strict=True):
        replies[position] = reply


def with_script(args: tuple[Any, ...], scripts: Mapping[str, Any]) -> tuple[Any, ...]:
    """``EVALSHA sha ...`` as ``EVAL <script> ...`` when the script is known: the node
    importing the slot may never have loaded it (it would answer NOSCRIPT)."""
    if str(args[0]).upper() != "EVALSHA" or len(args) < 2:
        return args
    script = scripts.get(args[1].decode() if isinstance(args[1], bytes) else str(args[1]))
    return args if script is None else ("EVAL", script, *args[2:])
