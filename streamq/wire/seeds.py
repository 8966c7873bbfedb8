"""Several nodes of one cluster in one URL: ``redis://[user:password@]host:port,host:port/db``.

Given the URL of one cluster node, a process cannot learn the slot map while that node is
down. A URL may name more nodes of the same cluster, comma-separated (as Sentinel URLs name
their sentinels): the client connects with the first one's settings (credentials, database,
options apply to every node) and asks the others for the slot map when it does not answer.
"""

from __future__ import annotations

from ..errors import ConfigError
from .slots import Address

DEFAULT_PORT = 6379


def split_seeds(url: str) -> tuple[str, list[Address]]:
    """The URL of the first node named, and the addresses of the others (none: ``url``)."""
    scheme, separator, rest = url.partition("://")
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    userinfo, at, hosts = rest[:end].rpartition("@")
    if not separator or "," not in hosts:
        return url, []
    first, *others = hosts.split(",")
    return f"{scheme}://{userinfo}{at}{first}{rest[end:]}", [_address(text) for text in others]


def _address(text: str) -> Address:
    if text.startswith("["):  # [IPv6]:port
        host, _, after = text[1:].partition("]")
        port = after.removeprefix(":")
    else:
        host, _, port = text.partition(":")
    if not host or not (port == "" or (port.isascii() and port.isdigit())):
        raise ConfigError(f"invalid node {text!r} in the URL: host:port, comma-separated")
    return host, int(port or DEFAULT_PORT)
