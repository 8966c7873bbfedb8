"""The payload settings of a queue's routes: each type's schema versions (given when its
handler is registered) and, when its consumer is built, the queue's keyring and
``on_newer_version`` (:mod:`streamq.payload.reading`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .consume.routes import Route, Routes
from .payload.reading import EntryReader, OnNewerVersion, versions_of
from .payload.versions import Versions

if TYPE_CHECKING:
    from .payload.keyring import Keyring


def with_versions(route: Route, versions: Versions) -> None:
    """Give ``route`` (a registry's own) its type's ``versions``."""
    parse = route.parse
    inner = parse.parse if isinstance(parse, EntryReader) else parse
    route.parse = EntryReader(inner, route.model, versions)


def bind(routes: Routes, keyring: Keyring | None, newer: OnNewerVersion) -> Routes:
    """A copy of ``routes`` whose routes read entries with ``keyring`` and ``newer``
    (the routes of ``routes`` are left as they are)."""
    bound = Routes()
    for route in routes.routes.values():
        parse = route.parse
        inner = parse.parse if isinstance(parse, EntryReader) else parse
        versions = versions_of(route)
        reader = EntryReader(inner, route.model, versions, keyring, newer)
        plain = inner if versions.version == 1 else None  # an old entry needs no upcast
        bound.adopt(dataclasses.replace(route, parse=reader, plain=plain))
    return bound


class WrittenVersions:
    """The schema version a queue writes each type with (its ``ver`` field): a typed
    publisher's ``version=``, else the version of this process's handler of the type,
    else 1. Read at each publish, so handlers registered later count."""

    def __init__(self, routes: Routes, published: Mapping[str, int]) -> None:
        self._routes = routes.by_name  # live: handlers registered later count
        self._published = published  # the typed publishers' (CheckedPublishing's)

    def __call__(self, message_type: str) -> int:
        """Called for every publish: a few dictionary lookups."""
        version = self._published.get(message_type)
        if version is None:
            route = self._routes.get(message_type)
            parse = None if route is None else route.parse
            version = parse.versions.version if type(parse) is EntryReader else 1
        return version
