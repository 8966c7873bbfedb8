"""Which kind of deployment a URL names, by its scheme alone (no client is loaded).

Kept apart from :mod:`.sentinel` so that telling a Sentinel URL from another does not load
redis-py's Sentinel clients: a consumer of one node or a cluster never needs them.
"""

from __future__ import annotations

from ..errors import ConfigError

SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}  # scheme -> TLS
NODE_SCHEMES = ("redis", "rediss", "unix")  # a node or a cluster's (redis-py's own)
SENTINEL_FORM = "redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]"


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` or ``rediss+sentinel://`` URL."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def check_scheme(url: str) -> None:
    """ConfigError naming every scheme streamq takes, unless ``url`` has one of them. The
    message shows the scheme found, never the rest (it may hold a password)."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme.lower() in (*NODE_SCHEMES, *SCHEMES):
        return
    names = [f"{name}://" for name in (*NODE_SCHEMES, *SCHEMES)]
    if not sep:
        found = "got no scheme"
    elif "@" in scheme or ":" in scheme:  # not a scheme: what a password could be part of
        found = "got an unknown scheme"
    else:
        found = f"got {scheme[:20] + '://'!r}"
    raise ConfigError(
        f"invalid server URL: it starts with {', '.join(names[:-1])} or {names[-1]}; {found}"
    )
