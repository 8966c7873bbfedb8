"""A URL's query options (``?socket_timeout=2``) are checked before any client parses them:
an unknown or invalid one is a ConfigError naming the option, never the password."""

from __future__ import annotations

import pytest

from streamq import MessageQueue, Publisher
from streamq.errors import ConfigError
from streamq.wire.urls import check_url
from tests.helpers.cli import streamq

SECRET = "Opt1onS3cret"


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("frobnicate=1", "unknown option 'frobnicate'"),
        ("socket_timeout=0", "'socket_timeout' must be a number of seconds above 0"),
        ("socket_timeout=-1", "'socket_timeout' must be a number of seconds above 0"),
        ("socket_timeout=abc", "'socket_timeout' must be a number of seconds above 0"),
        ("socket_timeout=inf", "'socket_timeout' must be a number of seconds above 0"),
        ("socket_connect_timeout=0", "'socket_connect_timeout' must be a number of seconds"),
        ("protocol=9", "'protocol' must be 2 or 3"),
        ("db=x", "'db' must be a whole number from 0 up"),
        ("health_check_interval=-5", "'health_check_interval' must be a whole number"),
        ("ssl_cert_reqs=none", "'ssl_cert_reqs' is an option of rediss:// URLs"),
        ("ssl_ca_certs=/ca.pem", "'ssl_ca_certs' is an option of rediss:// URLs"),
        ("decode_responses=true", "unknown option 'decode_responses'"),
        ("protocol=3&protocol=2", "'protocol' is given twice"),
    ],
)
def test_an_unknown_or_invalid_option_is_refused_naming_it(query: str, says: str) -> None:
    for url in (f"redis://u:{SECRET}@127.0.0.1:6379/0?{query}", f"unix:///tmp/v.sock?{query}"):
        if "rediss://" in says and url.startswith("unix"):
            continue
        with pytest.raises(ConfigError, match="invalid server URL") as caught:
            check_url(url)
        assert says in str(caught.value) and SECRET not in str(caught.value)


def test_a_tls_option_is_checked_on_a_rediss_url(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="'ssl_cert_reqs' must be one of none, optional"):
        check_url("rediss://h:6380/0?ssl_cert_reqs=maybe")
    with pytest.raises(ConfigError, match="'ssl_ca_certs' names no file"):
        check_url("rediss://h:6380/0?ssl_ca_certs=/nonexistent/ca.pem")


def test_the_documented_options_are_taken(tmp_path: pytest.TempPathFactory) -> None:
    ca = f"{tmp_path}/ca.pem"
    open(ca, "w").close()
    for url in (
        "redis://h:6379/0?socket_timeout=2.5&socket_connect_timeout=1&protocol=3",
        "redis://h:6379?db=2&client_name=billing&health_check_interval=30",
        f"redis://h:6379/0?username=app&password={SECRET}",
        f"rediss://h:6380/0?ssl_ca_certs={ca}&ssl_cert_reqs=required&ssl_check_hostname=false",
        "unix:///run/valkey.sock?db=0&protocol=2",
        "redis://h1:7000,h2:7001/0?protocol=3",
        "redis+sentinel://h:26379/mymaster?protocol=3&sentinel_password=x",
    ):
        check_url(url)


def test_a_piece_of_a_password_is_never_named_as_an_option() -> None:
    # an unencoded '&' in a password option makes what follows it look like an option
    with pytest.raises(ConfigError) as caught:
        check_url(f"redis://h:6379/0?password=ab&{SECRET}")
    assert SECRET not in str(caught.value) and "%26" in str(caught.value)


def test_a_queue_and_a_publisher_refuse_a_bad_option_when_built(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="unknown option 'frobnicate'"):
        MessageQueue(url=f"{redis_url}?frobnicate=1", stream="s", group="g")
    with pytest.raises(ConfigError, match="'socket_timeout' must be"):
        Publisher(f"{redis_url}?socket_timeout=0", stream="s")


def test_a_queue_connects_with_the_documented_options(redis_url: str) -> None:
    url = f"{redis_url}?socket_timeout=2&protocol=3&client_name=opts&health_check_interval=5"
    with Publisher(url, stream="url-options") as publisher:
        assert publisher.publish("t", {"n": 1})


@pytest.mark.parametrize("query", ["frobnicate=1", "socket_timeout=0", "protocol=9"])
def test_the_cli_refuses_a_bad_option_in_one_line_exit_2(redis_url: str, query: str) -> None:
    url = redis_url.replace("redis://", f"redis://default:{SECRET}@") + f"?{query}"
    result = streamq("info", "x", url=url)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "invalid server URL" in lines[0], lines
    assert SECRET not in result.stderr and query.partition("=")[0] in lines[0]
