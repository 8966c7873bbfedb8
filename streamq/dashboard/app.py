"""The dashboard's ASGI application: routes, the Redis client's lifetime, error pages and
the headers every response carries.

Pages are rendered on the server and readable without JavaScript; htmx (shipped in
``static/vendor``) only refreshes the topic page's figures, and uPlot draws its chart.
The Content-Security-Policy allows scripts, styles and requests from the dashboard itself
only, so even a value that escaped escaping could not run code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import (
    GroupNotFoundError,
    InvalidMessageIdError,
    ServerUnavailableError,
    StreamNotFoundError,
    StreamqError,
)
from ..payload.keyring import Keyring
from ..wire.client import connect
from ..wire.urls import check_url, public_url, redact
from . import actions, downloads, pages
from .limits import ReadSlots
from .render import build_templates, page
from .samples import SampleStore
from .security import Access

STATIC = Path(__file__).parent / "static"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
     b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make forms send Origin: null
]  # fmt: skip


def create_app(
    url: str,
    *,
    token: str | None,
    allowed_hosts: Sequence[str] | None = None,
    asyncapi: Mapping[str, Any] | None = None,
    keyring: Keyring | None = None,
) -> Starlette:
    """The dashboard over the Redis server at ``url``.

    ``token``: the write token (None: read-only for everyone). ``allowed_hosts``: the
    ``Host`` headers accepted (None: any); a dashboard on loopback should accept only
    loopback names, so that a web page cannot reach it through DNS rebinding.
    ``asyncapi``: the AsyncAPI document of the service it watches (``streamq dashboard
    --asyncapi module:attr``), served at ``/asyncapi.json`` and linked from every page.
    ``keyring``: decrypts encrypted payloads on the dead-letter page, and a replay
    encrypts again with its current key (without one, they are shown as encrypted).
    A URL a client would misread, or of a scheme streamq does not take, raises
    :class:`~streamq.ConfigError` here, before serving.
    """
    check_url(url)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.deployment = connect(url)
        try:
            yield
        finally:
            await app.state.deployment.aclose()

    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(
        routes=ROUTES,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            HTTPException: http_error,
            StreamqError: failure,
        },
    )
    app.state.access = Access(token)
    app.state.samples = SampleStore()
    app.state.read_slots = ReadSlots()
    app.state.templates = build_templates()
    app.state.server_url = public_url(url)
    app.state.asyncapi = asyncapi
    app.state.keyring = keyring
    return app


async def asyncapi_document(request: Request) -> Response:
    """The AsyncAPI document the dashboard was started with (404 without one)."""
    document = request.app.state.asyncapi
    if document is None:
        raise HTTPException(404, "no AsyncAPI document: start with --asyncapi module:attr")
    return JSONResponse(document)


ROUTES = [
    Route("/", pages.topics, name="topics"),
    Route("/asyncapi.json", asyncapi_document, name="asyncapi"),
    Route("/topic", pages.topic, name="topic"),
    Route("/topic/live", pages.topic_live, name="topic_live"),
    Route("/topic/pending", pages.pending, name="pending"),
    Route("/topic/dead-letters", pages.dead_letters, name="dead_letters"),
    Route("/topic/dead-letters/field", downloads.dead_letter_field, name="dead_letter_field"),
    Route("/topic/stopped", pages.stopped, name="stopped"),
    Route("/topic/scheduled", pages.scheduled, name="scheduled"),
    Route("/topic/halted", pages.halted, name="halted"),
    Route("/topic/terminate", pages.terminate_form, name="terminate_form"),
    Route("/login", pages.login_form, name="login_form"),
    Route("/login", actions.log_in, methods=["POST"], name="login"),
    Route("/logout", actions.log_out, methods=["POST"], name="logout"),
    Route("/topic/stop", actions.stop, methods=["POST"], name="stop"),
    Route("/topic/resume", actions.resume, methods=["POST"], name="resume"),
    Route("/topic/scheduled/cancel", actions.cancel_scheduled, methods=["POST"]),
    Route("/topic/halted/release", actions.release_halted, methods=["POST"]),
    Route("/topic/pause", actions.pause, methods=["POST"], name="pause"),
    Route("/topic/unpause", actions.unpause, methods=["POST"], name="unpause"),
    Route("/topic/dead-letters/replay", actions.replay, methods=["POST"], name="replay"),
    Route("/topic/dead-letters/replay-all", actions.replay_all, methods=["POST"]),
    Route("/topic/dead-letters/purge", actions.purge, methods=["POST"], name="purge"),
    Route("/topic/terminate", actions.terminate, methods=["POST"], name="terminate"),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


async def http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    response = error_page(request, error.status_code, error.detail)
    response.headers.update(error.headers or {})  # Retry-After of a 429
    return response


async def failure(request: Request, error: Exception) -> Response:
    """Errors out of Redis or streamq as a page that says what happened (no traceback, no
    credentials of a URL)."""
    message = redact(str(error))
    if isinstance(error, InvalidMessageIdError):
        return error_page(request, 400, message)
    if isinstance(error, (StreamNotFoundError, GroupNotFoundError)):
        return error_page(request, 404, message)
    if isinstance(error, ServerUnavailableError):
        return error_page(request, 503, message)
    return error_page(request, 502, f"the server answered with an error: {message}")


def error_page(request: Request, status: int, message: str) -> Response:
    """The error as a page; to a script (``Authorization: Bearer``), as plain text, as its
    actions' outcomes are."""
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return PlainTextResponse(f"{message}\n", status_code=status)
    return page(request, "error.html", {"status": status, "message": message}, status)


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
