"""Configuration objects. Each validates itself when built and raises ConfigError.

Durations are given in seconds (an ``int`` or ``float``) or as a ``timedelta``, and are
stored as ``float`` seconds, normalised once here. Counts are ``int``. Strings and bools
are refused everywhere alike (``grace="10"`` as much as ``concurrency="3"``): a setting
read from the environment is converted by the caller, who knows its unit.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Literal, TypeVar

from ._ids import StreamId
from .errors import ConfigError, InvalidMessageIdError

ENV_URL = "STREAMQ_REDIS_URL"

Duration = float | timedelta
C = TypeVar("C")


def seconds(value: Duration, name: str, *, allow_zero: bool = True) -> float:
    """Normalise a duration to float seconds, raising ConfigError naming ``name``."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = float(value)
    else:
        raise ConfigError(
            f"{name} must be a number of seconds or a timedelta, got {value!r}"
            + (" (a string: convert it first, e.g. float(...))" if isinstance(value, str) else "")
        )
    if result != result or result == float("inf"):  # NaN, inf
        raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
    if result < 0 or (result == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be {bound} seconds, got {value!r}")
    return result


def positive(value: int, name: str, *, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_counts(config: object, *names: str, prefix: str = "", minimum: int = 1) -> None:
    """Check that the fields ``names`` of ``config`` are integers >= ``minimum``
    (ConfigError naming ``prefix + name``)."""
    for name in names:
        positive(getattr(config, name), prefix + name, minimum=minimum)


def _set_seconds(
    config: object, *names: str, prefix: str = "", allow_zero: bool = True, optional: bool = False
) -> None:
    """Normalise the duration fields ``names`` of a frozen ``config`` to float seconds
    (ConfigError naming ``prefix + name``); with ``optional`` a None stays None."""
    for name in names:
        value = getattr(config, name)
        if not (optional and value is None):
            label = prefix + name
            object.__setattr__(config, name, seconds(value, label, allow_zero=allow_zero))


def _named_fields(cls: type[C]) -> type[C]:
    """A misspelt field of ``cls`` is a ConfigError naming the closest valid one (the
    dataclass's own TypeError names only the wrong one). The check runs when a setting is
    built, never per message."""
    init = cls.__init__
    valid = tuple(field.name for field in dataclasses.fields(cls))  # type: ignore[arg-type]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for name in kwargs:
            if name not in valid:
                raise ConfigError(_unknown_field(cls.__name__, name, valid))
        init(self, *args, **kwargs)

    __init__.__doc__ = init.__doc__
    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def _unknown_field(owner: str, name: str, valid: tuple[str, ...]) -> str:
    import difflib  # only for this message: not loaded by every consumer

    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {owner} argument {name!r}{hint}. Valid: {', '.join(valid)}"


def refuse_unknown(unknown: Mapping[str, Any], where: str, function: Callable[..., Any]) -> None:
    """A misspelt keyword given to ``function`` (collected in its ``**unknown``) is a
    ConfigError naming the closest of its parameters, read from its signature."""
    if not unknown:
        return
    import inspect  # only for this message: not loaded by every consumer

    skipped = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    parameters = inspect.signature(function).parameters.values()
    valid = tuple(p.name for p in parameters if p.kind not in skipped and p.name != "self")
    raise ConfigError(_unknown_field(where, next(iter(unknown)), valid))


def env_url() -> str | None:
    """``$STREAMQ_REDIS_URL`` if set and not empty."""
    return os.environ.get(ENV_URL) or None


@dataclass(frozen=True, slots=True)
class StartFrom:
    """Where a new consumer group starts: ``LATEST``, ``EARLIEST`` or ``StartFrom.at(id)``."""

    position: str
    LATEST: ClassVar[StartFrom]
    EARLIEST: ClassVar[StartFrom]

    @classmethod
    def at(cls, entry_id: str) -> StartFrom:
        """Start after ``entry_id`` (the group's last-delivered ID is set to it)."""
        try:
            return cls(str(StreamId.parse(entry_id)))
        except InvalidMessageIdError as e:
            raise ConfigError(f"StartFrom.at: {e}") from e


StartFrom.LATEST = StartFrom("$")
StartFrom.EARLIEST = StartFrom("0")

# What ordered mode does with an entry past ``max_deliveries``: dead-letter it and let its
# key go on, or halt its key until an operator releases it (``MessageQueue(on_poison=)``).
OnPoison = Literal["dead_letter", "halt"]


@_named_fields
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """In-process retries of a failing handler, then redelivery up to ``max_deliveries``.

    ``attempts``: handler calls per delivery (1 = no in-process retry).
    ``backoff``/``max_backoff``: exponential wait between in-process attempts, with jitter.
    ``max_deliveries``: deliveries (Redis's counter, so crashes count) before dead-lettering.
    ``unknown_type_deliveries``: deliveries of an entry whose type no consumer that got it
    could handle, before it is dead-lettered. Larger than ``max_deliveries`` because such an
    entry reaches the consumer that has the handler only by chance (claiming is blind).
    """

    attempts: int = 3
    backoff: float = 0.05
    max_backoff: float = 2.0
    jitter: float = 0.05
    max_deliveries: int = 5
    unknown_type_deliveries: int = 20

    def __post_init__(self) -> None:
        prefix = "RetryPolicy."
        _check_counts(self, "attempts", "max_deliveries", "unknown_type_deliveries", prefix=prefix)
        _set_seconds(self, "backoff", "max_backoff", "jitter", prefix=prefix)


@_named_fields
@dataclass(frozen=True, slots=True)
class BatchConfig:
    """Default batching for batch handlers that do not set their own.

    A batch is flushed at ``size`` entries, ``timeout`` after its first entry, and no entry
    waits more than ``max_wait`` in total since it was read (even behind a running batch).
    ``bisect``: a batch that fails as a whole again when redelivered is split in halves,
    recursively, so a poison entry is isolated and the rest succeed.
    """

    size: int = 100
    timeout: float = 0.5
    max_wait: float = 5.0
    bisect: bool = True

    def __post_init__(self) -> None:
        prefix = "BatchConfig."
        _check_counts(self, "size", prefix=prefix)
        _set_seconds(self, "timeout", prefix=prefix, allow_zero=False)
        _set_seconds(self, "max_wait", prefix=prefix)
        if not isinstance(self.bisect, bool):
            raise ConfigError(f"BatchConfig.bisect must be True or False, got {self.bisect!r}")
        if self.max_wait < self.timeout:
            raise ConfigError(
                f"BatchConfig.max_wait ({self.max_wait}) must be >= timeout ({self.timeout})"
            )


@_named_fields
@dataclass(frozen=True, slots=True)
class CleanupPolicy:
    """Periodic removal of entries that every group has acknowledged (MESSAGE_CLEANUP.md).

    ``beyond_pending``: also remove acknowledged entries above a group's oldest pending
    entry (the pending ones stay), so one long-pending entry does not pin all after it.
    """

    enabled: bool = False
    interval: float = 30.0
    max_stream_length: int = 10_000
    min_retention: float = 60.0
    batch_size: int = 1_000
    dead_letter_retention: float | None = None
    beyond_pending: bool = False

    def __post_init__(self) -> None:
        prefix = "CleanupPolicy."
        _set_seconds(self, "interval", prefix=prefix, allow_zero=False)
        _set_seconds(self, "min_retention", prefix=prefix)
        _check_counts(self, "max_stream_length", prefix=prefix, minimum=0)
        _check_counts(self, "batch_size", prefix=prefix)
        _set_seconds(self, "dead_letter_retention", prefix=prefix, optional=True)


# The longest ordered-mode lease: a member's or lease's expiry further ahead of the
# server's clock than this was not written by streamq (streamq.wire.records).
MAX_OWNERSHIP_LEASE = 3600.0
# Flow control's longest period of a rate limit (a daily quota) and longest throttle: a
# limiter's or a throttle's expiry further ahead than this was not written by streamq.
MAX_RATE_PERIOD = 86_400.0
MAX_THROTTLE = 86_400.0


@_named_fields
@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """How the read loop behaves. Defaults suit most services.

    ``concurrency``: handlers running at once. ``max_in_flight``: entries fetched but not
    finished (bounded so fetched entries do not age in the PEL); in ordered mode, those
    that can run: a waiting key holds none, a key at most a quarter of it (at most
    ``read_count``), the rest of its entries wait in the pending list. ``block``: how long
    a read waits for new entries; a read without a group (a fan-out subscriber's, an
    ordered partition's wait) waits at most 1 s, since deleting its stream does not end it.
    ``ownership_lease``: in ordered mode, how long a partition's lease and a member's
    heartbeat last (a dead member's partitions move within about this time; at most an
    hour). ``claim_idle``: pending entries idle this long are taken over; leases of running
    handlers are renewed well before that. ``grace``: how long ``stop()`` waits for running
    handlers. ``max_per_key``: in shared and fan-out mode, at most this many entries of one
    publish key run at once, and the keys of waiting entries take turns for the handler
    slots (None: entries run in the order they were read). Durations in seconds (a
    ``timedelta`` is accepted too and normalised).
    """

    concurrency: int = 32
    max_in_flight: int = 256
    read_count: int = 128
    block: float = 1.0
    claim_idle: float = 30.0
    claim_interval: float = 5.0
    claim_count: int = 100
    grace: float = 10.0
    handler_timeout: float | None = None
    dead_consumer_idle: float = 3600.0
    stopped_resync: float = 30.0
    ownership_lease: float = 10.0
    max_per_key: int | None = None

    def __post_init__(self) -> None:
        _check_counts(self, "concurrency", "max_in_flight", "read_count", "claim_count")
        if self.max_per_key is not None:
            _check_counts(self, "max_per_key")
        _set_seconds(
            self, "block", "claim_idle", "claim_interval", "stopped_resync", "ownership_lease",
            allow_zero=False,
        )  # fmt: skip
        _set_seconds(self, "grace", "dead_consumer_idle")
        _set_seconds(self, "handler_timeout", allow_zero=False, optional=True)
        if self.ownership_lease > MAX_OWNERSHIP_LEASE:
            raise ConfigError(
                f"ownership_lease ({self.ownership_lease:g}s) must be at most "
                f"{MAX_OWNERSHIP_LEASE:g}s: a lease or heartbeat further ahead is taken for damaged"
            )
        if self.max_in_flight < self.concurrency:
            raise ConfigError(
                f"max_in_flight ({self.max_in_flight}) must be >= concurrency "
                f"({self.concurrency}); raise max_in_flight or lower concurrency"
            )


def consumer_config(
    base: ConsumerConfig | None,
    overrides: Mapping[str, Any],
    unknown: Mapping[str, Any],
    owner: type,
) -> ConsumerConfig:
    """``base`` (or the defaults) with the settings given as keyword arguments; an unknown
    name is a ConfigError that names the closest of the arguments of ``owner`` (the class
    given them)."""
    if unknown:
        raise ConfigError(_unknown_message(next(iter(unknown)), owner))
    given = {name: value for name, value in overrides.items() if value is not None}
    return dataclasses.replace(base or ConsumerConfig(), **given)


def _unknown_message(name: str, owner: type) -> str:
    import inspect  # only for this message: not loaded by every consumer

    kind = owner.__name__
    for policy, argument in ((RetryPolicy, "retry"), (BatchConfig, "batch"),
                             (CleanupPolicy, "cleanup")):  # fmt: skip
        if name in {f.name for f in dataclasses.fields(policy)}:  # a policy's field
            return (f"unknown {kind} argument {name!r}: it is a field of {policy.__name__}, "
                    f"given as {argument}={policy.__name__}({name}=...)")  # fmt: skip
    # read from the signature, so that the list cannot miss an argument added later
    parameters = inspect.signature(owner).parameters.values()
    valid = tuple(p.name for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD)
    return _unknown_field(kind, name, valid)
