"""Names of streamq's auxiliary keys.

All live under ``streamq:{<stream>}:`` so that in Redis Cluster they hash to the stream's
own slot (the stream key hashes on its whole name, these on the braced part).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    stream: str

    @property
    def prefix(self) -> str:
        return f"streamq:{{{self.stream}}}:"

    @property
    def dead_letters(self) -> str:
        return self.prefix + "dlq"

    @property
    def stopped(self) -> str:
        """Hash: stopped entry ID -> groups whose pending list it was taken from."""
        return self.prefix + "stopped"

    @property
    def control(self) -> str:
        """Pub/sub channel for stop/resume/terminate notices."""
        return self.prefix + "control"

    @property
    def unrouted(self) -> str:
        """Hash: entry ID -> deliveries to consumers without a handler for its type."""
        return self.prefix + "unrouted"

    @property
    def cleanup_lock(self) -> str:
        return self.prefix + "cleanup-lock"

    def own_keys(self) -> list[str]:
        """streamq's keys for this stream except the dead letters."""
        return [self.stopped, self.unrouted, self.cleanup_lock]
