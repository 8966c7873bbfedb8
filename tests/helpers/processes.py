"""The processes of a shared embedded server, found in /proc: for tests that check
nothing outlives them."""

from __future__ import annotations

from pathlib import Path


def processes_of(home: Path) -> list[int]:
    """The keepers whose command line names ``home``, and their children (Valkey renames
    its own command line, so it is found as a keeper's child)."""
    parents: dict[int, int] = {}
    keepers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if str(home).encode() in cmdline:
            keepers.append(int(entry.name))
    return keepers + [pid for pid, parent in parents.items() if parent in keepers]
