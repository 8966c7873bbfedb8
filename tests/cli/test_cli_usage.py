"""What a newcomer types wrong at the `streamq` command: one line on stderr, the exit code
the module docstring of streamq.cli.main promises, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from streamq import __version__
from tests.helpers.cli import streamq

pytestmark = pytest.mark.slow


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The error ``result`` printed, checked to be one line, no traceback, exit ``code``."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("dlq", "list", "S", "--count", "0"), "--count: must be at least 1, got 0"),
        (("pending", "S", "G", "--count", "-1"), "--count: must be at least 1, got -1"),
        (("tail", "S", "--count", "x"), "--count: expected a whole number, got 'x'"),
        (("cleanup", "S", "--max-length", "-5"), "--max-length: must be at least 0"),
        (("dashboard", "--port", "99999"), "--port: must be a port from 0 to 65535, got 99999"),
        (("run", "app:mq", "--metrics-port", "99999"), "--metrics-port: must be a port from 0"),
        (("run", "app:mq", "--health-port", "-1"), "--health-port: must be a port from 0"),
        (("run", "app:mq", "--workers", "0"), "--workers: must be at least 1, got 0"),
        (("tail", "S", "--seconds", "-1"), "--seconds: must be 0 seconds or more, got -1"),
        (("cleanup", "S", "--min-retention", "nan"), "--min-retention: must be 0 seconds or more"),
        (("run", "app:mq", "--worker", "2"), "unrecognized arguments: --worker 2"),
        (("info", "S", "--js"), "unrecognized arguments: --js"),
        (("info", "S", "--ur", "redis://x"), "unrecognized arguments: --ur redis://x"),
        (("nosuchcommand",), "invalid choice: 'nosuchcommand'"),
        ((), "the following arguments are required: command"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    redis_url: str, args: tuple[str, ...], says: str
) -> None:
    line = one_line_error(streamq(*args, url=redis_url), 2)
    assert says in line and "--help" in line, line


def test_version() -> None:
    result = streamq("--version", url=None)
    assert result.returncode == 0 and result.stdout.strip() == f"streamq {__version__}"


def test_resume_on_a_missing_stream_says_it_does_not_exist(redis_url: str, stream: str) -> None:
    line = one_line_error(streamq("resume-message", stream, "1-0", url=redis_url), 1)
    assert line == f"streamq: stream {stream!r} does not exist"


def test_output_piped_into_a_reader_that_leaves_is_not_an_error(
    redis_url: str, stream: str
) -> None:
    """`streamq dlq list S | head -1`: the reader closes the pipe before the output ends."""
    for n in range(3):
        assert streamq("publish", stream, "email", f'{{"n":{n}}}', url=redis_url).returncode == 0
    for _ in range(5):  # the race between the reader leaving and our write: several tries
        result = subprocess.run(
            f"{sys.executable} -m streamq.cli info {stream} --json | head -c 1",
            shell=True, capture_output=True, text=True, timeout=60,
            env={"STREAMQ_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert result.stdout == "{" and "Traceback" not in result.stderr, result.stderr
        assert "BrokenPipe" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("module", "target", "says"),
    [
        (
            "class Api:\n    def __call__(self, scope, receive, send): ...\napi = Api()\n",
            "app:api",
            "app:api: expected a MessageQueue or App (or a function returning one), "
            "got an instance of app.Api",
        ),
        (
            "from pydantic import BaseModel\nclass Email(BaseModel):\n    to: str\n",
            "app:Email",
            "app:Email: expected a MessageQueue or App (or a function returning one), "
            "got the class app.Email",
        ),
        ("x = 1 / 0\n", "app:mq", "importing 'app' failed: ZeroDivisionError: division by zero"),
        ("def f(:\n", "app:mq", "importing 'app' failed: SyntaxError: "),
    ],
)
def test_run_names_a_target_it_cannot_run_in_one_line(
    tmp_path: Path, module: str, target: str, says: str
) -> None:
    (tmp_path / "app.py").write_text(module)
    result = subprocess.run(
        [sys.executable, "-m", "streamq.cli", "run", target], cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert says in one_line_error(result, 2)


def test_run_with_its_health_port_taken_says_so_not_that_the_server_is_unreachable(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text(
        "from streamq import MessageQueue\n"
        'mq = MessageQueue("redis://127.0.0.1:1/0", stream="s", group="g")\n'
        'mq.handler("job")(lambda msg: None)\n'
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "streamq.cli", "run", "app:mq", "--health-port", str(port)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    line = one_line_error(result, 1)
    assert f"cannot listen on 127.0.0.1:{port} for /livez /readyz: " in line, line
    assert "reach the server" not in line, line


@pytest.mark.parametrize("command", [("info", "S"), ("dashboard",)])
def test_an_unknown_url_scheme_lists_every_scheme_streamq_takes(command: tuple[str, ...]) -> None:
    line = one_line_error(streamq(*command, "--url", "foo://user:secret@h:1", url=None), 2)
    for scheme in ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://"):
        assert scheme in line, line
    assert "got 'foo://'" in line and "secret" not in line, line


def test_a_refused_connection_names_the_address(unused_port: int) -> None:
    url = f"redis://127.0.0.1:{unused_port}/0"
    line = one_line_error(streamq("info", "S", url=url), 3)
    assert f"cannot connect to 127.0.0.1:{unused_port}" in line, line
    assert "CLUSTER SLOTS" not in line, line


def test_tls_against_a_plain_port_fails_fast_and_says_so(redis_url: str) -> None:
    """A plain server never answers a TLS ClientHello: the handshake is given a short
    timeout of its own, not the 5 s reply timeout (then "Timeout connecting")."""
    parts = urlsplit(redis_url)
    started = time.monotonic()
    line = one_line_error(streamq("info", "S", url=parts._replace(scheme="rediss").geturl()), 3)
    took = time.monotonic() - started  # a Python start included
    assert f"TLS handshake with {parts.hostname}:{parts.port} got no answer" in line, line
    assert "use redis:// for it" in line, line
    assert took < 3.5, f"took {took:.1f} s"


def test_a_database_index_the_server_lacks_is_a_usage_error(
    redis_url: str, on_cluster: bool
) -> None:
    if on_cluster:
        pytest.skip("a cluster has database 0 only, and refuses SELECT otherwise")
    parts = urlsplit(redis_url)
    line = one_line_error(streamq("info", "S", url=parts._replace(path="/9999").geturl()), 2)
    assert "no database of the URL's index" in line, line


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("reserved", ["#", "/", "?"])
@pytest.mark.parametrize(
    "command", [("info", "s"), ("dashboard", "--port", "0"), ("scheduled", "list", "s")]
)
def test_a_url_whose_password_holds_a_reserved_character_is_named_not_shown(
    redis_url: str, reserved: str, command: tuple[str, ...]
) -> None:
    host = urlsplit(redis_url).netloc.rpartition("@")[2]
    url = f"redis://:S3cr{reserved}3tPW@{host}/0"
    line = one_line_error(streamq(*command, url=url), 2)
    assert "percent-encoded" in line
    assert "S3cr" not in line and "3tPW" not in line


def test_scheduled_cancel_without_an_id_is_a_usage_error(redis_url: str, stream: str) -> None:
    line = one_line_error(streamq("scheduled", "cancel", stream, url=redis_url), 2)
    assert "scheduled cancel needs the scheduled ID" in line, line


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("redis://u:S3cr3tPW@127.0.0.1:port/0", "redis://[[user]:password@]host[:port][/db]"),
        ("redis://127.0.0.1:6379/x", "redis://[[user]:password@]host[:port][/db]"),
        ("redis+sentinel://u:S3cr3tPW@h:1", "redis+sentinel://[user:password@]host:port"),
    ],
)
def test_a_url_error_shows_its_url_form_whole_and_no_password(url: str, hint: str) -> None:
    line = one_line_error(streamq("info", "s", url=url), 2)
    assert hint in line and "***@]" not in line, line
    assert "S3cr3tPW" not in line
