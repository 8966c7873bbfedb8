"""redis-py clients bound to a slot that follow the cluster's redirections.

A ``MOVED`` reply (the slot has a new master; the slot table was corrected when the reply
arrived) is followed once by a plain command; pipelines and scripts are retried by their
callers. An ``ASK`` reply (the slot is being migrated and the key is on the target
already, :mod:`streamq.wire.asking`) is followed by commands, pipelines and transactions
alike: the commands it concerns are sent once more, to the node it names, each after
``ASKING`` (a transaction once, after one ``ASKING``), with redis-py's reply callbacks.

What a command or a pipeline raises leaves as streamq's error (:mod:`.translate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.client import Pipeline

from ..errors import ConfigError
from .asking import answers, asked_node, asks_by_node, is_ask, with_script
from .reading import read_reply
from .slots import Address
from .translate import translate, translate_command

Command = tuple[tuple[Any, ...], dict[str, Any]]  # (args, options), as a pipeline stacks them


class FollowingRedis(aioredis.Redis):  # type: ignore[misc]
    """A client of a :class:`~streamq.wire.routing.SlotPool` (or ``NodePool``)."""

    stream = ""  # the key whose slot it serves, named in errors ("": a node's client)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            try:
                return await self._asking_when_told(args, options)
            except rx.MovedError as e:  # not run; the slot table is corrected: once more
                self._refuse_another_slot(e, args)
                return await self._asking_when_told(args, options)
        except rx.NoScriptError:
            raise  # redis-py's Script loads the script when told so
        except (rx.RedisError, OSError) as e:
            raise translate_command(e, self.stream, args) from e

    def _refuse_another_slot(self, moved: rx.MovedError, args: tuple[Any, ...]) -> None:
        """ConfigError if the command's key is of another slot than the one this client
        serves: its master would answer MOVED every time, which is no reconfiguring."""
        slot = getattr(self.connection_pool, "slot", -1)  # -1: a node's client
        if slot >= 0 and moved.slot_id != slot:
            script = str(args[0]).upper().startswith(("EVAL", "FCALL")) and len(args) > 3
            key = args[3] if script else args[1] if len(args) > 1 else "?"  # (after numkeys)
            key = key.decode(errors="replace") if isinstance(key, bytes) else key
            raise ConfigError(
                f"{key!r} is on slot {moved.slot_id}, this client serves slot {slot} (the keys "
                f"of {self.stream!r}): use a client for {key!r} (Deployment.client_for)"
            )

    async def _asking_when_told(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        try:
            return await super().execute_command(*args, **options)
        except rx.AskError as e:
            if not is_ask(e):
                raise
            (reply,) = await run_asked(self, asked_node(e), [(args, options)])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = FollowingPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.stream = self.stream
        return pipe

    def register_script(self, script: Any) -> Any:
        """A script object, its text remembered for nodes that never loaded it."""
        registered = super().register_script(script)
        self.connection_pool.router.state.scripts[registered.sha] = registered.script
        return registered


class FollowingPipeline(Pipeline):  # type: ignore[misc]
    """A pipeline (or a transaction) whose commands answered ASK go to the node named.

    Error replies read in place of results (``raise_on_error=False``) stay redis-py's
    exception objects: :func:`~streamq.wire.translate.translate` makes them streamq's."""

    stream = ""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack: list[Command] = list(self.command_stack)
        try:
            replies = await self._replies(stack)
        except (rx.RedisError, OSError) as e:
            raise translate(e, self.stream) from e
        if raise_on_error:
            for (args, _), reply in zip(stack, replies, strict=True):
                if isinstance(reply, Exception):
                    raise translate_command(reply, self.stream, args) from reply
        return replies

    async def _replies(self, stack: list[Command]) -> list[Any]:
        """One reply per command, error replies in place."""
        if self.is_transaction or self.explicit_transaction:
            try:
                return await super().execute(raise_on_error=False)  # type: ignore[no-any-return]
            except rx.AskError as e:  # the commands were not queued: EXEC aborted
                if not is_ask(e):
                    raise
                return await run_asked_transaction(self, asked_node(e), stack)
        replies: list[Any] = await super().execute(raise_on_error=False)
        for address, positions in asks_by_node(replies).items():
            asked = await run_asked(self, address, [stack[i] for i in positions])
            for position, reply in zip(positions, asked, strict=True):
                replies[position] = reply
        return replies


async def run_asked(
    client: aioredis.Redis, address: Address, commands: Sequence[Command]
) -> list[Any]:
    """Run ``commands`` at ``address``, each after ``ASKING``, in one round trip; their
    replies (error replies as exception objects)."""
    router = client.connection_pool.router
    pipe = Pipeline(router.pool_at(address), client.response_callbacks, False, None)
    for args, options in commands:
        pipe.execute_command("ASKING")
        pipe.execute_command(*with_script(args, router.state.scripts), **options)
    return answers(await pipe.execute(raise_on_error=False))


async def run_asked_transaction(
    client: aioredis.Redis, address: Address, commands: list[Command]
) -> list[Any]:
    """Run a transaction at ``address`` after one ``ASKING`` (it holds until EXEC)."""
    router = client.connection_pool.router
    pool = router.pool_at(address)
    connection = await pool.get_connection()
    try:
        await connection.send_command("ASKING")
        await read_reply(connection)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await connection.disconnect()
            await pool.release(connection)
        raise
    again = Pipeline(pool, client.response_callbacks, True, None)
    again.connection = connection  # the pipeline gives it back when done
    again.command_stack = [(with_script(args, router.state.scripts), o) for args, o in commands]
    return await again.execute(raise_on_error=False)  # type: ignore[no-any-return]
