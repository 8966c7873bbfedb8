"""Typed settings. Every bad value is a ConfigError naming the argument, a
typo names the closest valid setting (and fails type checking), strings are refused alike."""

from __future__ import annotations

import inspect
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from streamq import (
    BatchConfig,
    CleanupPolicy,
    ConfigError,
    ConsumerConfig,
    MessageQueue,
    Publisher,
    RetryPolicy,
    Router,
)

URL = "redis://127.0.0.1:1/0"


def test_a_misspelt_setting_names_the_closest_valid_one() -> None:
    with pytest.raises(ConfigError, match=r"'concurency' \(did you mean 'concurrency'\?\)"):
        MessageQueue(URL, stream="s", concurency=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("wrong", "meant"),
    [
        ("compresion", "compression"),
        ("rate_limit", "rate_limits"),
        ("encrypt_metas", "encrypt_meta"),
        ("orderd", "ordered"),
        ("encyption", "encryption"),
        ("on_newer_versions", "on_newer_version"),
    ],
)
def test_every_argument_of_the_queue_is_suggested_and_listed(wrong: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=rf"{wrong!r} \(did you mean {meant!r}\?\)") as e:
        typo: dict[str, Any] = {wrong: None}
        MessageQueue(URL, stream="s", **typo)
    listed = str(e.value).partition("Valid: ")[2].split(", ")
    assert listed == [
        name for name in inspect.signature(MessageQueue).parameters if name != "unknown"
    ]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("grace", "10s"),
        ("grace", "10"),  # accepted before while concurrency="3" was refused
        ("concurrency", "3"),
        ("concurrency", True),
        ("claim_idle", float("nan")),
        ("block", -1),
        ("max_in_flight", 0),
    ],
)
def test_bad_values_are_config_errors_naming_the_argument(setting: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=setting):
        MessageQueue(URL, stream="s", **{setting: value})


def test_durations_are_normalised_once_to_float_seconds() -> None:
    mq = MessageQueue(URL, stream="s", grace=timedelta(milliseconds=1500), claim_idle=2)
    assert mq.config.grace == 1.5 and isinstance(mq.config.grace, float)
    assert mq.config.claim_idle == 2.0 and isinstance(mq.config.claim_idle, float)
    # typed float (what it holds once normalised): a timedelta is accepted at run time only
    assert RetryPolicy(backoff=timedelta(seconds=1)).backoff == 1.0  # type: ignore[arg-type]
    assert BatchConfig(timeout=1).timeout == 1.0


def test_keywords_win_over_a_config_object() -> None:
    base = ConsumerConfig(concurrency=4, grace=3.0)
    mq = MessageQueue(URL, stream="s", config=base, grace=7)
    assert (mq.config.concurrency, mq.config.grace) == (4, 7.0)


def test_policies_refuse_strings_too() -> None:
    with pytest.raises(ConfigError, match=r"RetryPolicy\.backoff"):
        RetryPolicy(backoff="1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bisect"):
        BatchConfig(bisect="no")  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_typo_fails_type_checking(tmp_path: Path) -> None:
    snippet = tmp_path / "typo.py"
    snippet.write_text(
        "from streamq import MessageQueue\nMessageQueue(concurency=3)\nMessageQueue(grace='10s')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(snippet)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout
    assert 'Argument "concurency" to "MessageQueue" has incompatible type' in result.stdout
    assert 'Argument "grace" to "MessageQueue" has incompatible type "str"' in result.stdout


@pytest.mark.parametrize("delay", [-1, float("nan"), timedelta(seconds=-1)])
def test_a_negative_retry_delay_is_a_config_error(delay: Any) -> None:
    from streamq import Retry

    with pytest.raises(ConfigError, match="Retry delay"):
        Retry(delay=delay)


@pytest.mark.parametrize(
    ("make", "wrong", "meant"),
    [
        (RetryPolicy, "max_delivery", "max_deliveries"),
        (BatchConfig, "sise", "size"),
        (CleanupPolicy, "enable", "enabled"),
        (ConsumerConfig, "concurency", "concurrency"),
    ],
)
def test_a_misspelt_policy_field_names_the_closest_valid_one(
    make: type, wrong: str, meant: str
) -> None:
    with pytest.raises(
        ConfigError, match=rf"{make.__name__} argument {wrong!r} \(did you mean {meant!r}\?\)"
    ):
        make(**{wrong: 1})


def test_a_queue_without_a_stream_is_an_error_not_a_made_up_stream() -> None:
    with pytest.raises(
        ConfigError, match=r'MessageQueue needs a stream: MessageQueue\(stream="orders"'
    ):
        MessageQueue(URL)
    with pytest.raises(ConfigError, match=r"'steam' \(did you mean 'stream'\?\)"):
        MessageQueue(URL, steam="orders")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Publisher needs a stream"):
        Publisher(URL)


def test_an_ownership_lease_past_an_hour_is_refused() -> None:
    """Expiries further ahead than the longest lease are taken for damaged, so no lease
    may be longer."""
    from streamq.config import ConsumerConfig

    assert ConsumerConfig(ownership_lease=3600).ownership_lease == 3600.0
    with pytest.raises(ConfigError, match="at most 3600s"):
        ConsumerConfig(ownership_lease=3601)


@pytest.mark.parametrize(
    ("decorator", "wrong", "meant"),
    [
        ("handler", "rates", "rate"),
        ("batch_handler", "sise", "size"),
        ("periodic", "evry", "every"),
    ],
)
def test_a_misspelt_registration_option_names_the_closest_valid_one(
    decorator: str, wrong: str, meant: str
) -> None:
    """On a queue and on a Router alike: a ConfigError with the closest option, not
    Python's TypeError naming only the wrong one."""
    for owner in (MessageQueue(URL, stream="orders"), Router()):
        with pytest.raises(
            ConfigError, match=rf"{decorator}\(\) argument {wrong!r} \(did you mean {meant!r}\?\)"
        ):
            getattr(owner, decorator)("order", **{wrong: 1})
