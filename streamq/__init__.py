"""streamq: typed message handlers over Redis Streams consumer groups."""

from __future__ import annotations

from .app import App
from .config import BatchConfig, CleanupPolicy, ConsumerConfig, RetryPolicy, StartFrom
from .errors import (
    AuthenticationFailedError,
    ConfigError,
    ConsumerError,
    DataLossError,
    GroupNotFoundError,
    HandlerCrashError,
    HandlerError,
    InvalidMessageIdError,
    MessageFormatError,
    MessageNotFoundError,
    NotReplicatedError,
    QueueStateError,
    RedisFailure,
    ServerUnavailableError,
    StreamNotFoundError,
    StreamqError,
)
from .ids import StreamId
from .message import Message
from .publisher import Publisher
from .queue import MessageQueue
from .server.cluster import EmbeddedCluster
from .server.sentinel import EmbeddedSentinel
from .server.single import EmbeddedServer
from .signals import PartialFailure, Reject, Retry
from .topic.admin import ConsumerInfo, GroupInfo, TopicInfo
from .topic.cleanup import CleanupReport
from .topic.deadletter import DeadLetter

__version__ = "0.1.0"

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
)
