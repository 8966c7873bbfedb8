"""The retry delay of the read loops, listeners and the worker supervisor."""

from __future__ import annotations

from streamq._backoff import Backoff


def test_doubles_up_to_its_most_and_starts_over_after_a_success() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5
