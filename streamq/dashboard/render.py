"""Templates and the filters they use to show what comes from Redis.

Jinja2 escapes every value for HTML (autoescape on for all templates). Before that, the
filters :func:`shown` and :func:`shown_lines` escape control characters and the
bidirectional formatting characters (as the CLI does, :mod:`streamq.cli.render`): an
entry must not be able to reorder what a page says ("Trojan Source") or hide text.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from .._text import age, keep_start, one_line, terminal_safe
from ..flow.waiting import REPORT_FRESH
from .names import encoded
from .topics import total_lag

# A payload or traceback longer than this is cut on the page, saying how much was left out.
MAX_SHOWN_CHARS = 20_000


def shown(value: object) -> str:
    """``value`` on one line, control and bidi characters as visible escapes."""
    return one_line("-" if value is None else value)


def shown_lines(value: object) -> str:
    """Like :func:`shown` but keeps newlines (payloads, tracebacks), cut to a size."""
    return terminal_safe(keep_start("-" if value is None else str(value), MAX_SHOWN_CHARS))


def when(ms: int) -> str:
    """A Unix time in milliseconds as UTC ISO 8601 (``-`` for 0: unknown)."""
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def href(path: str, **params: object) -> str:
    """``path`` with ``params`` (those not None) as its query string."""
    query = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return f"{path}?{urlencode(query)}" if query else path


def build_templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("streamq.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(shown=shown, shown_lines=shown_lines, age=age, when=when, encoded=encoded)
    env.globals.update(href=href, total_lag=total_lag, waiting_fresh=REPORT_FRESH)
    return Jinja2Templates(env=env)


def page(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    status_code: int = 200,
    *,
    fragment: bool = False,
) -> Response:
    """Render ``template`` with what every page shows: the server, who may write, the
    CSRF token for forms, and the messages kept for this session (a ``fragment``, polled
    by a page, leaves them for the next whole page)."""
    app = request.app.state
    session = app.access.session(request)
    common = {
        "server_url": app.server_url,
        "asyncapi": app.asyncapi is not None,
        "writable": app.access.writable,
        "can_write": app.access.writable and session is not None,
        "csrf": session.csrf if session is not None else "",
        "flashes": [] if fragment else app.access.take_flashes(request),
        "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        # streamq's own records this page found damaged and set aside (limits.reading)
        "damaged": [str(record) for record in getattr(request.state, "damaged", ())],
    }
    templates: Jinja2Templates = app.templates
    response = templates.TemplateResponse(
        request, template, {**common, **context}, status_code=status_code
    )
    response.headers["Cache-Control"] = "no-store"
    return response
