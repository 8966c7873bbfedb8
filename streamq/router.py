"""The type -> handler table and typed parsing of ``data``.

The model a handler receives is taken from its annotation: ``Message[Email]`` (or
``list[Message[Email]]`` for a batch handler). An unannotated or ``Message[Any]`` handler
gets the decoded JSON as is.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pydantic_core
from pydantic import BaseModel, TypeAdapter

from .errors import ConfigError, HandlerError
from .message import Message, validate_type_name

Parser = Callable[[bytes], Any]
SingleHandler = Callable[[Message[Any]], Awaitable[None] | None]
BatchHandler = Callable[[list[Message[Any]]], Awaitable[Any] | Any]


@runtime_checkable
class HandlerObject(Protocol):
    """Object form: ``message_type`` plus ``handle`` and/or ``handle_batch``.

    Optional attributes: ``batch_size``, ``batch_timeout``, ``batch_max_wait``.
    """

    message_type: str


@dataclass(frozen=True, slots=True)
class BatchSettings:
    size: int | None
    timeout: float | None
    max_wait: float | None


@dataclass(slots=True)
class Route:
    """How to handle one message type."""

    type_name: str
    parse: Parser
    model: Any
    single: SingleHandler | None = None
    single_is_async: bool = True
    batch: BatchHandler | None = None
    batch_is_async: bool = True
    batch_settings: BatchSettings | None = None


def _parse_json(raw: bytes) -> Any:
    return pydantic_core.from_json(raw)


def parser_for(model: Any) -> Parser:
    """A function bytes -> validated value for ``model`` (raises ValueError subclasses)."""
    if model is Any or model is None:
        return _parse_json
    if isinstance(model, type) and issubclass(model, BaseModel):
        if model.__pydantic_complete__:  # the validator itself: no Python wrapper per message
            return model.__pydantic_validator__.validate_json
        return model.model_validate_json  # forward references: resolved on first use
    return TypeAdapter(model).validate_json


def _first_param_annotation(func: Callable[..., Any]) -> Any:
    try:
        hints = typing.get_type_hints(func)
    except Exception as e:  # unresolved forward references
        raise HandlerError(f"cannot resolve the annotations of {func!r}: {e}") from e
    params = [p for p in inspect.signature(func).parameters.values() if p.name != "self"]
    if not params:
        raise HandlerError(f"handler {func!r} must take the message as its first argument")
    return hints.get(params[0].name, Any)


def _message_model(annotation: Any) -> Any:
    """``Message[X]`` -> X; ``Message`` or no annotation -> Any."""
    if annotation is Message or annotation is Any:
        return Any
    if typing.get_origin(annotation) is Message:
        (model,) = typing.get_args(annotation)
        return model
    raise HandlerError(f"handler parameter must be annotated Message[Model], got {annotation!r}")


def model_of_single(func: Callable[..., Any]) -> Any:
    return _message_model(_first_param_annotation(func))


def model_of_batch(func: Callable[..., Any]) -> Any:
    annotation = _first_param_annotation(func)
    if annotation is Any:
        return Any
    if typing.get_origin(annotation) in (list, Sequence):
        (inner,) = typing.get_args(annotation) or (Any,)
        return _message_model(inner)
    raise HandlerError(f"batch handler must take list[Message[Model]], got {annotation!r}")


def _is_async(func: Callable[..., Any]) -> bool:
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)


class Router:
    """Holds one Route per message type."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._by_bytes: dict[bytes, Route] = {}

    def __contains__(self, type_name: str) -> bool:
        return type_name in self._routes

    def __len__(self) -> int:
        return len(self._routes)

    @property
    def routes(self) -> dict[str, Route]:
        return dict(self._routes)

    def get(self, type_field: bytes) -> Route | None:
        """Fast lookup by the raw ``type`` field."""
        return self._by_bytes.get(type_field)

    @property
    def by_type_field(self) -> Mapping[bytes, Route]:
        """Raw ``type`` field -> route, for loops that look up every entry read."""
        return self._by_bytes

    def _route(self, type_name: str, model: Any) -> Route:
        validate_type_name(type_name)
        route = self._routes.get(type_name)
        if route is None:
            route = Route(type_name=type_name, parse=parser_for(model), model=model)
            self._routes[type_name] = route
            self._by_bytes[type_name.encode()] = route
        elif route.model is not model and model is not Any:
            if route.model is Any:
                route.model, route.parse = model, parser_for(model)
            else:
                raise HandlerError(
                    f"type {type_name!r} has handlers with different models "
                    f"({route.model!r} and {model!r})"
                )
        return route

    def add_single(self, type_name: str, func: SingleHandler) -> None:
        route = self._route(type_name, model_of_single(func))
        if route.single is not None:
            raise HandlerError(f"type {type_name!r} already has a handler ({route.single!r})")
        route.single, route.single_is_async = func, _is_async(func)

    def add_batch(self, type_name: str, func: BatchHandler, settings: BatchSettings) -> None:
        for name, value in (("size", settings.size), ("timeout", settings.timeout)):
            if value is not None and value <= 0:
                raise ConfigError(f"batch_handler {name} must be > 0, got {value!r}")
        route = self._route(type_name, model_of_batch(func))
        if route.batch is not None:
            raise HandlerError(f"type {type_name!r} already has a batch handler")
        route.batch, route.batch_is_async = func, _is_async(func)
        route.batch_settings = settings

    def add_object(self, obj: object) -> None:
        type_name = getattr(obj, "message_type", None)
        if not isinstance(type_name, str):
            raise HandlerError(f"{obj!r} has no 'message_type' string attribute")
        handle, handle_batch = getattr(obj, "handle", None), getattr(obj, "handle_batch", None)
        if handle is None and handle_batch is None:
            raise HandlerError(f"{obj!r} has neither handle() nor handle_batch()")
        if handle is not None:
            self.add_single(type_name, handle)
        if handle_batch is not None:
            settings = BatchSettings(
                size=getattr(obj, "batch_size", None),
                timeout=getattr(obj, "batch_timeout", None),
                max_wait=getattr(obj, "batch_max_wait", None),
            )
            self.add_batch(type_name, handle_batch, settings)
