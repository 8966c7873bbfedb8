"""Which kind of deployment a URL names, by its scheme alone (no client is loaded).

Kept apart from :mod:`.sentinel` so that telling a Sentinel URL from another does not load
redis-py's Sentinel clients: a consumer of one node or a cluster never needs them.
"""

from __future__ import annotations

SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}  # scheme -> TLS


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` or ``rediss+sentinel://`` URL."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES
