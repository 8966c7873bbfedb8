"""``streamq pause|unpause STREAM GROUP [--type T]`` as an operator runs them, and the
paused groups in ``streamq info`` (with what their running consumers hold back)."""

from __future__ import annotations

import json
import time

import pytest

from streamq import Publisher
from streamq.cli.main import main
from streamq.flow.waiting import REPORT_FRESH
from streamq.topic.partitions import partition_streams
from streamq.wire.keys import Keys
from tests.helpers.cli import streamq
from tests.helpers.clients import sync_client


def run(capsys: pytest.CaptureFixture[str], *args: str, url: str) -> tuple[int, str, str]:
    """The command run in this process: exit code (a usage error's too), stdout, stderr."""
    try:
        code = main(["--url", url, *args])
    except SystemExit as e:  # argparse's usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


@pytest.mark.slow
def test_an_operator_pauses_and_resumes_a_group_from_the_shell(redis_url: str, stream: str) -> None:
    r = sync_client(redis_url, stream)
    r.xgroup_create(stream, "workers", id="0", mkstream=True)
    paused = streamq("pause", stream, "workers", url=redis_url)
    assert paused.returncode == 0 and paused.stdout.strip() == "paused group 'workers'"
    assert "--type" in streamq("pause", "--help", url=None).stdout
    info = streamq("info", stream, url=redis_url).stdout
    assert "  paused: the whole group" in info
    assert r.hkeys(Keys(stream).paused("workers")) == [b"*"]
    assert "pause" in streamq("--help", url=None).stdout
    assert "unpause" in streamq("--help", url=None).stdout


def test_pause_and_unpause_a_type_and_the_group_say_what_stays_paused(
    redis_url: str, stream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r = sync_client(redis_url, stream)
    r.xgroup_create(stream, "workers", id="0", mkstream=True)
    assert run(capsys, "pause", stream, "workers", "--type", "email", url=redis_url) == (
        0, "paused type 'email' in group 'workers'", "",
    )  # fmt: skip
    assert run(capsys, "pause", stream, "workers", url=redis_url)[1] == "paused group 'workers'"
    assert run(capsys, "pause", stream, "workers", url=redis_url)[1] == (
        "group 'workers' was paused already"
    )
    code, out, _ = run(capsys, "info", stream, url=redis_url)
    assert "  paused: the whole group, 'email'" in out
    assert run(capsys, "unpause", stream, "workers", url=redis_url)[1] == (
        "resumed group 'workers' (still paused: 'email')"
    )
    code, _, err = run(capsys, "unpause", stream, "workers", url=redis_url)
    assert code == 1 and err.endswith("group 'workers' is not paused (still paused: 'email')")
    assert run(capsys, "unpause", stream, "workers", "--type", "email", url=redis_url)[1] == (
        "resumed type 'email' in group 'workers'"
    )
    assert not r.exists(Keys(stream).paused("workers"))
    assert "paused" not in run(capsys, "info", stream, url=redis_url)[1]


def test_a_partitioned_topic_is_paused_once_for_all_its_partitions(
    where: str, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Publisher(where, stream=topic, partitions=2) as publisher:
        publisher.publish("job", 1)
    for partition in partition_streams(topic, 2):
        sync_client(where, partition).xgroup_create(partition, "workers", id="0", mkstream=True)
    assert run(capsys, "pause", topic, "workers", "--type", "job", url=where)[0] == 0
    assert sync_client(where, topic).hkeys(Keys(topic).paused("workers")) == [b"job"]
    for partition in partition_streams(topic, 2):  # one record, on the topic's own slot
        assert not sync_client(where, partition).exists(Keys(partition).paused("workers"))
    assert "  paused: 'job'" in run(capsys, "info", topic, url=where)[1]


def test_info_shows_what_running_consumers_hold_back_as_they_reported_it(
    redis_url: str, stream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r = sync_client(redis_url, stream)
    r.xgroup_create(stream, "workers", id="0", mkstream=True)
    assert "waiting" not in run(capsys, "info", stream, url=redis_url)[1]
    now = int(time.time() * 1000)

    def report(at: int, pause: int, rate_limit: int, throttle: int) -> str:
        counts = {"at": at, "pause": pause, "rate_limit": rate_limit, "throttle": throttle}
        return json.dumps(counts)

    stale = now - int(REPORT_FRESH * 1000) - 1000  # a consumer that died: not counted
    r.hset(Keys(stream).waiting("workers"), mapping={
        "c1": report(now, 2, 0, 1), "c2": report(now, 1, 3, 0), "gone": report(stale, 9, 9, 9),
    })  # fmt: skip
    out = run(capsys, "info", stream, url=redis_url)[1]
    assert (
        "  waiting: pause 3, rate limit 3, throttle 1 (reported by 2 consumers within "
        f"{REPORT_FRESH:g} s)" in out
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("pause", "no-such-stream", "workers"), 1, "stream 'no-such-stream' does not exist"),
        (("pause", "{stream}", "nobody"), 1, "consumer group 'nobody' does not exist in"),
        (("unpause", "{stream}", "workers"), 1, "group 'workers' is not paused"),
        (("pause", "{stream}", "workers", "--type", "bad type"), 2, "a message type is 1 to 128"),
        (("pause", "{stream}"), 2, "the following arguments are required: group"),
        (("unpause", "{stream}", "workers", "--typ", "x"), 2, "unrecognized arguments"),
    ],
)
def test_pause_errors_are_one_line_and_exit_non_zero(
    redis_url: str,
    stream: str,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    sync_client(redis_url, stream).xgroup_create(stream, "workers", id="0", mkstream=True)
    result = run(capsys, *(a.replace("{stream}", stream) for a in args), url=redis_url)
    assert result[0] == code and result[1] == ""
    assert message in result[2] and len(result[2].splitlines()) == 1
