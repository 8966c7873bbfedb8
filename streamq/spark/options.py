"""Spark options (strings) parsed once into typed objects, with clear errors."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._ids import StreamId
from ..config import ENV_URL
from ..errors import ConfigError, InvalidMessageIdError
from ..message import validate_type_name
from ..payload.compression import check_compression
from ..payload.encoding import Compression
from ..payload.keyring import Keyring
from ..topic.partitions import validate_partitions
from ..wire.keys import validate_stream_name


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name!r} must be true or false, got {raw!r}")


def _int(
    options: Mapping[str, str], name: str, default: int | None, minimum: int = 1
) -> int | None:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def _url(options: Mapping[str, str]) -> str:
    url = options.get("url") or os.environ.get(ENV_URL)
    if not url:
        raise ConfigError(
            f"the streamq Spark source needs option('url', 'redis://...') or ${ENV_URL} "
            "(executors connect to it, so the embedded server is not started implicitly)"
        )
    return url


def _stream(options: Mapping[str, str]) -> str:
    stream = options.get("stream")
    if not stream:
        raise ConfigError("option 'stream' is required, e.g. .option('stream', 'task-stream')")
    return validate_stream_name(stream, "option 'stream'")  # braces: as MessageQueue refuses


def load_model(path: str) -> Any:
    """Import ``package.module:Class`` (``Class`` may be dotted: ``Outer.Inner``)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"option 'model' must be 'package.module:Class', got {path!r}")
    try:
        found: Any = importlib.import_module(module_name)
        for name in attr.split("."):
            found = getattr(found, name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot import model {path!r}: {e}") from e
    return found


_SHIP_HINT = (
    "the executors import models by name, so the module must be importable there too: "
    "installed in their environment (e.g. a packed venv), or shipped with --py-files / "
    "spark.addArtifacts(..., pyfile=True)"
)


def model_path(type_name: str, model: object) -> str:
    """``module:qualname`` of ``model``, checked importable now, on the driver.

    Raises ConfigError, naming the type, the model and the fix, for a model the executors
    could not import by that name: defined in ``__main__`` or inside a function, in a
    module that does not import, or a name that imports another object.
    """
    if not isinstance(model, type):
        raise ConfigError(
            f"models[{type_name!r}] must be a pydantic model class, got {model!r} "
            "(for a 'module:Class' string use .option('model', ...))"
        )
    path = f"{model.__module__}:{model.__qualname__}"
    where = f"models[{type_name!r}] = {path}"
    if model.__module__ == "__main__":
        raise ConfigError(
            f"{where} is defined in the script Spark runs (__main__), which the executors "
            f"cannot import: move it into a module and import it from there; {_SHIP_HINT}"
        )
    if "<locals>" in model.__qualname__:
        raise ConfigError(
            f"{where} is defined inside a function, which cannot be imported by name: "
            f"define it at module level; {_SHIP_HINT}"
        )
    try:
        found = load_model(path)
    except ConfigError as e:
        raise ConfigError(f"{where} cannot be imported ({e.__cause__}); {_SHIP_HINT}") from e
    if found is not model:
        raise ConfigError(
            f"{where}: importing that name gives another object than the model given "
            "(redefined, or created dynamically?): pass the class its module defines"
        )
    return path


@dataclass(frozen=True)
class ReadOptions:
    url: str
    stream: str
    type: str | None
    model_path: str | None
    starting: str  # "earliest", "latest" or an entry ID
    ending: str  # batch reads: "latest" or an entry ID
    max_records_per_batch: int | None
    partitions: int
    fail_on_data_loss: bool
    group: str | None
    topic_partitions: int | None = None  # the topic's partition count, if the job says it
    # the environment variable holding the keyring (Keyring.from_env), read where rows are
    # read: keys travel neither in the options (shown in plans and UIs) nor in the pickled
    # reader
    keyring_env: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], models: Mapping[str, str]) -> ReadOptions:
        type_name = options.get("type")
        if type_name is not None:
            validate_type_name(type_name)
        model_path = options.get("model") or (models.get(type_name) if type_name else None)
        if model_path is not None and type_name is None:
            raise ConfigError("option 'model' needs option 'type': typed columns are per type")
        return cls(
            url=_url(options),
            stream=_stream(options),
            type=type_name,
            model_path=model_path,
            starting=_position(options.get("startingOffsets", "earliest"), "startingOffsets"),
            ending=_position(options.get("endingOffsets", "latest"), "endingOffsets"),
            max_records_per_batch=_int(options, "maxRecordsPerBatch", None),
            partitions=_int(options, "partitions", 1) or 1,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            group=options.get("group") or None,
            topic_partitions=_topic_partitions(options),
            keyring_env=_keyring_env(options),
        )

    def model(self) -> Any:
        return load_model(self.model_path) if self.model_path else None

    def keyring(self) -> Keyring | None:
        """The keyring of option ``keyringEnv`` (None without it), read from this
        process's environment: an executor's, where rows are read."""
        return _keyring(self.keyring_env, "decrypt")


def _keyring(name: str | None, does: str) -> Keyring | None:
    """The keyring the environment variable ``name`` holds (None: no name), read in this
    process: the executors' environment, where rows are read and written."""
    if name is None:
        return None
    try:
        return Keyring.from_env(name)
    except ConfigError as e:
        raise ConfigError(f"option 'keyringEnv': {e} (on the executors, which {does}: "
                          "set it in their environment)") from None  # fmt: skip


def _keyring_env(options: Mapping[str, str]) -> str | None:
    name = options.get("keyringEnv")
    if name is None:
        return None
    if not name or not name.replace("_", "").isalnum():
        raise ConfigError(
            "option 'keyringEnv' takes the name of the environment variable that holds the "
            "keyring (letters, digits, _), and this is not one (not shown: never give the "
            "keys themselves as an option)"
        )
    return name


def _position(raw: str, name: str) -> str:
    if raw in ("earliest", "latest"):
        return raw
    try:
        return str(StreamId.parse(raw))
    except InvalidMessageIdError as e:
        raise ConfigError(f"option {name!r}: use 'earliest', 'latest' or an entry ID ({e})") from e


@dataclass(frozen=True)
class WriteOptions:
    url: str
    stream: str
    type: str | None
    type_column: str
    data_column: str | None
    meta_column: str
    chunk: int
    key_column: str | None = None  # rows with the same key go to the same partition
    topic_partitions: int | None = None
    idempotent: str = "auto"  # "auto", "true", "false": see streamq.spark.idempotent
    compression: Compression | None = None  # as MessageQueue(compression=...)
    compress_over: int = 1024
    # the level of every row, and the integer column of each row's (see levels.py)
    priority: int | None = None
    priority_column: str | None = None
    # the environment variable holding the keyring that encrypts each row's data (as
    # ReadOptions.keyring_env), and the meta keys whose values it encrypts too
    keyring_env: str | None = None
    encrypt_meta: tuple[str, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        type_name = options.get("type")
        if type_name is not None:
            validate_type_name(type_name)
        return cls(
            url=_url(options),
            stream=_stream(options),
            type=type_name,
            type_column=options.get("typeColumn", "type"),
            data_column=options.get("dataColumn"),
            meta_column=options.get("metaColumn", "meta"),
            chunk=_int(options, "chunk", 1000) or 1000,
            key_column=options.get("keyColumn") or None,
            topic_partitions=_topic_partitions(options),
            idempotent=_idempotent(options),
            compression=_compression(options),
            compress_over=_int(options, "compressOver", 1024, minimum=0) or 0,
            priority=_priority(options),
            priority_column=options.get("priorityColumn") or None,
            keyring_env=_keyring_env(options),
            encrypt_meta=_encrypt_meta(options),
        )

    def keyring(self) -> Keyring | None:
        """The keyring of option ``keyringEnv`` (None without it), read from this
        process's environment: an executor's, where rows are written."""
        return _keyring(self.keyring_env, "encrypt")


def _encrypt_meta(options: Mapping[str, str]) -> tuple[str, ...]:
    """Option ``encryptMeta``: meta keys, comma-separated, whose values are encrypted (as
    ``MessageQueue(encrypt_meta=...)``); it needs ``keyringEnv``."""
    names = tuple(n.strip() for n in options.get("encryptMeta", "").split(",") if n.strip())
    if names and options.get("keyringEnv") is None:
        raise ConfigError("option 'encryptMeta' needs option 'keyringEnv' (with what key else?)")
    return names


def _priority(options: Mapping[str, str]) -> int | None:
    """Option ``priority``: an integer (its range is the topic's, checked once the topic
    is known: :func:`streamq.spark.levels.check_levels`)."""
    raw = options.get("priority")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"option 'priority' must be an integer (0 the highest level), got {raw!r}"
        ) from None


def _compression(options: Mapping[str, str]) -> Compression | None:
    """Option ``compression``: ``zstd`` or ``gzip`` (checked as a queue checks it, the
    package zstd needs included), or none."""
    raw = options.get("compression")
    if raw is None or raw.lower() == "none":
        return None
    try:
        return check_compression(raw, 0)  # type: ignore[no-any-return]
    except ConfigError as e:
        raise ConfigError(f"option 'compression': {e}") from None


def _idempotent(options: Mapping[str, str]) -> str:
    """Option ``idempotent``: ``auto`` (default), or true/false as :func:`_bool` reads them."""
    if options.get("idempotent", "auto").lower() == "auto":
        return "auto"
    return "true" if _bool(options, "idempotent", True) else "false"


def _topic_partitions(options: Mapping[str, str]) -> int | None:
    """Option ``topicPartitions``: the topic's partition count (checked against its record,
    recorded if absent). Not ``partitions``, which on reads is the Spark tasks per batch."""
    count = _int(options, "topicPartitions", None)
    if count is None:
        return None
    try:
        return validate_partitions(count)
    except ConfigError as e:
        raise ConfigError(f"option 'topicPartitions': {e}") from None
