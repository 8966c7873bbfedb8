"""The pages (GET): topics, a topic with its live fragment, pending entries, dead letters,
stopped IDs, scheduled messages, halted keys, the terminate confirmation and the login
form. They only read, a few at a time (:mod:`.limits`), and never an entry's values whole:
the dead-letter page shows each field cut on the server (:data:`~.paging.SHOWN_BYTES`) and links its
download (:mod:`.downloads`), and topic figures leave out the first and last entries' values.

A topic is named in the query string (``/topic?stream=NAME``), not in the path: a stream
name may hold ``/``, ``?`` or ``#``, which a path segment would mangle.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..topic.admin import TopicInfo
from ..wire.routing import Deployment
from .limits import reading
from .names import name_in
from .paging import (
    dead_letter_page,
    halted_page,
    parse_cursor,
    parse_halted_cursor,
    pending_page,
)
from .payloads import shown_payload
from .render import page
from .samples import SampleStore, chart_series
from .security import safe_next
from .topics import MAX_FILTER, list_topics
from .view import TopicView, open_view


def deployment_of(request: Request) -> Deployment:
    deployment: Deployment = request.app.state.deployment
    return deployment


def stream_param(request: Request) -> str:
    """The ``stream`` (or encoded ``stream64``) named in the query string; 400 if there is
    none."""
    stream = name_in(request.query_params, "stream")
    if not stream:
        raise HTTPException(400, "no topic given: add ?stream=NAME")
    return stream


async def view_of(request: Request, stream: str) -> TopicView:
    """The topic ``stream`` (plain, or partitioned as recorded) to read or operate."""
    return await open_view(deployment_of(request), stream, request.app.state.keyring)


async def existing_topic(request: Request) -> tuple[TopicView, TopicInfo]:
    """The topic named in the query and its figures; 404 if neither it nor anything of it
    exists."""
    stream = stream_param(request)
    view = await view_of(request, stream)
    info = await view.admin.topic_info()
    if not (info.exists or info.dead_letters or info.stopped_ids or info.scheduled):
        raise HTTPException(404, f"there is no stream {stream!r}")
    return view, info


@reading
async def topics(request: Request) -> Response:
    """Every topic, or those whose name holds the query's ``q`` (in any case)."""
    match = (request.query_params.get("q") or "").strip()[:MAX_FILTER]
    listing = await list_topics(deployment_of(request), match=match)
    return page(request, "topics.html", {"listing": listing, "q": match})


@reading
async def topic(request: Request) -> Response:
    view, info = await existing_topic(request)
    return page(request, "topic.html", await _live_context(request, view, info))


@reading
async def topic_live(request: Request) -> Response:
    """The part of the topic page that the page polls: figures, groups, partitions, chart
    data."""
    view, info = await existing_topic(request)
    context = await _live_context(request, view, info)
    return page(request, "_live.html", context, fragment=True)


async def _live_context(request: Request, view: TopicView, info: TopicInfo) -> dict[str, object]:
    store: SampleStore = request.app.state.samples
    samples = await store.refresh(view)
    return {"info": info, "view": view, "series": chart_series(samples)}


@reading
async def pending(request: Request) -> Response:
    view, info = await existing_topic(request)
    group = name_in(request.query_params, "group") or (info.groups[0].name if info.groups else "")
    if group and group not in {g.name for g in info.groups}:
        raise HTTPException(404, f"topic {info.stream!r} has no consumer group {group!r}")
    after = parse_cursor(view, request.query_params.get("after"))
    consumer = request.query_params.get("consumer") or None
    rows = None
    if group:
        rows = await pending_page(view, group, after=after, consumer=consumer)
    context = {"info": info, "view": view, "group": group, "consumer": consumer,
               "after": after, "rows": rows}  # fmt: skip
    return page(request, "pending.html", context)


@reading
async def dead_letters(request: Request) -> Response:
    view, info = await existing_topic(request)
    after = parse_cursor(view, request.query_params.get("after"))
    letters = await dead_letter_page(view, after=after)
    keyring = request.app.state.keyring
    shown = {d.id: shown_payload(d, keyring) for d in letters.rows}
    context = {"info": info, "view": view, "letters": letters, "after": after, "shown": shown,
               "decrypting": keyring is not None}  # fmt: skip
    return page(request, "dead_letters.html", context)


@reading
async def stopped(request: Request) -> Response:
    view, info = await existing_topic(request)
    return page(request, "stopped.html", {"info": info, "view": view})


SCHEDULED_SHOWN = 200  # the first ones by due time; the tab says how many wait


@reading
async def scheduled(request: Request) -> Response:
    view, info = await existing_topic(request)
    rows = await view.schedule.scheduled(limit=SCHEDULED_SHOWN)
    periodics = await view.schedule.periodic_publishers()
    context = {"info": info, "view": view, "rows": rows, "periodics": periodics}
    return page(request, "scheduled.html", context)


@reading
async def halted(request: Request) -> Response:
    """The keys halted in ordered mode, of every group of the topic (``on_poison="halt"``),
    a page at a time (:data:`~.paging.HALTED_PAGE`)."""
    view, info = await existing_topic(request)
    after = request.query_params.get("after")
    start = parse_halted_cursor(view, after)
    if start is None:
        raise HTTPException(400, "the 'after' given is not a page of the halted keys")
    rows = await halted_page(view, start)
    return page(request, "halted.html", {"info": info, "view": view, "rows": rows, "after": after})


@reading
async def terminate_form(request: Request) -> Response:
    view, info = await existing_topic(request)
    return page(request, "terminate.html", {"info": info, "view": view})


async def login_form(request: Request) -> Response:
    next_path = safe_next(request.query_params.get("next"))
    return page(request, "login.html", {"next": next_path, "error": None})
