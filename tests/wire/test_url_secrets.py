"""Passwords in URLs: a URL whose password holds an unencoded ``#``, ``/`` or ``?`` is
refused with an error that names the problem and no piece of the password, and no text
streamq shows (errors, pages, the CLI's lines) holds a URL's credentials."""

from __future__ import annotations

import traceback
import uuid
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest
import redis

from streamq import ConfigError, MessageQueue, Publisher
from streamq.wire import sentinel
from streamq.wire.client import connect, connect_sync
from streamq.wire.urls import ENCODED, FORM, check_url, public_url, redact

SECRET = "S3cr3tPW"


def _bad_urls(host: str) -> list[str]:
    """URLs whose password holds a reserved character as it is, on the real server."""
    return [
        f"redis://:{SECRET[:3]}#{SECRET[3:]}@{host}/0",
        f"redis://:{SECRET[:3]}/{SECRET[3:]}@{host}/0",
        f"redis://:{SECRET[:3]}?{SECRET[3:]}@{host}/0",
        f"redis://user:{SECRET[:3]}/{SECRET[3:]}@{host}",
        f"redis://:{SECRET}",  # the host forgotten: the password would be taken for a port
        f"rediss://u:{SECRET[:3]}#{SECRET[3:]}@{host}",
    ]


def _shows_no_secret(error: BaseException) -> None:
    text = "".join(traceback.format_exception(error))
    for piece in (SECRET, SECRET[:3], SECRET[3:]):
        assert piece not in text, text


@pytest.fixture
def host(redis_url: str) -> str:
    return urlsplit(redis_url).netloc.rpartition("@")[2]


def test_a_password_with_reserved_characters_is_refused_without_showing_it(host: str) -> None:
    for url in _bad_urls(host):
        for build in (
            lambda u=url: MessageQueue(u, stream="s", group="g"),
            lambda u=url: Publisher(url=u, stream="s"),
            lambda u=url: connect(u),
            lambda u=url: connect_sync(u),
        ):
            with pytest.raises(ConfigError, match="invalid server URL") as caught:
                build()
            _shows_no_secret(caught.value)
    with pytest.raises(ConfigError, match="percent-encoded"):
        check_url(f"redis://:{SECRET[:3]}#{SECRET[3:]}@{host}")


@pytest.fixture
def user_with_reserved_password(redis_url: str) -> Iterator[tuple[str, str]]:
    """A Redis user (on the real server) whose password holds ``#``, ``/``, ``?`` and ``@``."""
    name, password = f"u-{uuid.uuid4().hex[:8]}", "p#a/s?s@w:rd"
    admin = redis.Redis.from_url(redis_url)
    admin.acl_setuser(name, enabled=True, passwords=[f"+{password}"], commands=["+@all"],
                      keys=["*"], channels=["*"])  # fmt: skip
    try:
        yield name, password
    finally:
        admin.acl_deluser(name)
        admin.close()


@pytest.mark.anyio
async def test_a_percent_encoded_password_with_reserved_characters_connects(
    redis_url: str, host: str, user_with_reserved_password: tuple[str, str], on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("ACL users are per node: the user exists on the URL's node alone")
    name, password = user_with_reserved_password
    url = f"redis://{name}:{quote(password, safe='')}@{host}/0"
    stream = f"s-{uuid.uuid4().hex}"
    async with MessageQueue(url, stream=stream, group="g") as mq:
        await mq.publish("t", {"x": 1})
        assert (await mq.topic_info()).length == 1
        await mq.terminate_topic()


@pytest.mark.parametrize(
    "text",
    [
        f"cannot connect to redis://:{SECRET}@h:1/0",
        f"url='redis://user:{SECRET[:3]}#{SECRET[3:]}@h:1'",
        f"redis://u:{SECRET[:3]}/{SECRET[3:]}@h and rediss://:{SECRET}@h2 too",
        f"redis+sentinel://u:{SECRET[:3]}@{SECRET[3:]}@s1:26379,s2/mymaster",
        f"redis://:{SECRET[:3]} {SECRET[3:]}@h\nnext line redis://h2",
        f"rediss+sentinel://u:{SECRET}@s1/m?sentinel_password={SECRET}&ssl_cert_reqs=none",
    ],
)
def test_redact_removes_every_piece_of_a_password_whatever_the_urls_shape(text: str) -> None:
    shown = redact(text)
    for piece in (SECRET, SECRET[:3], SECRET[3:]):
        assert piece not in shown, shown
    assert "://***@" in shown


def test_options_that_hold_a_secret_are_hidden_too() -> None:
    shown = redact(f"redis://h/0?password={SECRET}&client_name=app")
    assert shown == "redis://h/0?password=***&client_name=app"


def test_text_without_credentials_is_left_as_it_is() -> None:
    for text in ("redis://h:1/0", "no url here", "a@b.c redis://h/0 ok", "x://"):
        assert redact(text) == text


def test_pages_show_the_url_without_password_or_options(host: str) -> None:
    assert public_url(f"redis://u:{SECRET}@{host}/2?password={SECRET}") == f"redis://u@{host}/2"
    assert public_url(f"redis://:{SECRET}@{host}") == f"redis://{host}"
    for url in _bad_urls(host):
        assert SECRET[:3] not in public_url(url) and SECRET[3:] not in public_url(url)


def test_a_client_error_naming_its_url_is_translated_without_its_credentials() -> None:
    from redis import exceptions as rx

    from streamq.wire.translate import translate

    for error in (
        rx.ConnectionError(f"Error connecting to redis://u:{SECRET}@h:1/0"),
        rx.RedisError(f"bad url 'redis://:{SECRET[:3]}#{SECRET[3:]}@h'"),
    ):
        text = str(translate(error, "s"))
        assert SECRET[:3] not in text and SECRET[3:] not in text and "***@h" in text


@pytest.mark.parametrize("path", ["/1x", "/abc", "/0/extra", "/-1"])
def test_a_database_that_is_not_a_number_is_refused(path: str) -> None:
    with pytest.raises(ConfigError, match=r"its database .* is not a number"):
        check_url(f"redis://127.0.0.1:6379{path}")
    for fine in ("", "/", "/0", "/15", "/3?protocol=3"):
        check_url(f"redis://127.0.0.1:6379{fine}")


def test_redact_keeps_the_url_forms_of_hints_whole() -> None:
    for hint in (
        f"its port is not a number (the password goes before an '@': {FORM}; percent-encode "
        f"it: {ENCODED})",
        f"invalid Sentinel URL: no service name (form: {sentinel.FORM})",
    ):
        assert redact(hint) == hint
    shown = redact(f"redis://u:{SECRET}@h:1/0 is refused; write {FORM} ({ENCODED})")
    assert SECRET not in shown and shown.endswith(f"write {FORM} ({ENCODED})"), shown
    assert shown.startswith("redis://***@h:1/0"), shown
    hidden = redact(f"redis://u:pa{FORM}ss@h:1/0")  # a hint inside a password is hidden too
    assert hidden == "redis://***@h:1/0", hidden
