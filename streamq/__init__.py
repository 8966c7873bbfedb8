"""streamq: typed message handlers over Redis Streams consumer groups.

The embedded servers, :class:`App`, the blocking :class:`Publisher`, :class:`Keyring`,
:class:`RateLimit` and :class:`Transaction` are imported when first used (``streamq.App``,
``from streamq import EmbeddedServer``): a process that does not use them (an asyncio
consumer without encryption, rate limits or transactions, say) does not load them.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._ids import StreamId
from ._router import Router
from ._version import __version__ as __version__
from .config import BatchConfig, CleanupPolicy, ConsumerConfig, RetryPolicy, StartFrom
from .errors import (
    AuthenticationFailedError,
    ConfigError,
    ConsumerError,
    ConsumerNameTakenError,
    DataLossError,
    GroupExistsError,
    GroupNotFoundError,
    HandlerCrashError,
    HandlerError,
    InvalidMessageIdError,
    MessageFormatError,
    MessageNotFoundError,
    NewerVersionError,
    NotReplicatedError,
    PayloadError,
    PermissionDeniedError,
    QueueStateError,
    RedisFailure,
    RemoteError,
    RequestTimeout,
    ServerUnavailableError,
    StaleFencingTokenError,
    StreamNotFoundError,
    StreamqError,
    UnknownCommandError,
    WrongTypeError,
)
from .flow.waiting import GroupWaiting
from .message import Message
from .publish.scheduling import ScheduledId, ScheduledMessage
from .publish.typed import TypedPublisher
from .queue import MessageQueue
from .signals import PartialFailure, Reject, Retry, Throttle
from .topic.admin import ConsumerInfo, GroupInfo, TopicInfo
from .topic.cleanup import CleanupReport
from .topic.deadletter import DeadLetter
from .topic.halted import HaltedKey
from .wire.records import WaitingReport

if _typing.TYPE_CHECKING:
    from ._transaction import Transaction
    from .app import App
    from .flow.rate import RateLimit
    from .payload.keyring import Keyring
    from .publish.blocking import Publisher
    from .server.cluster import EmbeddedCluster
    from .server.sentinel import EmbeddedSentinel
    from .server.single import EmbeddedServer


_LAZY = {  # not loaded by a process that does not use them (memory of a running consumer)
    "App": ".app",
    "Publisher": ".publish.blocking",  # the blocking publisher, its threads' coalescing
    "EmbeddedCluster": ".server.cluster",
    "EmbeddedSentinel": ".server.sentinel",
    "EmbeddedServer": ".server.single",
    "Keyring": ".payload.keyring",  # only a queue that encrypts (or reads encrypted) uses it
    "RateLimit": ".flow.rate",  # only a queue with rate limits uses it
    "Transaction": "._transaction",  # made by Message.transaction, loaded with it
}


def __getattr__(name: str) -> object:
    """The names of :data:`_LAZY`, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamq' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = (
    "App",
    "AuthenticationFailedError",
    "BatchConfig",
    "CleanupPolicy",
    "CleanupReport",
    "ConfigError",
    "ConsumerConfig",
    "ConsumerError",
    "ConsumerInfo",
    "ConsumerNameTakenError",
    "DataLossError",
    "DeadLetter",
    "EmbeddedCluster",
    "EmbeddedSentinel",
    "EmbeddedServer",
    "GroupExistsError",
    "GroupInfo",
    "GroupNotFoundError",
    "GroupWaiting",
    "HaltedKey",
    "HandlerCrashError",
    "HandlerError",
    "InvalidMessageIdError",
    "Keyring",
    "Message",
    "MessageFormatError",
    "MessageNotFoundError",
    "MessageQueue",
    "NewerVersionError",
    "NotReplicatedError",
    "PartialFailure",
    "PayloadError",
    "PermissionDeniedError",
    "Publisher",
    "QueueStateError",
    "RateLimit",
    "RedisFailure",
    "Reject",
    "RemoteError",
    "RequestTimeout",
    "Retry",
    "RetryPolicy",
    "Router",
    "ScheduledId",
    "ScheduledMessage",
    "ServerUnavailableError",
    "StaleFencingTokenError",
    "StartFrom",
    "StreamId",
    "StreamNotFoundError",
    "StreamqError",
    "Throttle",
    "TopicInfo",
    "Transaction",
    "TypedPublisher",
    "UnknownCommandError",
    "WaitingReport",
    "WrongTypeError",
)
