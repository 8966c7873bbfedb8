"""Redis URLs: checked before any client parses them, and their credentials kept out of text.

A password goes into a URL percent-encoded. One that holds ``#``, ``/`` or ``?`` as it is
ends the URL's authority early, so a URL parser takes a piece of it for the host or the
port and names that piece in its error (``Port could not be cast to integer value as
'S3cr3t'``). :func:`check_url` finds such URLs before any client sees them and says what is
wrong without quoting the URL; :func:`redact` removes the credentials of every URL in a
text (an error, a log line), whatever the URL's shape; :func:`public_url` is a URL as a page
or a document shows it.
"""

from __future__ import annotations

import re

from ..errors import ConfigError
from .schemes import SENTINEL_FORM, check_scheme, is_sentinel_url

HIDDEN = "***"
FORM = "redis://[[user]:password@]host[:port][/db]"
ENCODED = "'#' as %23, '/' as %2F, '?' as %3F, '@' as %40"
_HINTS = (FORM, SENTINEL_FORM, ENCODED)  # texts errors show that look like credentials
_SCHEME_END = "://"
_AUTHORITY_ENDS = "/?#"
_PORT = re.compile(r"\d{1,5}")
_DATABASE = re.compile(r"(/\d*)?")  # a redis:// URL's path: none, "/", or "/<db number>"
# a URL option that holds a secret: ?password=..., &sentinel_password=...
_SECRET_OPTION = re.compile(r"(?i)([?&][a-z_]*(?:password|passwd|secret|token)=)[^&\s#'\"]*")


def redact(text: str) -> str:
    """``text`` with the credentials of each URL in it shown as ``***``.

    Everything between a ``://`` and the last ``@`` on the rest of its line goes, so a
    password holding any character (``#``, ``/``, ``?``, ``@``, spaces) is removed whole;
    when in doubt more is hidden, never less. Options that hold a secret
    (``?password=``, ``&sentinel_password=``) are shown as ``***`` too. The URL forms and
    the encoding hint that errors show (:data:`FORM`, :data:`ENCODED`) hold no credentials
    and stay whole, unless they are inside a hidden part.
    """
    kept = _keep_hints(text)
    return _restore_hints(_SECRET_OPTION.sub(r"\1***", _without_userinfo(kept)))


def _keep_hints(text: str) -> str:
    """``text`` with each hint replaced by a marker holding no ``://`` nor ``@``."""
    for number, hint in enumerate(_HINTS):
        text = text.replace(hint, _marker(number))
    return text


def _restore_hints(text: str) -> str:
    for number, hint in enumerate(_HINTS):
        text = text.replace(_marker(number), hint)
    return text


def _marker(number: int) -> str:
    return f"\x00hint{number}\x00"


def _without_userinfo(text: str) -> str:
    out: list[str] = []
    start = 0
    while (found := text.find(_SCHEME_END, start)) >= 0:
        begin = found + len(_SCHEME_END)
        line_end = _line_end(text, begin)
        at = text.rfind("@", begin, line_end)
        if at < 0:
            out.append(text[start:begin])
            start = begin
            continue
        out.append(text[start:begin] + HIDDEN)
        start = at
    out.append(text[start:])
    return "".join(out)


def _line_end(text: str, start: int) -> int:
    ends = [i for i in (text.find("\n", start), text.find("\r", start)) if i >= 0]
    return min(ends, default=len(text))


def check_url(url: str) -> None:
    """Refuse a URL that a client would misread, with a :class:`ConfigError` that names the
    problem and never the URL (it may hold a password): no scheme streamq takes;
    credentials holding an unencoded ``#``, ``/`` or ``?``; a port or a database that is not
    a number; an unknown or invalid query option (:mod:`.url_options`)."""
    if not isinstance(url, str):
        raise ConfigError(f"invalid server URL: expected a string like {FORM}")
    check_scheme(url)
    scheme, _, rest = url.partition(_SCHEME_END)
    if "#" in rest:
        raise ConfigError(
            f"invalid server URL: it holds a '#'; a password must be percent-encoded ({ENCODED})"
        )
    authority, tail = _authority(rest)
    if "@" not in authority and "@" in tail.split("=", 1)[0]:
        raise ConfigError(
            "invalid server URL: its user name or password holds a '/' or '?'; the password "
            f"must be percent-encoded ({ENCODED})"
        )
    if scheme.lower() != "unix":
        _check_ports(authority.rpartition("@")[2])
    if scheme.lower() in ("redis", "rediss") and not _DATABASE.fullmatch(tail.partition("?")[0]):
        raise ConfigError(f"invalid server URL: its database (after '/') is not a number: {FORM}")
    query = tail.partition("?")[2]
    if query and not is_sentinel_url(url):  # (a Sentinel URL's: checked as it is parsed)
        # loaded on first use: only a URL with query options needs the checks
        from .url_options import check_options

        check_options(scheme, query)


def _authority(rest: str) -> tuple[str, str]:
    """``rest`` (after ``://``) as its authority and what follows it."""
    ends = [i for i in (rest.find(c) for c in _AUTHORITY_ENDS) if i >= 0]
    end = min(ends, default=len(rest))
    return rest[:end], rest[end:]


def _check_ports(hosts: str) -> None:
    for host in hosts.split(","):
        port = _port_of(host)
        if port is not None and not (_PORT.fullmatch(port) and int(port) <= 65535):
            raise ConfigError(
                "invalid server URL: its port is not a number from 0 to 65535 (the password "
                f"goes before an '@': {FORM}; percent-encode it: {ENCODED})"
            )


def _port_of(host: str) -> str | None:
    """The port text of ``host[:port]`` or ``[v6]:port`` (None: no port given)."""
    if host.startswith("["):
        _, _, after = host.partition("]")
        return (after[1:] or None) if after.startswith(":") else (after or None)
    port = host.partition(":")[2]
    return port or None  # "host:" means the default port, as for a URL parser


def public_url(url: str) -> str:
    """``url`` without its password and query (options may hold a password), for pages;
    a URL that does not parse shows its scheme only."""
    scheme, separator, rest = url.partition(_SCHEME_END)
    if not separator:
        return HIDDEN
    try:
        check_url(url)
    except ConfigError:
        return f"{scheme}{_SCHEME_END}{HIDDEN}"
    authority, tail = _authority(rest)
    userinfo, at, hosts = authority.rpartition("@")
    user = userinfo.partition(":")[0]
    shown = f"{user}@{hosts}" if at and user else hosts
    return f"{scheme}{_SCHEME_END}{shown}{tail.partition('?')[0]}"
