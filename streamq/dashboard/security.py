"""Who may change data: the write token, login sessions and CSRF tokens.

Reading needs nothing (the dashboard binds 127.0.0.1 unless told otherwise). Every request
that changes data is a POST and needs the write token, presented in one of two ways:

* **A browser logs in once.** The login form posts the token; it is compared with the
  configured one in constant time (:func:`hmac.compare_digest`) and, if it matches, this
  process creates a session: a random ID in memory, sent back as an ``HttpOnly``,
  ``SameSite=Strict`` cookie, with its own random CSRF token. Every action form carries
  that CSRF token in a hidden field and the action is refused (403) unless the cookie names
  a live session *and* the field matches its token (again in constant time).
* **A script** sends ``Authorization: Bearer <token>`` with its POST: no session, no CSRF
  token. A page of another origin cannot make a browser send that header (it would need a
  CORS preflight, which the dashboard never grants), so the header is not forgeable by a
  cross-site request.

Why a server-side session rather than the token itself in a cookie: the token would then
sit in the browser's cookie store and travel with every request, reads included, and could
not be revoked short of changing it; a session ID reveals nothing, ends at logout, at a
restart of the dashboard or after :data:`SESSION_LIFETIME`. Why a CSRF token on top of
``SameSite=Strict``: "same site" ignores the port, so any other web page served from
localhost (a dev server, a notebook) counts as the same site and its forms would carry the
cookie; it cannot read the dashboard's pages (another origin), so it cannot know the CSRF
token. As a last layer, a POST whose ``Origin`` header names another origin is refused.

Wrong tokens (at login or as a Bearer header) are counted per client address and for all
addresses together: after a few within a minute that address (or, after more, every
address) gets 429 for a while (:mod:`.throttle`).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .throttle import LoginThrottle

COOKIE = "streamq_dashboard_session"
SESSION_LIFETIME = 12 * 3600.0
MAX_SESSIONS = 1000  # the oldest is forgotten first; a login costs one entry


def new_token() -> str:
    """A random write token (for ``streamq dashboard`` started without one)."""
    return secrets.token_urlsafe(24)


def same_secret(given: str, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in time independent of where they differ."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


@dataclass
class Session:
    """One logged-in browser: its CSRF token, expiry, and messages for its next page."""

    csrf: str
    expires_at: float
    flashes: list[tuple[str, str]] = field(default_factory=list)


class Sessions:
    """The live sessions of this process, by session ID (lost at restart on purpose)."""

    def __init__(self) -> None:
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def create(self) -> tuple[str, Session]:
        while len(self._by_id) >= MAX_SESSIONS:
            self._by_id.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        session = Session(secrets.token_urlsafe(32), time.monotonic() + SESSION_LIFETIME)
        self._by_id[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is not None and session.expires_at < time.monotonic():
            del self._by_id[session_id]
            return None
        return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._by_id.pop(session_id, None)


class Access:
    """The write token (None: the dashboard is read-only for everyone) and the sessions."""

    def __init__(self, token: str | None) -> None:
        if token is not None and not token:
            raise ValueError("the write token must not be empty (None makes it read-only)")
        self.token = token
        self.sessions = Sessions()
        self.throttle = LoginThrottle()

    @property
    def writable(self) -> bool:
        return self.token is not None

    def token_matches(self, given: str) -> bool:
        return self.token is not None and same_secret(given, self.token)

    def check_token(self, request: Request, given: str) -> bool:
        """Whether ``given`` is the write token, counting a wrong one against the client's
        address and the token; raise 429 (with ``Retry-After``) while either is throttled."""
        address = request.client.host if request.client else "unknown"
        wait = self.throttle.retry_after(address)
        if wait is not None:
            raise HTTPException(
                429,
                f"too many wrong tokens, from this address or from all together: try again "
                f"in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        if self.token_matches(given):
            self.throttle.succeeded(address)
            return True
        self.throttle.failed(address)
        return False

    def session(self, request: Request) -> Session | None:
        """The request's live session, if its cookie names one."""
        return self.sessions.get(request.cookies.get(COOKIE))

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.check_token(request, given.strip())

    def require_write(self, request: Request, form: FormData) -> None:
        """Return if this POST may change data; else raise a 403 saying why."""
        if not self.writable:
            raise HTTPException(403, "this dashboard is read-only (started without a token)")
        if not same_origin(request):
            raise HTTPException(403, "refused: the form was sent from another origin")
        if self.bearer_ok(request):
            return
        session = self.session(request)
        if session is None:
            raise HTTPException(403, "this action needs the write token: log in first")
        csrf = form.get("csrf")
        if not isinstance(csrf, str) or not same_secret(csrf, session.csrf):
            raise HTTPException(403, "refused: the form's CSRF token is missing or stale")

    def log_in(self, request: Request, response: Response) -> None:
        """Start a new session for this browser (a fresh ID: no session fixation)."""
        self.sessions.end(request.cookies.get(COOKIE))
        session_id, _ = self.sessions.create()
        response.set_cookie(
            COOKIE, session_id, max_age=int(SESSION_LIFETIME), path="/", httponly=True,
            samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip

    def log_out(self, request: Request, response: Response) -> None:
        self.sessions.end(request.cookies.get(COOKIE))
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")

    def flash(self, request: Request, kind: str, text: str) -> bool:
        """Keep a message for the session's next page; False if there is no session."""
        session = self.session(request)
        if session is None:
            return False
        session.flashes.append((kind, text))
        return True

    def take_flashes(self, request: Request) -> list[tuple[str, str]]:
        session = self.session(request)
        if session is None:
            return []
        flashes, session.flashes = session.flashes, []
        return flashes


def same_origin(request: Request) -> bool:
    """False if the request says it comes from another origin (no ``Origin``: a script or
    an old browser; the CSRF token decides)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin.lower() == own.lower()


def safe_next(target: str | None, default: str = "/") -> str:
    """``target`` if it is a path on this site (never ``//host`` or ``https://...``)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return default
    return target
