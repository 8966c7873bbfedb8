"""``streamq run module:attr``: a service's handlers in supervised worker processes.

* :mod:`.target` loads ``module:attr`` (a MessageQueue, an App, or a factory of one) and
  gives each worker slot its stable consumer names (``<consumer>-<slot>``, or
  ``<name>-<slot>`` with ``--name``); :mod:`.names` refuses a run whose names live
  processes hold, before any worker starts;
* :mod:`.supervisor` starts the workers, restarts a crashed one with backoff, drains them
  all on SIGTERM/SIGINT (a second signal ends them at once) and, with ``--reload``,
  restarts them when the code changes (:mod:`.reload`);
* :mod:`.worker` is one worker process: it runs the App and reports its health and
  counters to the supervisor through a status file (:mod:`.status`);
* :mod:`.http` serves ``/livez``, ``/readyz`` and one ``/metrics`` for all workers.
"""

from __future__ import annotations

from .supervisor import RunOptions, Supervisor
from .target import assign_slot, load_target

__all__ = ("RunOptions", "Supervisor", "assign_slot", "load_target")
