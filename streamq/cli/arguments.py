"""The argparse pieces every ``streamq`` command shares: a parser whose usage errors are
one line (exit 2) and that takes no abbreviated option (``--worker 2`` is not ``--workers
2``), and the types of its numbers (counts, ports, durations), each refusing what makes no
sense with a usage error naming the option."""

from __future__ import annotations

import argparse
import math
import typing
from collections.abc import Callable
from typing import Any

from ..message import TYPE_PATTERN
from ..payload.keyring import KEYRING_SHAPE, Keyring
from .outcome import EXIT_USAGE
from .render import one_line

HIGHEST_PORT = 65535


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (exit 2), pointing at ``--help``, and no
    abbreviations of long options (a prefix would silently pick another option)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def add_keyring_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--keyring-env VAR``: the name of an environment variable holding the keyring, so
    that keys never show in ``ps`` or a shell's history."""
    parser.add_argument(
        "--keyring-env", metavar="VAR",
        help=f"{what}: the keyring is read from the environment variable VAR, as JSON "
        f"{KEYRING_SHAPE.replace('%', '%%')} (never give keys on the command line)",
    )  # fmt: skip


def keyring_of(args: argparse.Namespace) -> Keyring | None:
    """The keyring ``--keyring-env`` names (None without the option); ConfigError, naming
    the variable and never its value, when it holds none."""
    variable: str | None = getattr(args, "keyring_env", None)
    return None if variable is None else Keyring.from_env(variable)


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (else a usage error)."""

    def parse(text: str) -> int:
        value = _whole(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: the system picks a free one)."""
    value = _whole(text)
    if not 0 <= value <= HIGHEST_PORT:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to {HIGHEST_PORT}, got {value}")
    return value


def duration(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more (finite)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 seconds or more, got {text}")
    return value


def message_type(text: str) -> str:
    """An argparse type: a message type's name (1 to 128 of ``A-Z a-z 0-9 _ . : -``)."""
    if not TYPE_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"a message type is 1 to 128 of the characters A-Z a-z 0-9 _ . : -, got {text!r}"
        )
    return text


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
