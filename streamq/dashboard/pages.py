"""The pages (GET): topics, a topic with its live fragment, pending entries, dead letters,
stopped IDs, the terminate confirmation and the login form. They only read.

A topic is named in the query string (``/topic?stream=NAME``), not in the path: a stream
name may hold ``/``, ``?`` or ``#``, which a path segment would mangle.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..topic.admin import TopicInfo, topic_info
from ..wire.routing import Deployment
from .render import page
from .samples import SampleStore, chart_series
from .security import safe_next
from .topics import dead_letter_page, list_topics, parse_cursor, pending_page


def deployment_of(request: Request) -> Deployment:
    deployment: Deployment = request.app.state.deployment
    return deployment


def client_of(request: Request, stream: str) -> aioredis.Redis:
    """A client for ``stream``'s keys (on a cluster: its slot's master)."""
    return deployment_of(request).client_for(stream)


def stream_param(request: Request) -> str:
    """The ``stream`` named in the query string; 400 if there is none."""
    stream = request.query_params.get("stream", "")
    if not stream:
        raise HTTPException(400, "no topic given: add ?stream=NAME")
    return stream


async def existing_topic(request: Request) -> TopicInfo:
    """The topic named in the query; 404 if neither it nor anything of it exists."""
    stream = stream_param(request)
    info = await topic_info(client_of(request, stream), stream)
    if not info.exists and not info.dead_letters and not info.stopped_ids:
        raise HTTPException(404, f"there is no stream {stream!r}")
    return info


async def topics(request: Request) -> Response:
    listing = await list_topics(deployment_of(request))
    return page(request, "topics.html", {"listing": listing})


async def topic(request: Request) -> Response:
    info = await existing_topic(request)
    return page(request, "topic.html", await _live_context(request, info))


async def topic_live(request: Request) -> Response:
    """The part of the topic page that the page polls: figures, groups, chart data."""
    info = await existing_topic(request)
    return page(request, "_live.html", await _live_context(request, info), fragment=True)


async def _live_context(request: Request, info: TopicInfo) -> dict[str, object]:
    store: SampleStore = request.app.state.samples
    samples = await store.refresh(client_of(request, info.stream), info.stream)
    return {"info": info, "series": chart_series(samples)}


async def pending(request: Request) -> Response:
    info = await existing_topic(request)
    group = request.query_params.get("group") or (info.groups[0].name if info.groups else "")
    if group and group not in {g.name for g in info.groups}:
        raise HTTPException(404, f"topic {info.stream!r} has no consumer group {group!r}")
    after = parse_cursor(request.query_params.get("after"))
    consumer = request.query_params.get("consumer") or None
    rows = None
    if group:
        rows = await pending_page(
            client_of(request, info.stream), info.stream, group, after=after, consumer=consumer
        )
    context = {"info": info, "group": group, "consumer": consumer, "after": after, "rows": rows}
    return page(request, "pending.html", context)


async def dead_letters(request: Request) -> Response:
    info = await existing_topic(request)
    after = parse_cursor(request.query_params.get("after"))
    letters = await dead_letter_page(client_of(request, info.stream), info.stream, after=after)
    return page(request, "dead_letters.html", {"info": info, "letters": letters, "after": after})


async def stopped(request: Request) -> Response:
    info = await existing_topic(request)
    return page(request, "stopped.html", {"info": info})


async def terminate_form(request: Request) -> Response:
    info = await existing_topic(request)
    return page(request, "terminate.html", {"info": info})


async def login_form(request: Request) -> Response:
    next_path = safe_next(request.query_params.get("next"))
    return page(request, "login.html", {"next": next_path, "error": None})
