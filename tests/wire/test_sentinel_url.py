"""Redis Sentinel URLs (streamq.wire.sentinel): the form parsed, bad forms refused with a
message that names the problem and never the password, and the TLS options applied."""

from __future__ import annotations

import pytest
import redis

from streamq import ConfigError
from streamq.wire.sentinel import SentinelUrl, async_client, is_sentinel_url, sync_client
from streamq.wire.translate import translate


def test_a_url_with_every_part_parses() -> None:
    parsed = SentinelUrl.parse(
        "redis+sentinel://alice:s3cret%40x@sa:26380,sb,[::1]:26381/orders%2Dmaster/2"
        "?sentinel_username=watch&sentinel_password=w%26tch&protocol=3"
    )
    assert parsed.sentinels == (("sa", 26380), ("sb", 26379), ("::1", 26381))
    assert (parsed.service_name, parsed.db) == ("orders-master", 2)
    assert (parsed.username, parsed.password) == ("alice", "s3cret@x")
    assert (parsed.sentinel_username, parsed.sentinel_password) == ("watch", "w&tch")
    assert parsed.protocol == 3 and not parsed.ssl


def test_a_minimal_url_and_a_tls_url_parse() -> None:
    plain = SentinelUrl.parse("redis+sentinel://127.0.0.1:26379/mymaster")
    assert plain == SentinelUrl(sentinels=(("127.0.0.1", 26379),), service_name="mymaster")
    assert plain.db == 0 and plain.password is None and plain.protocol is None
    tls = SentinelUrl.parse(
        "REDISS+SENTINEL://:pw@h:1/svc/0?ssl_cert_reqs=required&ssl_ca_certs=/etc/ca.pem"
    )
    assert tls.ssl and (tls.username, tls.password) == (None, "pw")
    assert (tls.ssl_cert_reqs, tls.ssl_ca_certs) == ("required", "/etc/ca.pem")


def test_is_sentinel_url_knows_both_schemes_only() -> None:
    assert is_sentinel_url("redis+sentinel://h:1/svc")
    assert is_sentinel_url("rediss+sentinel://h:1/svc")
    assert is_sentinel_url("Redis+Sentinel://h:1/svc")
    for other in ("redis://h:1/0", "rediss://h:1/0", "redis+sentinel:/h", "", "sentinel://h"):
        assert not is_sentinel_url(other), other


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://u:s3cret@h:1/svc", "the scheme must be one of"),
        ("redis+sentinel://u:s3cret@/svc", "no sentinel named"),
        ("redis+sentinel://u:s3cret@h:1", "no service name"),
        ("redis+sentinel://u:s3cret@h:1/", "no service name"),
        ("redis+sentinel://u:s3cret@h:port/svc", "sentinel 1 (h): the port must be a number"),
        ("redis+sentinel://u:s3cret@h:0/svc", "the port must be a number from 1 to 65535"),
        ("redis+sentinel://u:s3cret@h:1,,h:2/svc", "sentinel 2 has no host"),
        ("redis+sentinel://u:s3cret@[::1/svc", "an IPv6 address is written [address]:port"),
        ("redis+sentinel://u:s3cret@h:1/svc/x", "the database 'x' is not a number"),
        ("redis+sentinel://u:s3cret@h:1/svc/0/more", "more than /service_name/db"),
        ("redis+sentinel://u:s3cret@h:1/my%20svc", "holds a space"),
        ("redis+sentinel://u:s3cret@h:1/svc?db=1", "unknown option 'db'; the options are"),
        ("redis+sentinel://u:s3cret@h:1/svc?protocol=4", "'protocol' must be 2 or 3"),
        ("redis+sentinel://u:s3cret@h:1/svc?protocol=2&protocol=3", "given twice"),
        ("rediss+sentinel://u:s3cret@h:1/svc?ssl_cert_reqs=maybe", "'ssl_cert_reqs' must be"),
        # reserved characters left in a password: refused without echoing any part of it
        ("redis+sentinel://u:s3cr/et@h:1/svc", "percent-encode the password"),
        ("redis+sentinel://u:s3cr?et@h:1/svc", "percent-encode the password"),
        ("redis+sentinel://u:s3cr#et@h:1/svc", "percent-encode it in a password"),
    ],
)
def test_a_bad_url_is_a_config_error_that_names_the_problem_not_the_password(
    url: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        SentinelUrl.parse(url)
    message = str(caught.value)
    assert problem in message, message
    assert message.startswith("invalid Sentinel URL: ") and "redis+sentinel://" in message
    for secret in ("s3cret", "s3cr", "et@"):
        assert secret not in message, message


def test_repr_and_str_never_show_a_password() -> None:
    parsed = SentinelUrl.parse(
        "redis+sentinel://bob:s3cret@h1:5,[::1]:6/svc/1?sentinel_password=hush&protocol=2"
    )
    assert "s3cret" not in repr(parsed) and "hush" not in repr(parsed)
    assert str(parsed) == (
        "redis+sentinel://bob:***@h1:5,[::1]:6/svc/1?protocol=2&sentinel_password=***"
    )
    again = SentinelUrl.parse(str(parsed))  # the shown form is itself a valid URL
    assert (again.sentinels, again.service_name, again.db) == (parsed.sentinels, "svc", 1)


def test_a_tls_url_makes_tls_connections_to_the_master_and_the_sentinels() -> None:
    client = sync_client("rediss+sentinel://h:1,h:2/svc?ssl_cert_reqs=none")
    try:
        pool = client.connection_pool
        assert issubclass(pool.connection_class, redis.SSLConnection)
        for sentinel in pool.sentinel_manager.sentinels:
            assert issubclass(sentinel.connection_pool.connection_class, redis.SSLConnection)
    finally:
        client.close()


def test_a_client_of_a_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no service name"):
        async_client("redis+sentinel://h:1")
    with pytest.raises(ConfigError, match="the scheme must be"):
        sync_client("redis://h:1/0")


@pytest.mark.anyio
async def test_no_sentinel_answering_is_one_short_line_naming_each() -> None:
    """With no sentinel reachable the error (what a publish raises once it stops waiting
    for a master, after 30 s) names each sentinel by its address, not by redis-py's repr
    of its client and pool (two kilobytes on one line)."""
    url = "redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster"
    for client in (async_client(url), sync_client(url)):
        try:
            with pytest.raises(redis.ConnectionError) as failed:
                if isinstance(client, redis.Redis):
                    client.ping()
                else:
                    await client.ping()
        finally:
            if isinstance(client, redis.Redis):
                client.close()
            else:
                await client.aclose()
        message = str(translate(failed.value, "s"))
        assert message.startswith("cannot reach the server: no master found for 'mymaster'")
        assert "sentinel 127.0.0.1:1: " in message and "sentinel 127.0.0.1:2: " in message
        assert len(message) < 300 and "ConnectionPool" not in message, message
