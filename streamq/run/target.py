"""What ``streamq run`` runs: ``module:attr`` resolved to an App, and stable names per slot."""

from __future__ import annotations

import functools
import importlib
import inspect
import socket
import sys
from pathlib import Path
from typing import Any

from .._queue_args import default_consumer_name
from ..app import App
from ..errors import ConfigError
from ..queue import MessageQueue


def load_target(spec: str, app_dir: str | Path | None = ".") -> App:
    """Import ``module:attr`` (``attr`` may be dotted) from ``app_dir`` (put first on
    ``sys.path``, as ``uvicorn --app-dir`` does) and return it as an App.

    ``attr`` may be a MessageQueue, an App, or a function with no arguments returning one
    of them. Raises ConfigError saying what is wrong with ``spec``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected module:attr (e.g. service:app), got {spec!r}")
    if app_dir is not None:
        path = str(Path(app_dir).resolve())
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise ConfigError(f"cannot import {module_name!r} (from {app_dir}): {e}") from e
        raise ConfigError(f"importing {module_name!r} failed: {_one_line(e)}") from e
    except Exception as e:  # the module's own code failed (a SyntaxError, a bad setting)
        raise ConfigError(f"importing {module_name!r} failed: {_one_line(e)}") from e
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"{spec}: {module_name!r} has no attribute {attr!r}") from None
    return as_app(target, spec)


def as_app(target: Any, spec: str) -> App:
    """A MessageQueue or App as an App; a factory is called first."""
    if isinstance(target, App):
        return target
    if isinstance(target, MessageQueue):
        return App(target, name=spec)
    if _is_factory(target):
        made = _call_factory(target, spec)
        if inspect.isawaitable(made):
            if inspect.iscoroutine(made):
                made.close()
            raise ConfigError(f"{spec}: the factory must be a plain function, not async")
        if isinstance(made, App | MessageQueue):
            return as_app(made, spec)
        raise ConfigError(f"{spec}(): expected it to return a MessageQueue or App, "
                          f"got {_described(made)}")  # fmt: skip
    raise ConfigError(
        f"{spec}: expected a MessageQueue or App (or a function returning one), "
        f"got {_described(target)}"
    )


def _described(value: Any) -> str:
    """What ``value`` is, for someone who named it by mistake: ``the class models.Email``,
    ``the module models``, ``an instance of app.Api``, ``the int 42``."""
    if inspect.ismodule(value):
        return f"the module {value.__name__}"
    if inspect.isclass(value):
        return f"the class {_qualified(value)}"
    if isinstance(value, int | float | str | bytes | bool) or value is None:
        text = repr(value)
        return f"the {type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"
    return f"an instance of {_qualified(type(value))}"


def _qualified(cls: type) -> str:
    module = getattr(cls, "__module__", "")
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in ("builtins", "") else f"{module}.{name}"


def _call_factory(factory: Any, spec: str) -> Any:
    """Call ``factory`` without arguments; one that needs some, or raises, is a ConfigError
    saying so (a traceback of the user's code only at DEBUG, through the cause)."""
    required = [
        name
        for name, p in inspect.signature(factory).parameters.items()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise ConfigError(
            f"{spec}() takes arguments ({', '.join(required)}): streamq run calls a factory "
            "without any"
        )
    try:
        return factory()
    except Exception as e:
        raise ConfigError(f"{spec}() raised {_one_line(e)}") from e


def _is_factory(target: Any) -> bool:
    """A plain function (or a partial of one): an object that is merely callable, such as
    an ASGI app, is not called to find out."""
    return inspect.isfunction(target) or isinstance(target, functools.partial)


def _one_line(error: BaseException) -> str:
    """``error`` as ``Type: message`` on one line (a SyntaxError with its file and line)."""
    if isinstance(error, SyntaxError):
        where = f"{error.filename}:{error.lineno}" if error.filename else f"line {error.lineno}"
        return f"SyntaxError: {error.msg} ({where})"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def assign_slot(app: App, slot: int, name: str | None = None) -> None:
    """Name every consumer of ``app`` for worker ``slot`` (:func:`slot_name`), the same
    after every restart, so a restarted worker recovers its own pending entries first."""
    for mq in app.queues:
        mq.consumer = slot_name(mq, slot, name)


def slot_name(mq: MessageQueue, slot: int, name: str | None = None) -> str:
    """The consumer name of ``mq`` in worker ``slot``: ``<name>-<slot>`` (``streamq run
    --name``), else ``<consumer>-<slot>``, where a queue left with the default
    ``<host>-<pid>`` name becomes ``<host>-<slot>``."""
    if name:
        return f"{name}-{slot}"
    base = socket.gethostname() if mq.consumer == default_consumer_name() else mq.consumer
    return f"{base}-{slot}"


def uses_default_server(app: App) -> bool:
    """Whether a queue of ``app`` has no URL of its own (and so uses the default)."""
    return any(mq._url is None for mq in app.queues)
