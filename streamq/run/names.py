"""Before ``streamq run`` starts its workers: are the consumer names they would take held
by live processes (another ``streamq run`` of the same service on this host, which names
its workers alike)? Then the run is refused in one line, before any worker starts.

Each worker still claims its own name when its queues open
(:mod:`streamq.consume.name_claim`): a run started at the same moment as another is
refused there, the worker exiting as for any configuration error.
"""

from __future__ import annotations

import logging

from ..app import App
from ..consume.name_claim import held_by_live_processes
from ..errors import ConfigError, RedisFailure
from .target import slot_name

log = logging.getLogger("streamq.run")


async def check_names_free(app: App, workers: int, name: str | None) -> None:
    """Raise ConfigError naming every consumer name of this run's ``workers`` slots that a
    live process holds, and how to choose others. A server that cannot be reached now is
    left to the workers, which wait for it."""
    taken: list[str] = []
    for mq in app.queues:
        if mq.group is None or not len(mq.route_table):  # fan-out and idle queues claim nothing
            continue
        names = [slot_name(mq, slot, name) for slot in range(workers)]
        try:
            live = await held_by_live_processes(mq.client, mq.stream, mq.group, names)
        except (RedisFailure, OSError) as e:
            log.debug("could not check the consumer names of %s: %s", mq.stream, e)
            continue
        finally:
            await mq.aclose()
        taken += [
            f"{n!r} in group {mq.group!r} of {mq.stream!r} ({who})" for n, who in live.items()
        ]
    if taken:
        raise ConfigError(
            f"consumer names in use by other live processes: {', '.join(taken)}; give this "
            "run names of its own with --name NAME (its workers are then NAME-0, NAME-1, ...) "
            "or stop the other run"
        )
