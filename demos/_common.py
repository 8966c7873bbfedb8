"""Shared demo plumbing: a fresh stream name and a banner."""

from __future__ import annotations

import logging
import os
import uuid


def setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("STREAMQ_LOG", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def fresh_stream(name: str) -> str:
    return f"demo-{name}-{uuid.uuid4().hex[:6]}"


def where() -> str:
    url = os.environ.get("STREAMQ_REDIS_URL")
    return url if url else "the embedded Valkey server"
