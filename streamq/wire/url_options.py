"""The query options of a ``redis://``, ``rediss://`` or ``unix://`` URL (``?socket_timeout=2``).

redis-py hands every option it does not know to its connections as a keyword argument, so
a misspelt one fails each connection with a ``TypeError``, and values it cannot use (a
timeout of 0, protocol 9) look like an unreachable server. :func:`check_options` refuses
them first, with a :class:`ConfigError` naming the option and never quoting a value (an
option may hold a password). Sentinel URLs take other options, checked by
:mod:`.sentinel`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from urllib.parse import parse_qsl

from ..errors import ConfigError

_CERT_REQS = ("none", "optional", "required")
_BOOLEANS = ("0", "1", "true", "false", "yes", "no", "t", "f", "y", "n")
_NAME = re.compile(r"[A-Za-z_]{1,40}")
_SECRET_NAME = re.compile(r"(?i)password|passwd|secret|token")


def _seconds(value: str) -> str | None:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    return None if math.isfinite(seconds) and seconds > 0 else "must be a number of seconds above 0"


def _whole(value: str) -> str | None:
    ok = value.isascii() and value.isdigit()
    return None if ok else "must be a whole number from 0 up"


def _protocol(value: str) -> str | None:
    return None if value in ("2", "3") else "must be 2 or 3"


def _text(value: str) -> str | None:
    return None


def _cert_reqs(value: str) -> str | None:
    return None if value.lower() in _CERT_REQS else f"must be one of {', '.join(_CERT_REQS)}"


def _boolean(value: str) -> str | None:
    return None if value.lower() in _BOOLEANS else "must be true or false"


def _file(value: str) -> str | None:
    return None if os.path.isfile(value) else "names no file (it is read when connecting)"


def _directory(value: str) -> str | None:
    return None if os.path.isdir(value) else "names no directory"


Check = Callable[[str], "str | None"]  # the problem with a value (None: it is fine)

OPTIONS: dict[str, Check] = {
    "db": _whole,
    "socket_timeout": _seconds,
    "socket_connect_timeout": _seconds,
    "protocol": _protocol,
    "health_check_interval": _whole,
    "client_name": _text,
    "username": _text,
    "password": _text,
}
TLS_OPTIONS: dict[str, Check] = {
    "ssl_ca_certs": _file,
    "ssl_ca_path": _directory,
    "ssl_certfile": _file,
    "ssl_keyfile": _file,
    "ssl_cert_reqs": _cert_reqs,
    "ssl_check_hostname": _boolean,
}


def check_options(scheme: str, query: str) -> None:
    """Refuse an option of ``query`` that ``scheme``'s URLs do not take, one given twice, or
    one whose value a connection could not use."""
    tls = scheme.lower() == "rediss"
    seen: set[str] = set()
    after_secret = False
    for name, value in parse_qsl(query, keep_blank_values=True):
        check = OPTIONS.get(name) or (TLS_OPTIONS.get(name) if tls else None)
        if check is None:
            raise _unknown(name, after_secret)
        if name in seen:
            raise _invalid(f"the option {name!r} is given twice")
        seen.add(name)
        problem = check(value)
        if problem:
            raise _invalid(f"the option {name!r} {problem}")
        after_secret = after_secret or bool(_SECRET_NAME.search(name))


def _unknown(name: str, after_secret: bool) -> ConfigError:
    if name in TLS_OPTIONS:
        return _invalid(f"{name!r} is an option of rediss:// URLs (TLS), not of this one")
    names = ", ".join([*OPTIONS, *TLS_OPTIONS])
    if after_secret or not _NAME.fullmatch(name):
        # what follows a password may be a piece of it, cut off by an unencoded '&'
        return _invalid(
            f"it holds an unknown option (not shown: a '&' in a password must be "
            f"percent-encoded as %26); the options are {names}"
        )
    return _invalid(f"unknown option {name!r}; the options are {names}")


def _invalid(problem: str) -> ConfigError:
    return ConfigError(f"invalid server URL: {problem}")
