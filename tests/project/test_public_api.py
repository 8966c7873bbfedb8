"""The public surface: names match DESIGN.md and __all__ is complete and sorted."""

from __future__ import annotations

import inspect

import streamq


def test_all_is_sorted_tuple_of_existing_names() -> None:
    assert isinstance(streamq.__all__, tuple)
    assert list(streamq.__all__) == sorted(streamq.__all__)
    missing = [name for name in streamq.__all__ if not hasattr(streamq, name)]
    assert not missing, f"__all__ names that do not exist: {missing}"


def test_all_lists_every_public_class_exported() -> None:
    exported = {
        name
        for name, value in vars(streamq).items()
        if not name.startswith("_") and inspect.isclass(value)
    }
    assert exported <= set(streamq.__all__), exported - set(streamq.__all__)


def test_design_names_exist() -> None:
    for name in ("MessageQueue", "Message", "StartFrom", "BatchConfig", "CleanupPolicy",
                 "RetryPolicy", "Retry", "Reject", "StreamqError"):  # fmt: skip
        assert name in streamq.__all__
    mq_api = ("handler", "batch_handler", "register", "publish", "publish_many", "run", "stop",
              "stop_message", "resume_message", "terminate_topic", "topic_info", "cleanup",
              "seek", "dead_letters", "replay_dead_letter", "purge_dead_letters")  # fmt: skip
    missing = [name for name in mq_api if not hasattr(streamq.MessageQueue, name)]
    assert not missing, missing


def test_every_error_derives_from_root() -> None:
    from streamq import errors

    classes = [
        v for v in vars(errors).values() if inspect.isclass(v) and v.__module__ == errors.__name__
    ]
    assert all(issubclass(c, streamq.StreamqError) for c in classes)
    assert issubclass(streamq.ConfigError, ValueError)
    assert not issubclass(streamq.Retry, streamq.StreamqError), "signals are not errors"


def test_at_most_ten_public_modules_at_the_top() -> None:
    """The top of the package holds the modules a user imports by name (streamq.testing,
    streamq.metrics, ...); every other part lives in its folder or is private (``_name``)."""
    from pathlib import Path

    top = Path(streamq.__file__).parent
    public = sorted(p.stem for p in top.glob("*.py") if not p.stem.startswith("_"))
    assert len(public) <= 10, f"{len(public)} public modules at the top of streamq/: {public}"
