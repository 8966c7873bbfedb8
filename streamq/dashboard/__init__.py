"""The streamq dashboard: a web page to watch and operate topics (extra ``[dashboard]``).

``streamq dashboard --url redis://... [--host 127.0.0.1] [--port 8700] [--token T]``
serves it; :func:`create_app` gives the ASGI application to mount elsewhere.

Parts: :mod:`.app` (routes, headers, error pages), :mod:`.pages` (what is read),
:mod:`.actions` (what changes data, behind the token), :mod:`.security` (token, sessions,
CSRF: why it is done this way), :mod:`.throttle` (wrong tokens per client address),
:mod:`.view` (a topic, plain or partitioned, and its operations), :mod:`.topics` (listing
topics), :mod:`.paging` (pending entries and dead letters over the partitions),
:mod:`.samples` (the live chart's ring of samples), :mod:`.payloads` (a dead letter's
encoded payload as shown, decrypted only with a keyring), :mod:`.render` (templates and
escaping), :mod:`.server` (uvicorn on a bound socket). Shipped front-end files: htmx 2.0.11 (0BSD)
and uPlot 1.6.32 (MIT), in ``static/vendor`` with their licences.
"""

from __future__ import annotations

from .app import create_app

__all__ = ("create_app",)
