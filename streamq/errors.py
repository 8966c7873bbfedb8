"""The streamq exception tree.

Every error streamq raises derives from :class:`StreamqError`::

    StreamqError
    ├── ConfigError (ValueError)          bad arguments or contradictory options
    │   ├── HandlerError                  a handler registered in an unusable form, or twice
    │   └── ConsumerNameTakenError        another live process consumes under this name
    ├── MessageFormatError (ValueError)   an entry or payload that does not fit wire format v1
    │   └── PayloadError                  an entry's ``enc``/``kid``/``ver`` cannot be decoded
    │       └── NewerVersionError         an entry of a newer schema version than handled here
    ├── InvalidMessageIdError (ValueError)   a stream entry ID that is not ``ms-seq``
    ├── MessageNotFoundError (LookupError)   an ID that is not in the stream
    ├── QueueStateError (RuntimeError)    an operation the queue's state does not allow
    ├── ConsumerError                     the consumer stopped on an error it cannot recover
    ├── DataLossError                     entries trimmed before a pipeline read them
    ├── RequestTimeout (TimeoutError)     no reply to ``mq.request`` within its timeout
    ├── RemoteError                       the handler of a request failed past its limit
    ├── HandlerCrashError                 a handler raised a BaseException streamq did not
    │                                     ask for (a foreign CancelledError, SystemExit)
    ├── StaleFencingTokenError            a sink refused the write of a partition's former
    │                                     owner (ordered mode; :mod:`streamq.effects`)
    └── RedisFailure                      a Redis reply translated at the boundary
        ├── ServerUnavailableError (ConnectionError)
        ├── AuthenticationFailedError     the server refused the URL's credentials
        ├── PermissionDeniedError         the Redis user may not run a command (``NOPERM``)
        ├── NotReplicatedError            a durable publish no replica confirmed
        ├── StreamNotFoundError (LookupError)
        ├── GroupNotFoundError (LookupError)
        ├── GroupExistsError              the group to create exists (``BUSYGROUP``)
        ├── UnknownCommandError           the server lacks the command (older Redis, Valkey)
        └── WrongTypeError                a key holds another type than the command's
                                          (``WRONGTYPE``)

Handler *signals* (``Retry``, ``Reject``, ``PartialFailure``, ``Throttle``) are not errors
and live in :mod:`streamq.signals`.
"""

from __future__ import annotations


class StreamqError(Exception):
    """Root of every error raised by streamq."""


class ConfigError(StreamqError, ValueError):
    """A configuration value is invalid; the message names the argument and the fix."""


class MessageFormatError(StreamqError, ValueError):
    """An entry or payload does not follow wire format v1, or does not fit its model (data
    given a typed publisher, a request's reply and its ``reply_model``)."""


class PayloadError(MessageFormatError):
    """An entry's payload cannot be decoded: an unknown ``enc``, damaged compressed data,
    an unknown key ID or a failed authentication tag, a ``ver`` that is not a positive
    integer, an upcast that raises or returns what the model refuses.

    ``version``: the entry's schema version (None when its ``ver`` is unreadable);
    ``step``: the step that failed (``"enc"``, ``"base64"``, ``"zstd"``, ``"gzip"``,
    ``"aesgcm"``, ``"ver"``, ``"upcast 1->2"``, ``"validation"``)."""

    def __init__(self, message: str, *, version: int | None, step: str) -> None:
        super().__init__(message)
        self.version, self.step = version, step


class NewerVersionError(PayloadError):
    """An entry's schema version is newer than the handler here knows: it waits for a
    consumer that knows it, or is dead-lettered (``on_newer_version``)."""


class InvalidMessageIdError(StreamqError, ValueError):
    """A stream entry ID is not of the form ``<ms>-<seq>``."""


class MessageNotFoundError(StreamqError, LookupError):
    """The entry ID does not exist in the stream."""


class QueueStateError(StreamqError, RuntimeError):
    """The queue is not in a state that allows this operation (e.g. reopening a closed queue)."""


class HandlerError(ConfigError):
    """A handler was registered in a form streamq cannot call, or a type twice."""


class ConsumerNameTakenError(ConfigError):
    """Another live process consumes in this group under this consumer name.

    ``consumer``, ``group`` and ``stream`` name it; the message says how to choose another
    name."""

    def __init__(self, message: str, *, consumer: str, group: str, stream: str) -> None:
        super().__init__(message)
        self.consumer, self.group, self.stream = consumer, group, stream


class ConsumerError(StreamqError):
    """A running consumer stopped on an error it cannot recover from (``stop_reason``
    'error'); raised by ``run()``."""


class DataLossError(StreamqError):
    """Entries were removed from the stream before a pipeline (Spark) read them."""


class RequestTimeout(StreamqError, TimeoutError):
    """``mq.request(...)`` got no reply within its ``timeout`` (the request may still be
    handled later: its reply is then dropped)."""


class RemoteError(StreamqError):
    """The handler of a ``mq.request(...)`` failed past its delivery limit (or rejected
    it): ``reason`` is the dead letter's reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HandlerCrashError(StreamqError):
    """A handler raised a ``BaseException`` that is not streamq's own cancellation (e.g. a
    ``CancelledError`` from a future cancelled elsewhere); recorded as a failure, with the
    original as ``__cause__``."""


class StaleFencingTokenError(StreamqError):
    """An effects sink (:func:`streamq.effects.postgres.once`) refused a write: the
    message's fencing token is older than the last one the sink saw for its partition, so
    another consumer owns the partition now. Raised in the handler, before any effect is
    applied: the handler fails, the entry is not acked by this stale owner, and the new
    owner handles it. ``token`` is the message's, ``latest`` the newer one the sink holds,
    ``scope`` names the partition (``"<stream>/<group>/<partition>"``)."""

    def __init__(self, message: str, *, token: int, latest: int, scope: str) -> None:
        super().__init__(message)
        self.token, self.latest, self.scope = token, latest, scope


class RedisFailure(StreamqError):
    """A Redis error, translated once at the boundary."""


class ServerUnavailableError(RedisFailure, ConnectionError):
    """The Redis server cannot be reached."""


class AuthenticationFailedError(RedisFailure):
    """The server refused the credentials (user, password) of the URL: a configuration
    error, not an outage, so nothing retries it."""


# Errors that no retry or restart mends (the configuration must change), said in one line:
# their message says all, a traceback would add nothing.
CONFIGURATION_ERRORS: tuple[type[Exception], ...] = (ConfigError, AuthenticationFailedError)


class PermissionDeniedError(RedisFailure):
    """The server's ACL does not let the URL's user run a command or touch a key
    (``NOPERM``): a configuration error, not an outage, so nothing retries it."""


class NotReplicatedError(RedisFailure):
    """A durable publish (``replicas=``) added its entry, but fewer replicas than asked
    confirmed it within the timeout: the entry is in the stream (``entry_id``), and a
    failover before it replicates could still lose it."""

    def __init__(self, message: str, *, entry_id: str, replicas: int) -> None:
        super().__init__(message)
        self.entry_id, self.replicas = entry_id, replicas


class StreamNotFoundError(RedisFailure, LookupError):
    """The stream key does not exist."""


class GroupNotFoundError(RedisFailure, LookupError):
    """The consumer group (or its stream) does not exist (Redis ``NOGROUP``)."""


class GroupExistsError(RedisFailure):
    """The consumer group to create already exists (Redis ``BUSYGROUP``)."""


class UnknownCommandError(RedisFailure):
    """The server does not know the command (a newer one, on an older Redis or Valkey)."""


class WrongTypeError(RedisFailure):
    """A key holds another type than the command works on (Redis ``WRONGTYPE``): one of
    streamq's own keys written by something else, or a stream name taken by another key."""
