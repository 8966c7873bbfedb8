"""Redis Sentinel URLs: the master of a service, found through its sentinels.

The URL form::

    redis+sentinel://[user:password@]host[:port][,host[:port]...]/service_name[/db][?options]
    rediss+sentinel://...        the same over TLS (to the sentinels and to the master)

- ``host:port`` pairs name the sentinels (the port defaults to 26379; IPv6 as
  ``[::1]:26379``), not the master: the client asks them for the master of
  ``service_name`` (percent-encoded if needed) before each new connection.
- ``user:password`` are the master's credentials (percent-encode reserved characters);
  ``db`` is its database number (default 0).
- options: ``sentinel_username`` and ``sentinel_password`` (for sentinels that require
  their own authentication; by default they get none), ``protocol`` (2 or 3),
  ``ssl_cert_reqs`` (``none``, ``optional``, ``required``) and ``ssl_ca_certs`` (a path).

Clients from :func:`async_client` and :func:`sync_client` are redis-py ``Redis`` objects
over a Sentinel connection pool (:class:`redis.asyncio.sentinel.SentinelConnectionPool`,
made blocking for the asyncio client as plain URLs' pools are): a connection looks the
master up through the sentinels when it connects, and again after a connection error or a
``READONLY`` reply (a demoted master). So after a failover the same client reaches the
promoted replica: while no master is known its commands fail with ``ConnectionError``
(``MasterNotFoundError`` among them), then they succeed. Like the clients of plain URLs
they return raw bytes and do not retry: streamq's loops do.

Errors in a URL raise :class:`~streamq.errors.ConfigError` naming what is wrong; no
message, ``repr`` or ``str`` of a :class:`SentinelUrl` shows a password.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

import anyio
import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel
from redis.sentinel import SentinelConnectionPool as SyncSentinelPool

from ..errors import ConfigError
from .pool_options import CONNECTION_OPTIONS, MAX_CONNECTIONS
from .schemes import SCHEMES, SENTINEL_FORM, is_sentinel_url
from .timeouts import POOL_WAIT

__all__ = ("SentinelUrl", "async_client", "is_sentinel_url", "sync_client")

DEFAULT_PORT = 26379
# A sentinel that does not answer a lookup within this is skipped for the next one.
SENTINEL_TIMEOUT = 2.0
_OPTIONS = (
    "protocol", "sentinel_password", "sentinel_username", "ssl_ca_certs", "ssl_cert_reqs",
)  # fmt: skip
_CERT_REQS = ("none", "optional", "required")


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed Sentinel URL (see the module docstring for the form)."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: bool = False
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    protocol: int | None = None
    ssl_cert_reqs: str | None = None
    ssl_ca_certs: str | None = None

    @classmethod
    def parse(cls, url: str) -> SentinelUrl:
        """Parse ``url``; :class:`ConfigError` names what is wrong (never the password)."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in SCHEMES:
            raise _invalid(f"the scheme must be one of {sorted(SCHEMES)}")
        if "#" in rest:
            raise _invalid("a '#' is not part of the form (percent-encode it in a password)")
        authority, path, query = _split(rest)
        userinfo, at, hosts = authority.rpartition("@")
        username, password = _credentials(userinfo) if at else (None, None)
        service_name, db = _path(path)
        return cls(
            sentinels=_sentinels(hosts),
            service_name=service_name,
            db=db,
            username=username,
            password=password,
            ssl=SCHEMES[scheme.lower()],
            **_options(query),
        )

    def __str__(self) -> str:
        """The URL again, with any password shown as ``***``."""
        scheme = "rediss+sentinel" if self.ssl else "redis+sentinel"
        user = quote(self.username or "", safe="")
        userinfo = f"{user}:***@" if self.password else (f"{user}@" if user else "")
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        options = [f"{k}={v}" for k, v in self._option_values().items()]
        query = "?" + "&".join(options) if options else ""
        return f"{scheme}://{userinfo}{hosts}/{quote(self.service_name, safe='')}/{self.db}{query}"

    def _option_values(self) -> dict[str, Any]:
        return _given(
            protocol=self.protocol,
            sentinel_username=self.sentinel_username,
            sentinel_password="***" if self.sentinel_password else None,
            ssl_cert_reqs=self.ssl_cert_reqs,
            ssl_ca_certs=self.ssl_ca_certs,
        )

    def _master_options(self) -> dict[str, Any]:
        """Connection options of the master's connections (credentials, db, TLS)."""
        given = _given(username=self.username, password=self.password, protocol=self.protocol)
        return {"db": self.db, **self._tls(), **given}

    def _sentinel_options(self) -> dict[str, Any]:
        """Connection options of the lookups at the sentinels."""
        return {
            "socket_timeout": SENTINEL_TIMEOUT,
            "socket_connect_timeout": SENTINEL_TIMEOUT,
            "socket_keepalive": True,
            **self._tls(),
            **_given(username=self.sentinel_username, password=self.sentinel_password),
        }

    def _tls(self) -> dict[str, Any]:
        if not self.ssl:
            return {}
        return {
            "ssl": True,
            **_given(ssl_cert_reqs=self.ssl_cert_reqs, ssl_ca_certs=self.ssl_ca_certs),
        }


def _given(**options: Any) -> dict[str, Any]:
    """The options that have a value (not None), in their order."""
    return {name: value for name, value in options.items() if value is not None}


def _invalid(problem: str) -> ConfigError:
    return ConfigError(f"invalid Sentinel URL: {problem} (form: {FORM})")


FORM = SENTINEL_FORM


def _split(rest: str) -> tuple[str, str, str]:
    """``rest`` (after ``://``) as authority, path and query."""
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    before_options = tail.split("=", 1)[0]
    if "@" not in authority and "@" in before_options:
        # user:pa/ss@host: the '/' cut the credentials; saying more would show them
        raise _invalid("the credentials hold a '/' or '?': percent-encode the password")
    path, _, query = tail.partition("?")
    return authority, path, query


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


def _sentinels(hosts: str) -> tuple[tuple[str, int], ...]:
    if not hosts:
        raise _invalid("no sentinel named (host:port after '://')")
    return tuple(_address(text, n) for n, text in enumerate(hosts.split(","), 1))


def _address(text: str, number: int) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, bracket, after = text[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise _invalid(f"sentinel {number}: an IPv6 address is written [address]:port")
        port_text = after[1:]
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise _invalid(f"sentinel {number} has no host")
    if not port_text:
        return host, DEFAULT_PORT
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise _invalid(f"sentinel {number} ({host}): the port must be a number from 1 to 65535")
    return host, int(port_text)


def _path(path: str) -> tuple[str, int]:
    parts = path.strip("/").split("/") if path.strip("/") else []
    if not parts:
        raise _invalid("no service name (the master's name after the hosts: .../mymaster)")
    if len(parts) > 2:
        raise _invalid("the path has more than /service_name/db")
    service_name = unquote(parts[0])
    if not service_name or any(c.isspace() for c in service_name):
        raise _invalid(f"the service name {service_name!r} is empty or holds a space")
    db_text = parts[1] if len(parts) == 2 else "0"
    if not (db_text.isascii() and db_text.isdigit()):
        raise _invalid(f"the database {db_text!r} is not a number from 0 up")
    return service_name, int(db_text)


def _options(query: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in _OPTIONS:
            raise _invalid(f"unknown option {name!r}; the options are {', '.join(_OPTIONS)}")
        if name in options:
            raise _invalid(f"the option {name!r} is given twice")
        options[name] = value
    if "protocol" in options:
        if options["protocol"] not in ("2", "3"):
            raise _invalid("the option 'protocol' must be 2 or 3")
        options["protocol"] = int(options["protocol"])
    if options.get("ssl_cert_reqs", "none") not in _CERT_REQS:
        raise _invalid(f"the option 'ssl_cert_reqs' must be one of {', '.join(_CERT_REQS)}")
    return options


class _AsyncSentinelManager(AsyncSentinel):  # type: ignore[misc]
    """redis-py's Sentinel with one master lookup at a time. Its lookup moves the sentinel
    that answered to the front by swapping list entries across awaits: lookups running
    together (every connection of a pool reconnecting after a failover) can duplicate one
    sentinel in the list and lose another, which is then never asked nor closed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lookup = anyio.Lock()

    async def discover_master(self, service_name: str) -> Any:
        async with self._lookup:
            return await super().discover_master(service_name)


class _SyncSentinelManager(Sentinel):  # type: ignore[misc]
    """The same for threads sharing a synchronous client."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lookup = threading.Lock()

    def discover_master(self, service_name: str) -> Any:
        with self._lookup:
            return super().discover_master(service_name)


class _BlockingSentinelPool(AsyncSentinelPool, aioredis.BlockingConnectionPool):  # type: ignore[misc]
    """redis-py's Sentinel pool (master lookup on connect) with the blocking pool's wait
    for a free connection, as plain URLs get: a caller past the limit waits up to
    ``timeout`` instead of failing at once."""


class _SyncBlockingSentinelPool(SyncSentinelPool, redis.BlockingConnectionPool):  # type: ignore[misc]
    """The same for the blocking client: threads past the limit wait for a free connection
    (redis-py's own Sentinel pool has no limit, or fails at once when given one)."""


class _AsyncSentinelClient(aioredis.Redis):  # type: ignore[misc]
    """Closes the sentinels' connections with its own (redis-py leaves them open)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        if manager is not None:
            await manager.aclose()


class _SyncSentinelClient(redis.Redis):  # type: ignore[misc]
    """Closes the sentinels' connections with its own (redis-py leaves them open)."""

    def close(self) -> None:
        super().close()
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            sentinel.close()


def async_client(
    url: str, *, max_connections: int = MAX_CONNECTIONS, pool_timeout: float | None = POOL_WAIT
) -> aioredis.Redis:
    """An asyncio client of the master of a Sentinel URL's service.

    The same options as plain URLs get: raw (bytes) replies, no redis-py retries,
    TCP keepalive, at most ``max_connections``, waiting up to ``pool_timeout`` seconds
    for a free one. Closing it (``aclose``) closes the sentinels' connections too.

    Raises:
        ConfigError: the URL is not a valid Sentinel URL.
    """
    client: aioredis.Redis = _master_client(
        url,
        _AsyncSentinelManager,
        AsyncRetry,
        redis_class=_AsyncSentinelClient,
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=pool_timeout,
    )
    return client


def sync_client(
    url: str, *, max_connections: int = MAX_CONNECTIONS, pool_timeout: float | None = POOL_WAIT
) -> redis.Redis:
    """A synchronous client of the master of a Sentinel URL's service, with the options and
    the blocking pool of :func:`async_client` (threads past ``max_connections`` wait up to
    ``pool_timeout`` seconds for a free connection).

    Raises:
        ConfigError: the URL is not a valid Sentinel URL.
    """
    client: redis.Redis = _master_client(
        url,
        _SyncSentinelManager,
        Retry,
        redis_class=_SyncSentinelClient,
        connection_pool_class=_SyncBlockingSentinelPool,
        max_connections=max_connections,
        timeout=pool_timeout,
    )
    return client


def _master_client(url: str, manager: type[Any], retry: type[Any], **pool: Any) -> Any:
    """A client of the master of ``url``'s service, asyncio or blocking as ``manager`` (the
    Sentinel class that asks the sentinels, each once: ``retry`` is redis-py's ``Retry`` of
    the same kind). ``pool``: the client's and pool's classes and limits; its connections
    get the options of every pool streamq makes and the URL's credentials, db and TLS."""
    parsed = SentinelUrl.parse(url)
    sentinel_options = {**parsed._sentinel_options(), "retry": retry(NoBackoff(), 0)}
    sentinels = manager(parsed.sentinels, sentinel_kwargs=sentinel_options)
    return sentinels.master_for(
        parsed.service_name, **pool, **CONNECTION_OPTIONS, **parsed._master_options()
    )
