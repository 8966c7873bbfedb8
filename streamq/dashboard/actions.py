"""The actions (POST): stop and resume an entry, cancel a scheduled message, release a
halted key, pause and resume a group (or a type in it), replay dead letters (one, or all
as a snapshot), purge them, terminate a topic, log in and out.

Each action first checks the write token (:meth:`Access.require_write`, 403 otherwise),
then calls the same topic operation ``MessageQueue`` offers (through
:class:`~.view.TopicView`: on a partitioned topic an ID names its partition). A browser
is sent back to the page it came from (303) with the outcome as a message; a script
(``Authorization: Bearer``) gets the outcome as plain text, 200 or 4xx. Destructive actions (purge,
terminate) also need the topic's name typed into the form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from ..errors import ConfigError, InvalidMessageIdError, MessageNotFoundError
from ..topic.halted import ACTIONS
from .names import name_in
from .pages import view_of
from .render import href, page, shown
from .samples import SampleStore
from .security import Access, safe_next, same_origin
from .view import TopicView

# Outcomes an operator can cause by hand (a stale page, a typo): shown, not a server error.
EXPECTED_FAILURES = (MessageNotFoundError, InvalidMessageIdError, ConfigError)


def access_of(request: Request) -> Access:
    access: Access = request.app.state.access
    return access


async def authorised_form(request: Request) -> FormData:
    form = await request.form()
    access_of(request).require_write(request, form)
    return form


def field(form: FormData, name: str) -> str:
    """A required text field (an ID, typed by hand: stripped of spaces); 400 without it."""
    value = form.get(name)
    if isinstance(value, str):
        value = value.strip()
    if not isinstance(value, str) or not value:
        raise HTTPException(400, f"the form has no {name!r}")
    return value


def stream_field(form: FormData) -> str:
    """The topic a form names: ``stream64`` (encoded, as the pages' forms send it) or
    ``stream`` (plain, as a script may), taken as it is; 400 without either."""
    stream = name_in(form, "stream")
    if stream is None:
        raise HTTPException(400, "the form has no 'stream'")
    return stream


def confirmed(form: FormData, stream: str) -> bool:
    """Whether the form's ``confirm`` is the topic's name, as it is or as the page shows
    it (control characters as escapes, which no one can type)."""
    return form.get("confirm") in (stream, shown(stream))


def optional_field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def outcome(request: Request, back: str, text: str, *, status: int = 200) -> Response:
    """Show ``text`` on the page at ``back`` (a browser), or return it with ``status``
    (a script)."""
    if access_of(request).flash(request, "ok" if status < 400 else "error", text):
        return RedirectResponse(back, status_code=303)
    return PlainTextResponse(text, status_code=status)


async def _act(
    request: Request, stream: str, back: str, operation: Callable[[TopicView], Awaitable[str]]
) -> Response:
    """Run ``operation`` on the topic ``stream``; show what it says, or why it failed."""
    try:
        text = await operation(await view_of(request, stream))
    except EXPECTED_FAILURES as e:
        status = 404 if isinstance(e, MessageNotFoundError) else 400
        return outcome(request, back, str(e), status=status)
    return outcome(request, back, text)


async def stop(request: Request) -> Response:
    form = await authorised_form(request)
    stream, entry_id = stream_field(form), field(form, "id")
    back = safe_next(optional_field(form, "back"), href("/topic/stopped", stream=stream))

    async def run(view: TopicView) -> str:
        groups = await view.admin.stop_message(entry_id)
        return f"stopped {entry_id} (taken from {groups} group(s)' pending entries)"

    return await _act(request, stream, back, run)


async def resume(request: Request) -> Response:
    form = await authorised_form(request)
    stream, entry_id = stream_field(form), field(form, "id")

    async def run(view: TopicView) -> str:
        groups = await view.admin.resume_message(entry_id)
        return f"resumed {entry_id} (given back to {groups} group(s))"

    return await _act(request, stream, href("/topic/stopped", stream=stream), run)


async def cancel_scheduled(request: Request) -> Response:
    form = await authorised_form(request)
    stream, scheduled_id = stream_field(form), field(form, "id")

    async def run(view: TopicView) -> str:
        if not await view.schedule.cancel_scheduled(scheduled_id):
            raise MessageNotFoundError(f"{scheduled_id} is not waiting (delivered or cancelled)")
        return f"cancelled scheduled message {scheduled_id}"

    return await _act(request, stream, href("/topic/scheduled", stream=stream), run)


async def release_halted(request: Request) -> Response:
    """Release a key halted in ordered mode: ``group`` (or ``group64``), ``key`` (or
    ``key64``; ``keyless=1`` for the keyless entries' lane), ``action`` retry or skip."""
    form = await authorised_form(request)
    stream = stream_field(form)
    group = name_in(form, "group")
    if group is None:
        raise HTTPException(400, "the form has no 'group'")
    keyless = form.get("keyless") in ("1", "on")
    key = None if keyless else name_in(form, "key")
    if key is None and not keyless:
        raise HTTPException(400, "the form has no 'key' (or keyless=1)")
    action = form.get("action")
    if action not in ACTIONS:
        raise HTTPException(400, f"the action must be one of {', '.join(ACTIONS)}")
    shown_key = "(keyless)" if key is None else repr(key)

    async def run(view: TopicView) -> str:
        if not await view.release_halted_key_of(group, key, skip=action == "skip"):
            raise MessageNotFoundError(f"key {shown_key} is not halted in group {group!r}")
        return f"asked to release key {shown_key} of group {group!r} ({action})"

    return await _act(request, stream, href("/topic/halted", stream=stream), run)


async def pause(request: Request) -> Response:
    return await _pause(request, pausing=True)


async def unpause(request: Request) -> Response:
    return await _pause(request, pausing=False)


async def _pause(request: Request, *, pausing: bool) -> Response:
    """Pause or resume a consumer group of the topic: ``group`` (or ``group64``), and
    ``type`` to pause or resume only that message type (empty: the whole group)."""
    form = await authorised_form(request)
    stream = stream_field(form)
    group = name_in(form, "group")
    if group is None:
        raise HTTPException(400, "the form has no 'group'")
    type_name = (optional_field(form, "type") or "").strip() or None
    what = f"group {group!r}" if type_name is None else f"type {type_name!r} in group {group!r}"

    async def run(view: TopicView) -> str:
        if group not in {g.name for g in (await view.admin.topic_info()).groups}:
            raise MessageNotFoundError(f"topic {stream!r} has no consumer group {group!r}")
        if await view.pause_of(group, type_name, pausing=pausing):
            return f"{'paused' if pausing else 'resumed'} {what}"
        return f"{what} was {'paused already' if pausing else 'not paused'}"

    return await _act(request, stream, href("/topic", stream=stream), run)


async def replay(request: Request) -> Response:
    form = await authorised_form(request)
    stream, letter_id = stream_field(form), field(form, "id")

    async def run(view: TopicView) -> str:
        (new_id,) = await view.admin.replay_dead_letter(letter_id)
        return f"replayed dead letter {letter_id} as {new_id}"

    return await _act(request, stream, href("/topic/dead-letters", stream=stream), run)


async def replay_all(request: Request) -> Response:
    form = await authorised_form(request)
    stream = stream_field(form)

    async def run(view: TopicView) -> str:
        return f"replayed {len(await view.admin.replay_dead_letter())} dead letter(s)"

    return await _act(request, stream, href("/topic/dead-letters", stream=stream), run)


async def purge(request: Request) -> Response:
    form = await authorised_form(request)
    stream = stream_field(form)
    back = href("/topic/dead-letters", stream=stream)
    if not confirmed(form, stream):
        return outcome(request, back, "not purged: type the topic's name to confirm", status=400)

    async def run(view: TopicView) -> str:
        return f"purged {await view.admin.purge_dead_letters()} dead letter(s)"

    return await _act(request, stream, back, run)


async def terminate(request: Request) -> Response:
    form = await authorised_form(request)
    stream = stream_field(form)
    if not confirmed(form, stream):
        back = href("/topic/terminate", stream=stream)
        return outcome(
            request, back, "not terminated: type the topic's name to confirm", status=400
        )
    keep = form.get("keep_dead_letters") == "on"
    view = await view_of(request, stream)
    # a partitioned topic exists while its partitions are recorded
    if not view.partitioned and not await view.client.exists(stream):
        message = f"not terminated: there is no stream {stream!r}"
        return outcome(request, "/", message, status=404)
    await view.admin.terminate_topic(keep_dead_letters=keep)
    store: SampleStore = request.app.state.samples
    store.forget(stream)
    kept = " (dead letters kept)" if keep else ""
    return outcome(request, "/", f"terminated {stream}{kept}")


async def log_in(request: Request) -> Response:
    access = access_of(request)
    form = await request.form()
    next_path = safe_next(optional_field(form, "next"))
    token = form.get("token")
    if not access.writable:
        raise HTTPException(403, "this dashboard is read-only (started without a token)")
    if not same_origin(request):
        raise HTTPException(403, "refused: the form was sent from another origin")
    if not access.check_token(request, token if isinstance(token, str) else ""):
        context = {"next": next_path, "error": "That is not the write token."}
        return page(request, "login.html", context, status_code=403)
    response = RedirectResponse(next_path, status_code=303)
    access.log_in(request, response)
    return response


async def log_out(request: Request) -> Response:
    await authorised_form(request)
    response = RedirectResponse("/", status_code=303)
    access_of(request).log_out(request, response)
    return response
