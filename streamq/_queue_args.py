"""The checks of MessageQueue's identity and ordered-mode arguments, when the queue is built."""

from __future__ import annotations

import os
import socket

from .config import OnPoison, StartFrom
from .errors import ConfigError
from .wire.partition_names import validate_priorities


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
        raise ConfigError(
            "start must be StartFrom.LATEST, StartFrom.EARLIEST or StartFrom.at(entry_id), "
            f"got {start!r}"
        )


def check_ordered(
    ordered: object, on_poison: object, group: object = "group", max_per_key: object = None
) -> tuple[bool, OnPoison]:
    """The ordered-mode settings of a queue, or ConfigError naming the valid choices (and
    for ordered mode without a consumer group: a fan-out queue has no owners; or with
    ``max_per_key``: one entry of a key runs at a time there already; for
    ``on_poison="halt"`` without ordered mode: only a key of ordered mode halts)."""
    if ordered not in (True, False):
        raise ConfigError(f"ordered must be True or False, got {ordered!r}")
    if on_poison not in ("dead_letter", "halt"):
        raise ConfigError(f"on_poison must be 'dead_letter' or 'halt', got {on_poison!r}")
    if ordered and group is None:
        raise ConfigError("ordered=True needs a consumer group: a fan-out queue has no owners")
    if on_poison == "halt" and not ordered:
        raise ConfigError(
            "on_poison='halt' halts a key in ordered mode: add ordered=True (without it a "
            "poison entry is dead-lettered)"
        )
    if ordered and max_per_key is not None:
        raise ConfigError(
            "max_per_key caps the entries of one key running at once in shared mode; "
            "ordered=True runs one entry of a key at a time already: remove max_per_key"
        )
    return bool(ordered), on_poison


def check_priorities(priorities: object, ordered: bool) -> int:
    """The number of priority levels of a queue, or ConfigError naming the conflict with
    ``ordered=True`` (an entry of a key could not wait behind an earlier one of the key and
    go before the lower levels' entries at once)."""
    levels = validate_priorities(priorities)
    if levels > 1 and ordered:
        raise ConfigError(
            f"priorities={levels} with ordered=True: order per key and priority across "
            "levels contradict (a high entry of a key would overtake its earlier low "
            "ones); use one of them"
        )
    return levels


def default_consumer_name() -> str:
    """A consumer's name when none is given: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"
