"""How a command ends: its exit code and its one line on stderr (see :mod:`.main`)."""

from __future__ import annotations

import os
import sys

from ..errors import (
    AuthenticationFailedError,
    ConfigError,
    InvalidMessageIdError,
    MessageFormatError,
    ServerUnavailableError,
    StreamqError,
)
from ..wire.urls import redact
from .render import one_line

EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3


class CliError(Exception):
    """A command's failure, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def reader_gone() -> int:
    """The reader of our output went away (``streamq dlq list S | head -1``): that is the
    end of the command, not an error; stdout goes to /dev/null so that the interpreter's
    last flush does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def describe_error(error: BaseException) -> tuple[str, int]:
    """The one-line message and exit code for an error out of a command."""
    if _refused_credentials(error):
        return f"failed to authenticate: {_root(error)} (check the URL's user and password)", 2
    if isinstance(error, (ConfigError, MessageFormatError, InvalidMessageIdError)):
        return str(error), EXIT_USAGE
    if isinstance(error, ServerUnavailableError):
        return str(error), EXIT_UNREACHABLE
    if isinstance(error, StreamqError):
        return str(error), EXIT_FAILED
    return f"cannot reach the server: {error}", EXIT_UNREACHABLE  # an OSError


def _causes(error: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        chain.append(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return chain


def _refused_credentials(error: BaseException) -> bool:
    return any(isinstance(e, AuthenticationFailedError) for e in _causes(error))


def _root(error: BaseException) -> str:
    return str(_causes(error)[-1])


def fail(message: str, code: int) -> int:
    print(f"streamq: {one_line(redact(message))}", file=sys.stderr)
    return code
