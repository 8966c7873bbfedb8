"""Names of streamq's auxiliary keys.

All live under ``streamq:{<stream>}:`` so that in Redis Cluster they hash to the stream's
own slot (the stream key hashes on its whole name, these on the braced part).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


def require_stream(name: str | None, owner: str) -> str:
    """``name`` checked as :func:`validate_stream_name` does; None (not given) is a
    ConfigError: a queue that silently used a made-up stream would share it by accident."""
    if name is None:
        raise ConfigError(
            f'{owner} needs a stream: {owner}(stream="orders", ...) names the stream '
            "(or partitioned topic) it publishes to and consumes from"
        )
    return validate_stream_name(name)


def validate_stream_name(name: object, argument: str = "stream") -> str:
    """Return ``name`` if it can name a stream; else raise ConfigError naming ``argument``.

    Braces are refused: a stream ``a{b}`` hashes on ``b`` in Redis Cluster while its
    auxiliary keys ``streamq:{a{b}}:...`` hash on ``a{b``, so they would live in another
    slot than the stream and the atomic steps (dead letters, stop/resume) would fail.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{argument} must be a non-empty string, got {name!r}")
    if "{" in name or "}" in name:
        raise ConfigError(
            f"{argument} {name!r} contains '{{' or '}}': streamq puts the stream name in its "
            "keys' cluster hash tag, so braces are not allowed; choose another name"
        )
    return name


@dataclass(frozen=True, slots=True)
class Keys:
    stream: str

    @property
    def prefix(self) -> str:
        return f"streamq:{{{self.stream}}}:"

    @property
    def dead_letters(self) -> str:
        return self.prefix + "dlq"

    @property
    def stopped(self) -> str:
        """Hash: stopped entry ID -> groups whose pending list it was taken from."""
        return self.prefix + "stopped"

    @property
    def control(self) -> str:
        """Pub/sub channel for stop/resume/terminate notices."""
        return self.prefix + "control"

    @property
    def unrouted(self) -> str:
        """Hash: ``<entry ID>:<group>`` -> deliveries to consumers of that group without a
        handler for the entry's type (see :mod:`streamq.consume.unrouted`)."""
        return self.prefix + "unrouted"

    @property
    def partitions(self) -> str:
        """Hash of a partitioned topic: ``count`` and ``names`` of its partition streams."""
        return self.prefix + "partitions"

    @property
    def halted(self) -> str:
        """Hash of ordered mode's halted keys (see :mod:`streamq.consume.halting`)."""
        return self.prefix + "halted"

    @property
    def cleanup_lock(self) -> str:
        return self.prefix + "cleanup-lock"

    @property
    def scheduled(self) -> str:
        """Sorted set: scheduled message ID -> due time (Unix ms); see
        :mod:`streamq.publish.scheduling`."""
        return self.prefix + "scheduled"

    @property
    def scheduled_payloads(self) -> str:
        """Hash: scheduled message ID -> the entry's fields (a JSON array)."""
        return self.prefix + "scheduled:payloads"

    @property
    def scheduled_wake(self) -> str:
        """Sharded pub/sub channel: a message was scheduled before the earliest one."""
        return self.prefix + "scheduled:wake"

    @property
    def periodic(self) -> str:
        """Hash: periodic publisher name -> the last tick it published (Unix ms); see
        :mod:`streamq.publish.periodic` (each tick's claim is a key of its own, expiring)."""
        return self.prefix + "periodic"

    def consumer_claim(self, group: str, consumer: str) -> str:
        """String: the claim of the live process consuming in ``group`` as ``consumer``
        (see :mod:`streamq.consume.name_claim`; it expires by itself). The group's length
        comes first, so that two pairs never share a key: group ``a:b`` with consumer ``c``
        is ``alive:3:a:b:c``, group ``a`` with consumer ``b:c`` is ``alive:1:a:b:c``."""
        return f"{self.prefix}alive:{len(group)}:{group}:{consumer}"

    def paused(self, group: str) -> str:
        """Hash: what flow control pauses in ``group``: field ``*`` (the whole group) or a
        message type -> when it was paused (Unix ms); see :mod:`streamq.flow.pause`. The
        group comes last, so no two groups share it."""
        return f"{self.prefix}paused:{group}"

    def waiting(self, group: str) -> str:
        """Hash: what the running consumers of ``group`` hold back for flow control, as
        each reported it: consumer name -> JSON ``{"at": <server ms>, "pause": n,
        "rate_limit": n, "throttle": n}``; see :mod:`streamq.flow.waiting`. It expires a
        while after the last report. The group comes last, so no two groups share it."""
        return f"{self.prefix}waiting:{group}"

    def replies(self, requester: str) -> str:
        """Stream: the replies to the requests of one requesting process (``requester``,
        random per MessageQueue) sent into this stream; it expires once unused (see
        :mod:`streamq.wire.replying`)."""
        return f"{self.prefix}reply:{requester}"

    @property
    def outbox(self) -> str:
        """Stream: the outputs of this stream's handlers bound for another slot of a cluster,
        written with their entry's ack and forwarded by the group's consumers (see
        :mod:`streamq.wire.outputs`)."""
        return self.prefix + "outbox"

    @property
    def forwarded(self) -> str:
        """Sorted set: the names of the outputs forwarded into this stream from an outbox
        -> when (Unix ms), kept for a day, so that each is added once."""
        return self.prefix + "forwarded"

    @property
    def flow_notices(self) -> str:
        """Sharded pub/sub channel: the group's pause record changed (a hint to read it)."""
        return self.prefix + "flow"

    def rate(
        self, group: str, type_name: str, *, per_key: bool = False, key: str | None = None
    ) -> str:
        """String: a rate limiter's state (its theoretical arrival time, expiring); see
        :mod:`streamq.flow.limiter`. Named as :meth:`throttle` is."""
        return self.prefix + "rate:" + _flow_suffix(group, type_name, per_key, key)

    def throttle(
        self, group: str, type_name: str, *, per_key: bool = False, key: str | None = None
    ) -> str:
        """String with an expiry: a throttled type (``per_key=False``) or key of a type;
        see :mod:`streamq.flow.throttle`. Group and type carry their lengths and a key its
        marker (``...:5:email`` the type, ``...:5:email:key:<key>`` a key, ``...:none``
        the entries without a key), so that no two of them share a name: group ``a:b``
        with type ``c`` is ``2:...``, not group ``a`` with type ``b:c``."""
        return self.prefix + "throttle:" + _flow_suffix(group, type_name, per_key, key)

    def throttled_keys_of(self, group: str, type_name: str) -> str:
        """String with an expiry: some key of ``type_name`` is throttled in ``group`` (as
        long as the longest of them), so that every consumer learns that the type has
        throttled keys to look up (``...:<type>:any``: no key record ends so)."""
        return self.prefix + "throttle:" + _flow_suffix(group, type_name, False, None) + ":any"

    def own_keys(self) -> list[str]:
        """streamq's keys for this stream except the dead letters."""
        return [
            self.stopped, self.unrouted, self.cleanup_lock, self.partitions,
            self.scheduled, self.scheduled_payloads, self.periodic, self.halted,
            self.outbox, self.forwarded,
        ]  # fmt: skip


def _flow_suffix(group: str, type_name: str, per_key: bool, key: str | None) -> str:
    """``<len>:<group>:<len>:<type>``, then ``:key:<key>`` or ``:none`` (no key) when the
    record is per key."""
    name = f"{len(group)}:{group}:{len(type_name)}:{type_name}"
    if not per_key:
        return name
    return name + (":none" if key is None else ":key:" + key)
