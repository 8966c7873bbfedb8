"""Handler registration: models from annotations that name local classes (this module uses
``from __future__ import annotations``, so every annotation is a string), explicit models,
and wrong models refused with the handler's name."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from streamq import HandlerError, Message
from streamq.consume.routes import BatchSettings, Routes
from tests.helpers.queues import QueueFactory
from tests.helpers.waiting import wait_for

SETTINGS = BatchSettings(size=10, timeout=0.1, max_wait=None)


class Global(BaseModel):
    n: int


def local_model() -> type[BaseModel]:
    class Ping(BaseModel):
        n: int

    return Ping


# -- annotations resolved with the registering frame's names -------------------------


def test_single_handler_with_a_local_model_resolves_with_the_namespace() -> None:
    class Ping(BaseModel):
        n: int

    async def handle(msg: Message[Ping]) -> None: ...

    router = Routes()
    router.add_single("ping", handle, namespace=locals())
    route = router.routes["ping"]
    assert route.model is Ping
    assert route.parse(b'{"n": 3}') == Ping(n=3)


def test_batch_handler_with_a_local_model_resolves_with_the_namespace() -> None:
    class Ping(BaseModel):
        n: int

    def handle(msgs: list[Message[Ping]]) -> None: ...

    router = Routes()
    router.add_batch("ping", handle, SETTINGS, namespace=locals())
    assert router.routes["ping"].model is Ping


def test_a_local_alias_of_message_resolves_too() -> None:
    from streamq import Message as Envelope

    async def handle(msg: Envelope[Global]) -> None: ...

    router = Routes()
    router.add_single("g", handle, namespace=locals())
    assert router.routes["g"].model is Global


def test_handler_object_with_local_model_resolves_with_the_namespace() -> None:
    class Ping(BaseModel):
        n: int

    class PingHandler:
        message_type = "ping"

        async def handle(self, msg: Message[Ping]) -> None: ...

        async def handle_batch(self, msgs: list[Message[Ping]]) -> None: ...

    router = Routes()
    router.add_object(PingHandler(), namespace=locals())
    route = router.routes["ping"]
    assert route.model is Ping and route.single is not None and route.batch is not None


def test_module_level_names_still_resolve_without_a_namespace() -> None:
    async def handle(msg: Message[Global]) -> None: ...

    router = Routes()
    router.add_single("g", handle)
    assert router.routes["g"].model is Global


def test_unresolvable_annotation_names_the_handler_and_the_fix() -> None:
    class Ping(BaseModel):
        n: int

    async def handle(msg: Message[Ping]) -> None: ...

    with pytest.raises(HandlerError) as caught:
        Routes().add_single("ping", handle)  # no namespace: 'Ping' is nowhere to be found
    text = str(caught.value)
    assert "handle" in text and "'Ping' is not defined" in text and "model=" in text


# -- explicit models ------------------------------------------------------------------


def test_explicit_model_wins_and_annotations_are_not_resolved() -> None:
    Ping = local_model()

    async def handle(msg: Message[Unknowable]) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    router = Routes()
    router.add_single("ping", handle, model=Ping)
    assert router.routes["ping"].model is Ping


def test_explicit_model_for_a_batch_handler() -> None:
    Ping = local_model()

    def handle(msgs):  # type: ignore[no-untyped-def]  # unannotated: the model says it all
        pass

    router = Routes()
    router.add_batch("ping", handle, SETTINGS, model=Ping)
    assert router.routes["ping"].model is Ping


def test_explicit_any_means_raw_json() -> None:
    async def handle(msg: Message[Global]) -> None: ...

    router = Routes()
    router.add_single("g", handle, model=Any)
    route = router.routes["g"]
    assert route.model is Any and route.parse(b'{"n": "not an int"}') == {"n": "not an int"}


def test_explicit_model_can_be_any_type_pydantic_validates() -> None:
    async def handle(msg: Message[Any]) -> None: ...

    router = Routes()
    router.add_single("nums", handle, model=list[int])
    assert router.routes["nums"].parse(b"[1, 2]") == [1, 2]


def test_explicit_none_is_not_untyped() -> None:
    async def handle(msg: Message[Global]) -> None: ...

    with pytest.raises(HandlerError, match="model=Any"):
        Routes().add_single("g", handle, model=None)


@pytest.mark.parametrize("bad", [42, "Global", Global(n=1), object()])
def test_wrong_model_is_refused_naming_the_handler(bad: Any) -> None:
    async def handle_global(msg: Message[Any]) -> None: ...

    async def handle_globals(msgs: list[Message[Any]]) -> None: ...

    with pytest.raises(HandlerError, match="handle_global"):
        Routes().add_single("g", handle_global, model=bad)
    with pytest.raises(HandlerError, match="handle_globals"):
        Routes().add_batch("g", handle_globals, SETTINGS, model=bad)


def test_wrong_model_from_an_annotation_is_refused_naming_the_handler() -> None:
    class NotAModel:
        pass

    async def handle_odd(msg: Message[NotAModel]) -> None: ...

    with pytest.raises(HandlerError, match="handle_odd"):
        Routes().add_single("odd", handle_odd, namespace=locals())


def test_explicit_model_disagreeing_with_the_other_handler_is_refused() -> None:
    Ping = local_model()

    async def one(msg: Message[Global]) -> None: ...

    def many(msgs: list[Message[Global]]) -> None: ...

    router = Routes()
    router.add_single("g", one)
    with pytest.raises(HandlerError, match="different models"):
        router.add_batch("g", many, SETTINGS, model=Ping)


def test_a_type_in_two_routers_with_different_middlewares_names_both_places() -> None:
    """Two routers (one with middlewares) each with a handler of one type: the error says
    the type is registered twice, where; a batch handler beside it says where both are."""
    from streamq import MessageQueue, Router

    async def passing(msg: Message[Any], call_next: Any) -> Any:
        return await call_next(msg)

    async def one(msg: Message[Global]) -> None: ...

    async def two(msg: Message[Global]) -> None: ...

    def many(msgs: list[Message[Global]]) -> None: ...

    first, second = Router(middlewares=[passing]), Router()
    first.handler("t")(one)
    second.handler("t")(two)
    mq = MessageQueue(stream="s", group="g")
    mq.include_router(first)
    with pytest.raises(HandlerError, match=r"registered twice \(handler\).*\bone\b.*\btwo\b"):
        mq.include_router(second)
    batches = Router()
    batches.batch_handler("t", size=2)(many)
    with pytest.raises(HandlerError, match=r"different middlewares: at .*test_registration.py:"):
        mq.include_router(batches)


# -- through MessageQueue (the queue passes its caller's namespace and model=) ---------


@pytest.mark.anyio
async def test_queue_handlers_with_local_models_end_to_end(make_queue: QueueFactory) -> None:
    class Ping(BaseModel):
        n: int

    class Pong(BaseModel):
        n: int

    mq = make_queue()
    got: list[Any] = []

    @mq.handler("ping")  # the annotation names a local class
    async def on_ping(msg: Message[Ping]) -> None:
        got.append(msg.data)

    @mq.handler("pong", model=Pong)
    async def on_pong(msg):  # type: ignore[no-untyped-def]
        got.append(msg.data)

    async with mq:
        await mq.publish("ping", Ping(n=1))
        await mq.publish("pong", Pong(n=2))
        async with anyio.create_task_group() as tg:
            tg.start_soon(mq.run)
            await wait_for(lambda: len(got) == 2, what="both handlers")
            await mq.stop()
    assert sorted(got, key=lambda m: m.n) == [Ping(n=1), Pong(n=2)]


def test_a_queue_and_a_router_resolve_local_models_of_what_a_function_registers() -> None:
    class Ping(BaseModel):
        n: int

    class PingHandler:
        message_type = "ping"

        async def handle(self, msg: Message[Ping]) -> None: ...

    class Pong(BaseModel):
        n: int

    async def pongs(msgs: list[Message[Pong]]) -> None: ...

    for registry in _registries():
        registry.register(PingHandler())  # the namespace is the caller's: this function's
        registry.batch_handler("pong", size=2)(pongs)  # the decorator's: where it is applied
        assert registry.route_table.routes["ping"].model is Ping
        assert registry.route_table.routes["pong"].model is Pong


# -- handlers streamq could never call: refused at registration ----------------------


def _registries() -> list[Any]:
    """A queue (never opened) and a streamq.Router: both register through one code path."""
    import streamq

    queue = streamq.MessageQueue("redis://127.0.0.1:1/0", stream="s", group="g")
    return [queue, streamq.Router()]


@pytest.mark.parametrize("decorator", ["handler", "batch_handler"])
def test_a_decorator_without_parentheses_is_refused_saying_what_to_write(decorator: str) -> None:
    for registry in _registries():

        async def send_email(msg: Message[Any]) -> None: ...

        with pytest.raises(HandlerError, match=rf'write @(mq|router).{decorator}\("email"\)'):
            getattr(registry, decorator)(send_email)
        assert not len(registry.route_table), "nothing may be registered"


def test_a_handler_that_needs_more_than_the_message_is_refused_saying_what_to_write() -> None:
    async def one(msg: Message[Any], extra: int) -> None: ...

    async def many(msgs: list[Message[Any]], *, db: Any) -> None: ...

    class Obj:
        message_type = "obj"

        def handle(self, msg: Message[Any], retries: int) -> None: ...

    for registry in _registries():
        with pytest.raises(HandlerError, match=r"one\(\) needs 'extra'.*a default"):
            registry.handler("a")(one)
        with pytest.raises(HandlerError, match=r"many\(\) needs 'db'.*functools.partial"):
            registry.batch_handler("b", size=2)(many)
        with pytest.raises(HandlerError, match=r"Obj.handle\(\) needs 'retries'"):
            registry.register(Obj())
        with pytest.raises(HandlerError, match="needs 'extra'"):
            registry.handler("c", model=Any)(one)
        assert not len(registry.route_table), "nothing may be registered"


def test_extra_parameters_with_defaults_or_bound_are_accepted() -> None:
    import functools

    async def with_default(msg: Message[Any], extra: int = 1) -> None: ...

    async def with_star(msg: Message[Any], *args: Any, **kwargs: Any) -> None: ...

    async def bound(db: str, msg: Message[Any]) -> None: ...

    router = Routes()
    router.add_single("a", with_default)
    router.add_single("b", with_star)
    router.add_single("c", functools.partial(bound, "db"), model=Any)
    assert len(router) == 3
