"""The checks of MessageQueue's identity arguments, when the queue is built."""

from __future__ import annotations

from .config import StartFrom
from .errors import ConfigError


def check_identity(group: object, consumer: object, cluster: object, start: object) -> None:
    """ConfigError naming the argument for a group, consumer, cluster or start that cannot
    be (a group of None is a fan-out queue)."""
    if group is not None and (not isinstance(group, str) or not group):
        raise ConfigError(f"group must be a non-empty string or None, got {group!r}")
    if consumer is not None and not consumer:
        raise ConfigError("consumer must be a non-empty string or None")
    if cluster not in (None, True, False):
        raise ConfigError(f"cluster must be None, True or False, got {cluster!r}")
    if not isinstance(start, StartFrom):
        raise ConfigError(f"start must be a StartFrom, got {start!r}")
