"""streamq: typed message handlers over Redis Streams consumer groups.

The embedded servers and :class:`App` are imported when first used (``streamq.App``,
``from streamq import EmbeddedServer``): a plain consumer or publisher does not load them.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._version import __version__ as __version__
from .config import BatchConfig, CleanupPolicy, ConsumerConfig, RetryPolicy, StartFrom
from .errors import (
    AuthenticationFailedError,
    ConfigError,
    ConsumerError,
    DataLossError,
    GroupExistsError,
    GroupNotFoundError,
    HandlerCrashError,
    HandlerError,
    InvalidMessageIdError,
    MessageFormatError,
    MessageNotFoundError,
    NotReplicatedError,
    PermissionDeniedError,
    QueueStateError,
    RedisFailure,
    ServerUnavailableError,
    StreamNotFoundError,
    StreamqError,
    UnknownCommandError,
)
from .ids import StreamId
from .message import Message
from .publish.blocking import Publisher
from .queue import MessageQueue
from .signals import PartialFailure, Reject, Retry
from .topic.admin import ConsumerInfo, GroupInfo, TopicInfo
from .topic.cleanup import CleanupReport
from .topic.deadletter import DeadLetter

if _typing.TYPE_CHECKING:
    from .app import App
    from .server.cluster import EmbeddedCluster
    from .server.sentinel import EmbeddedSentinel
    from .server.single import EmbeddedServer


_LAZY = {
    "App": ".app",
    "EmbeddedCluster": ".server.cluster",
    "EmbeddedSentinel": ".server.sentinel",
    "EmbeddedServer": ".server.single",
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
    "DataLossError",
    "DeadLetter",
    "EmbeddedCluster",
    "EmbeddedSentinel",
    "EmbeddedServer",
    "GroupExistsError",
    "GroupInfo",
    "GroupNotFoundError",
    "HandlerCrashError",
    "HandlerError",
    "InvalidMessageIdError",
    "Message",
    "MessageFormatError",
    "MessageNotFoundError",
    "MessageQueue",
    "NotReplicatedError",
    "PartialFailure",
    "PermissionDeniedError",
    "Publisher",
    "QueueStateError",
    "RedisFailure",
    "Reject",
    "Retry",
    "RetryPolicy",
    "ServerUnavailableError",
    "StartFrom",
    "StreamId",
    "StreamNotFoundError",
    "StreamqError",
    "TopicInfo",
    "UnknownCommandError",
)
