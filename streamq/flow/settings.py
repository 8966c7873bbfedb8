"""The rate limits of a queue's types: given to the queue (``rate_limits={"email":
RateLimit(100)}``) or with a handler (``@mq.handler("email", rate=RateLimit(10))``),
checked when given (the queue's :class:`~streamq._registration.Registry` keeps both),
gathered into one :class:`FlowConfig` the consumer engine reads."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..errors import ConfigError, MessageFormatError
from ..message import validate_type_name

if TYPE_CHECKING:
    from .rate import RateLimit


@dataclass(frozen=True, slots=True)
class FlowConfig:
    """Message type -> its :class:`RateLimit`, for every limited type of a queue."""

    rate_limits: Mapping[str, RateLimit] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, rate_limits: Mapping[str, RateLimit]) -> FlowConfig:
        """A snapshot of ``rate_limits`` (later changes to it do not show)."""
        return cls(MappingProxyType(dict(rate_limits)))

    def limit_of(self, type_name: str) -> RateLimit | None:
        """The limit of ``type_name``, None when it has none."""
        return self.rate_limits.get(type_name)

    def check_consumer(self, handled: Collection[str], group: str | None) -> None:
        """Before a consumer starts: ConfigError if a limited type has no handler in
        ``handled`` (a limit nothing would obey is a mistake: a typo in the type's name,
        most often), or for limits on a fan-out queue (``group`` None)."""
        check_group(self.rate_limits, group)
        orphans = sorted(set(self.rate_limits) - set(handled))
        if orphans:
            raise ConfigError(
                f"rate limit on {', '.join(map(repr, orphans))} but no handler for "
                f"{'it' if len(orphans) == 1 else 'them'}: register a handler of that type "
                f"or remove the limit (handled types: {', '.join(sorted(handled)) or 'none'})"
            )


def check_group(rate_limits: Mapping[str, RateLimit], group: str | None) -> None:
    """ConfigError for rate limits on a fan-out queue: a limit is shared by the consumers
    of a group, and a fan-out reader has none."""
    if rate_limits and group is None:
        raise ConfigError(
            "rate limits need a consumer group: a fan-out queue (group=None) reads "
            f"without one, so {', '.join(map(repr, sorted(rate_limits)))} would be limited "
            "for nobody; give the queue a group, or remove the limits"
        )


def checked_rate(rate: object, where: str) -> RateLimit | None:
    """``rate`` if it is a RateLimit or None; ConfigError naming ``where`` otherwise."""
    if rate is None:
        return None
    # loaded on first use: a queue given no rate limit never loads RateLimit
    from .rate import RateLimit

    if isinstance(rate, RateLimit):
        return rate
    raise ConfigError(f"{where} must be a streamq.RateLimit or None, got {rate!r}")


def checked_rate_limits(rate_limits: object) -> dict[str, RateLimit]:
    """``MessageQueue(rate_limits=...)``: a mapping of message types to RateLimits (None:
    none), checked; ConfigError naming what is wrong."""
    if rate_limits is None:
        return {}
    if not isinstance(rate_limits, Mapping):
        raise ConfigError(
            "rate_limits must map message types to RateLimits "
            f'(rate_limits={{"email": RateLimit(100)}}), got {rate_limits!r}'
        )
    checked = {}
    for type_name, rate in rate_limits.items():
        try:
            validate_type_name(type_name)
        except MessageFormatError as e:
            raise ConfigError(f"rate_limits: {e}") from None
        limit = checked_rate(rate, f"rate_limits[{type_name!r}]")
        if limit is not None:
            checked[type_name] = limit
    return checked


def queue_rate_limits(rate_limits: object, group: str | None) -> dict[str, RateLimit]:
    """``MessageQueue(rate_limits=..., group=...)``'s limits, checked (ConfigError)."""
    limits = checked_rate_limits(rate_limits)
    check_group(limits, group)
    return limits


def add_rate(rates: dict[str, RateLimit], type_name: str, rate: RateLimit, where: str) -> None:
    """Add ``type_name``'s ``rate`` to ``rates``; ConfigError if it has another already
    (``where`` says where the new one comes from)."""
    known = rates.get(type_name)
    if known is not None and known != rate:
        raise ConfigError(
            f"type {type_name!r} has two rate limits, {known!r} and {rate!r} ({where}): give it one"
        )
    rates[type_name] = rate
