"""Streaming queries of the Spark tests, run to the end of what is there."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def start_available_now(frame: Any, checkpoint: Path, sink: Path) -> Any:
    """Start writing the streaming DataFrame ``frame`` into parquet files at ``sink``
    (trigger availableNow, checkpoint at ``checkpoint``); returns the started query."""
    return (
        frame.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint)).option("path", str(sink))
        .trigger(availableNow=True).start()
    )  # fmt: skip


def run_available_now(reader: Any, checkpoint: Path, sink: Path) -> Any:
    """Run what ``reader`` loads to its end (start_available_now) and wait for it; fail on
    the query's error. Returns the ended query."""
    query = start_available_now(reader.load(), checkpoint, sink)
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return query
