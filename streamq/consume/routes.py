"""The type -> handler table and typed parsing of ``data``.

The model a handler receives is given explicitly (``model=Email``) or taken from its
annotation: ``Message[Email]`` (or ``list[Message[Email]]`` for a batch handler). An
unannotated or ``Message[Any]`` handler, or ``model=Any``, gets the decoded JSON as is.

Annotations are strings under ``from __future__ import annotations``; they are resolved
with the handler's own globals plus ``namespace``, the local names of the frame that
registers the handler, so a model defined inside a function (a test, a factory) resolves.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter

from ..errors import ConfigError, HandlerError
from ..message import Message, validate_type_name

Parser = Callable[[bytes], Any]
SingleHandler = Callable[[Message[Any]], Awaitable[None] | None]
BatchHandler = Callable[[list[Message[Any]]], Awaitable[Any] | Any]
Namespace = Mapping[str, Any]


class _Unset:
    """The type of ``_UNSET``: "no model given" (``model=None`` means something else)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()
UNSET: Any = _UNSET  # for callers that pass the default on


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
    middlewares: tuple[Any, ...] = ()  # a Router's own (streamq.Router(middlewares=...))
    # The hot path: the JSON parser of an entry written as plain JSON at version 1 (no
    # enc, ver or kid field); None: every entry goes through the payload reader (``parse``).
    plain: Parser | None = None


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


def _name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def where_defined(func: Callable[..., Any]) -> str:
    """``func``'s name and the file and line that define it (``emails.py:12 welcome``)."""
    code = getattr(inspect.unwrap(getattr(func, "__func__", func)), "__code__", None)
    if code is None:
        return _name(func)
    return f"{code.co_filename}:{code.co_firstlineno} ({_name(func)})"


def _twice(
    type_name: str, kind: str, first: Callable[..., Any], second: Callable[..., Any]
) -> HandlerError:
    return HandlerError(
        f"type {type_name!r} is registered twice ({kind}): at {where_defined(first)} "
        f"and at {where_defined(second)}"
    )


def _any_handler(route: Route) -> Callable[..., Any]:
    """The single handler of ``route``, else its batch handler (one of them is set)."""
    handler = route.single or route.batch
    assert handler is not None  # a route is made with a handler
    return handler


def _checked_parser(func: Callable[..., Any], model: Any) -> Parser:
    """``parser_for(model)``, or HandlerError naming the handler if pydantic cannot
    validate ``model``."""
    if isinstance(model, str):  # pydantic would resolve it in *our* frame: refuse instead
        raise HandlerError(f"handler {_name(func)}: model must be a type, not the string {model!r}")
    try:
        return parser_for(model)
    except Exception as e:  # whatever pydantic raises for a model it cannot build
        # Its first line says what; the rest suggests arbitrary_types_allowed, a model
        # setting that does not apply to a handler's model.
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HandlerError(
            f"handler {_name(func)}: model {model!r} is not a type pydantic can validate "
            f"(a BaseModel, a dataclass, int, list[Model], ...; Any for raw JSON): {first}"
        ) from e


def _first_param_annotation(func: Callable[..., Any], namespace: Namespace | None) -> Any:
    _check_takes_message(func)
    try:
        hints = typing.get_type_hints(func, localns=dict(namespace or {}))
    except Exception as e:  # unresolved forward references (NameError), bad expressions
        raise HandlerError(
            f"cannot resolve the annotations of handler {_name(func)}: {e}; define the model "
            "at module level, register the handler where the model is in scope, or name it "
            "explicitly: handler(..., model=Model)"
        ) from e
    return hints.get(_params(func)[0].name, Any)


def _params(func: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(func).parameters.values() if p.name != "self"]


_POSITIONAL = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL,
)
_STARRED = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _check_takes_message(func: Callable[..., Any]) -> None:
    """A handler is called with the message alone: refuse one that cannot be (no
    positional parameter for it, or another parameter without a default), at
    registration rather than with a TypeError on every delivery."""
    params = _params(func)
    if not params or params[0].kind not in _POSITIONAL:
        raise HandlerError(f"handler {_name(func)} must take the message as its first argument")
    needed = [p.name for p in params[1:] if p.default is p.empty and p.kind not in _STARRED]
    if needed:
        them = "it" if len(needed) == 1 else "them"
        raise HandlerError(
            f"handler {_name(func)}() needs {', '.join(map(repr, needed))} besides the "
            f"message, but streamq calls it with the message only: give {them} a default, "
            f"or bind {them} first (functools.partial(handler, ...))"
        )


def _message_model(func: Callable[..., Any], annotation: Any) -> Any:
    """``Message[X]`` -> X; ``Message`` or no annotation -> Any."""
    if annotation is Message or annotation is Any:
        return Any
    if typing.get_origin(annotation) is Message:
        (model,) = typing.get_args(annotation)
        return model
    raise HandlerError(
        f"handler {_name(func)}: the message parameter must be annotated Message[Model], "
        f"got {annotation!r}"
    )


def model_of_single(func: Callable[..., Any], namespace: Namespace | None = None) -> Any:
    """The model of a single handler's ``Message[Model]`` parameter (Any if unannotated)."""
    return _message_model(func, _first_param_annotation(func, namespace))


def model_of_batch(func: Callable[..., Any], namespace: Namespace | None = None) -> Any:
    """The model of a batch handler's ``list[Message[Model]]`` parameter."""
    annotation = _first_param_annotation(func, namespace)
    if annotation is Any:
        return Any
    if typing.get_origin(annotation) in (list, Sequence):
        (inner,) = typing.get_args(annotation) or (Any,)
        return _message_model(func, inner)
    raise HandlerError(
        f"batch handler {_name(func)} must take list[Message[Model]], got {annotation!r}"
    )


def _chosen_model(
    func: Callable[..., Any], model: Any, namespace: Namespace | None,
    from_annotation: Callable[[Callable[..., Any], Namespace | None], Any],
) -> Any:  # fmt: skip
    """``model=`` if given (the annotations are then not looked at), else the annotation's."""
    if model is _UNSET:
        return from_annotation(func, namespace)
    if model is None:
        raise HandlerError(
            f"handler {_name(func)}: model=None would accept only JSON null; "
            "use model=Any for raw JSON, or leave model out to use the annotation"
        )
    _check_takes_message(func)
    return model


def _is_async(func: Callable[..., Any]) -> bool:
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)


class Routes:
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

    def model_of(self, type_name: str) -> Any | None:
        """The model of the handler of ``type_name`` in this process, None if it has none."""
        route = self._routes.get(type_name)
        return None if route is None else route.model

    def get(self, type_field: bytes) -> Route | None:
        """Fast lookup by the raw ``type`` field."""
        return self._by_bytes.get(type_field)

    @property
    def by_name(self) -> Mapping[str, Route]:
        """Type name -> route, live (for a lookup per publish: no copy)."""
        return self._routes

    @property
    def by_type_field(self) -> Mapping[bytes, Route]:
        """Raw ``type`` field -> route, for loops that look up every entry read."""
        return self._by_bytes

    def _route(self, type_name: str, func: Callable[..., Any], model: Any) -> Route:
        validate_type_name(type_name)
        route = self._routes.get(type_name)
        if route is None:
            route = Route(type_name=type_name, parse=_checked_parser(func, model), model=model)
            self._routes[type_name] = route
            self._by_bytes[type_name.encode()] = route
        elif route.model is not model and model is not Any:
            if route.model is Any:
                route.model, route.parse = model, _checked_parser(func, model)
            else:
                raise HandlerError(
                    f"type {type_name!r} has handlers with different models "
                    f"({route.model!r} and {model!r})"
                )
        return route

    def add_single(
        self, type_name: str, func: SingleHandler, *, model: Any = _UNSET,
        namespace: Namespace | None = None,
    ) -> None:  # fmt: skip
        """Route ``type_name`` to ``func``, one message per call.

        ``model``: the type ``data`` is validated into (``Any``: the decoded JSON); when
        left out, taken from the annotation ``Message[Model]`` of the first parameter,
        resolved with ``namespace`` (the local names where the handler is registered).
        Raises HandlerError for an unusable handler or model.
        """
        model = _chosen_model(func, model, namespace, model_of_single)
        route = self._route(type_name, func, model)
        if route.single is not None:
            raise _twice(type_name, "handler", route.single, func)
        route.single, route.single_is_async = func, _is_async(func)

    def add_batch(
        self, type_name: str, func: BatchHandler, settings: BatchSettings, *,
        model: Any = _UNSET, namespace: Namespace | None = None,
    ) -> None:  # fmt: skip
        """Route ``type_name`` to ``func``, a list of messages per call (``model`` and
        ``namespace`` as for :meth:`add_single`; the annotation is ``list[Message[Model]]``)."""
        for name, value in (("size", settings.size), ("timeout", settings.timeout)):
            if value is not None and value <= 0:
                raise ConfigError(f"batch_handler {name} must be > 0, got {value!r}")
        model = _chosen_model(func, model, namespace, model_of_batch)
        route = self._route(type_name, func, model)
        if route.batch is not None:
            raise _twice(type_name, "batch handler", route.batch, func)
        route.batch, route.batch_is_async = func, _is_async(func)
        route.batch_settings = settings

    def adopt(self, route: Route) -> None:
        """Add the handlers of ``route`` (made by another table: a :class:`streamq.Router`
        being included, or a copy with middlewares) as they are: model, parser, settings
        and middlewares kept. A handler of a kind the type has already is an error."""
        mine = self._routes.get(route.type_name)
        if mine is None:
            self._routes[route.type_name] = mine = dataclasses.replace(route)
            self._by_bytes[route.type_name.encode()] = mine
            return
        if route.single is not None and mine.single is not None:
            raise _twice(route.type_name, "handler", mine.single, route.single)
        if route.batch is not None and mine.batch is not None:
            raise _twice(route.type_name, "batch handler", mine.batch, route.batch)
        both = f"at {where_defined(_any_handler(mine))} and at {where_defined(_any_handler(route))}"
        if mine.model is not route.model:
            raise HandlerError(
                f"type {route.type_name!r} has handlers with different models "
                f"({mine.model!r} and {route.model!r}): {both}"
            )
        if mine.middlewares != route.middlewares:
            raise HandlerError(
                f"type {route.type_name!r} has handlers in routers with different "
                f"middlewares: {both}"
            )
        if route.single is not None:
            mine.single, mine.single_is_async = route.single, route.single_is_async
        if route.batch is not None:
            mine.batch, mine.batch_is_async = route.batch, route.batch_is_async
            mine.batch_settings = route.batch_settings

    def add_object(self, obj: object, *, namespace: Namespace | None = None) -> None:
        """Route ``obj.message_type`` to ``obj.handle`` and/or ``obj.handle_batch``; their
        annotations are resolved with ``namespace`` as for :meth:`add_single`."""
        type_name = getattr(obj, "message_type", None)
        if not isinstance(type_name, str):
            raise HandlerError(f"{obj!r} has no 'message_type' string attribute")
        handle, handle_batch = getattr(obj, "handle", None), getattr(obj, "handle_batch", None)
        if handle is None and handle_batch is None:
            raise HandlerError(f"{obj!r} has neither handle() nor handle_batch()")
        if handle is not None:
            self.add_single(type_name, handle, namespace=namespace)
        if handle_batch is not None:
            settings = BatchSettings(
                size=getattr(obj, "batch_size", None),
                timeout=getattr(obj, "batch_timeout", None),
                max_wait=getattr(obj, "batch_max_wait", None),
            )
            self.add_batch(type_name, handle_batch, settings, namespace=namespace)
