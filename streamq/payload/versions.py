"""Schema versions: the ``ver`` field, a handler's ``version=`` and ``upcast={...}``.

An entry without ``ver`` is version 1. A handler of version N takes entries of every
version from its oldest upcast's up to N: an entry of version k < N goes through
``upcast[k]``, ``upcast[k + 1]``, ... ``upcast[N - 1]`` (functions over the decoded JSON
of ``data``) before the model validates it. An entry of a version above N is newer than
this handler: it waits for a consumer that knows it, or is dead-lettered
(``on_newer_version``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import ConfigError
from .wire import StepFailed

Upcast = Callable[[Any], Any]
MAX_VERSION: Final = 2**31 - 1


def _is_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_VERSION


@dataclass(frozen=True, slots=True)
class Versions:
    """A type's schema version here and the upcasts from older ones (checked when built)."""

    version: int = 1
    upcast: Mapping[int, Upcast] = field(default_factory=dict)

    @classmethod
    def checked(cls, version: object, upcast: object, where: str) -> Versions:
        """``Versions(version, upcast)``, or ConfigError naming ``where`` (the handler or
        publisher) and the fix: a version that is not a positive int, an upcast that is
        not a mapping of versions below ``version`` to functions, or a gap between them."""
        if not _is_version(version):
            raise ConfigError(f"{where}: version must be an int >= 1, got {version!r}")
        assert isinstance(version, int)
        steps = dict(upcast or {}) if isinstance(upcast, Mapping | type(None)) else None
        if steps is None:
            raise ConfigError(f"{where}: upcast must be a dict {{version: function}}")
        for step, func in steps.items():
            if not _is_version(step) or step >= version:
                raise ConfigError(
                    f"{where}: upcast key {step!r} must be a version from 1 to {version - 1} "
                    f"(upcast[k] turns version k into k + 1)"
                )
            if not callable(func):
                raise ConfigError(f"{where}: upcast[{step}] must be a function, got {func!r}")
        if steps and sorted(steps) != list(range(min(steps), version)):
            missing = sorted(set(range(min(steps), version)) - set(steps))
            raise ConfigError(
                f"{where}: upcast has no step from version {missing[0]} to {missing[0] + 1}: "
                f"give upcast[k] for every k from {min(steps)} to {version - 1}"
            )
        return cls(version, steps)

    @property
    def oldest(self) -> int:
        """The oldest version this handler takes."""
        return min(self.upcast, default=self.version)

    def upcast_from(self, version: int, data: Any) -> Any:
        """``data`` of ``version`` brought to :attr:`version` step by step; StepFailed
        naming the step that raised."""
        if version < self.oldest:
            raise StepFailed(
                "ver",
                f"version {version} is older than the oldest this handler upcasts from "
                f"({self.oldest})",
            )
        for step in range(version, self.version):
            try:
                data = self.upcast[step](data)
            except Exception as e:
                raise StepFailed(f"upcast {step}->{step + 1}", f"{type(e).__name__}: {e}") from e
        return data


NO_VERSIONS: Final = Versions()


def entry_version(raw: bytes | None) -> int:
    """The ``ver`` field as an int (1 when absent); StepFailed unless it is a positive
    integer written in ASCII digits."""
    if raw is None:
        return 1
    if not raw.isdigit() or not raw.isascii() or raw.startswith(b"0") or len(raw) > 10:
        shown = raw[:40].decode("utf-8", "replace")
        raise StepFailed("ver", f"ver {shown!r} is not a positive integer")
    version = int(raw)
    if version > MAX_VERSION:
        raise StepFailed("ver", f"ver {version} is beyond {MAX_VERSION}")
    return version
