"""The pipeline's own consumer group (option ``group``), kept on each stream the source reads.

Spark never reads through the group (nothing is ever pending in it): the group's
last-delivered ID is moved to each end Spark has durably processed, so that
``XINFO GROUPS``/``topic_info()`` show the pipeline's lag and cleanup waits for it. On a
partitioned topic there is one such group on every partition stream, each moved to that
partition's end.
"""

from __future__ import annotations

from typing import Any

from .._ids import StreamId
from ..errors import DataLossError
from ..topic.admin import ensure_group_sync
from ..wire import replies
from .offsets import offset

LAG_SCAN = 10_000


def ensure_group(client: Any, stream: str, group: str, starting: str) -> dict[str, Any]:
    """Create the pipeline's group on ``stream`` at the starting position (``earliest``,
    ``latest`` or an entry ID) and return its position as an offset: an existing group's
    position wins (the checkpoint, when there is one, wins over both)."""
    ensure_group_sync(
        client, stream, group, {"latest": "$", "earliest": "0"}.get(starting, starting)
    )
    for info in replies.groups(client.xinfo_groups(stream)):
        if info.name == group:
            return offset(StreamId.parse(info.last_delivered_id), info.entries_read)
    raise DataLossError(f"group {group!r} vanished from {stream!r} while the query started")


def advance_group(client: Any, stream: str, group: str, finish: StreamId) -> None:
    """Set the group's last-delivered ID on ``stream`` to ``finish``."""
    command: list[Any] = ["XGROUP", "SETID", stream, group, str(finish)]
    after = client.xrange(stream, min=f"({finish}", max="+", count=LAG_SCAN)
    if len(after) < LAG_SCAN:
        # ENTRIESREAD keeps XINFO GROUPS' lag exact (= entries after the committed end);
        # with a larger backlog Redis reports the lag as unknown instead.
        added = replies.stream_summary(client.xinfo_stream(stream)).entries_added or 0
        command += ["ENTRIESREAD", max(added - len(after), 0)]
    client.execute_command(*command)
