"""The checks of `make demo-cluster` fail when they should: an order lost, handled out of
order, or stored outside its key's partition makes the demo exit non-zero."""

from __future__ import annotations

from demos.cluster import PARTITIONS, Handled, handled_order_problems, stored_order_problems
from streamq.topic.partitions import partition_for_key


def handled(customer: str, *seqs: int) -> list[Handled]:
    return [Handled(f"0:{100 + seq}-0", customer, seq, 1) for seq in seqs]


def test_increasing_per_worker_is_in_order_even_when_split_over_two_workers() -> None:
    problems, repeats = handled_order_problems(
        {"w1": handled("ada", 0, 2, 3) + handled("bob", 0, 1), "w2": handled("ada", 1, 4)}
    )
    assert (problems, repeats) == ([], 0)


def test_an_order_handled_once_after_a_later_one_is_disorder() -> None:
    problems, _ = handled_order_problems({"w1": handled("ada", 0, 2, 1)})
    assert problems == ["w1: ada #1 after #2"]


def test_an_order_handled_again_is_a_repeat_not_disorder() -> None:
    # redelivered to another worker after the failover, and added twice by a retried publish
    problems, repeats = handled_order_problems(
        {"w1": handled("ada", 0, 1, 2, 1), "w2": handled("ada", 2)}
    )
    assert (problems, repeats) == ([], 1)


def test_stored_ids_must_be_increasing_and_in_the_keys_partition() -> None:
    home = partition_for_key("ada", PARTITIONS)
    elsewhere = (home + 1) % PARTITIONS
    assert stored_order_problems({"ada": [f"{home}:1-0", f"{home}:2-0"]}) == []
    assert stored_order_problems({"ada": [f"{home}:2-0", f"{home}:1-0"]}) == [
        "ada: IDs not increasing in publish order"
    ]
    assert stored_order_problems({"ada": [f"{home}:1-0", f"{elsewhere}:2-0"]}) == [
        "ada: published to several partitions"
    ]
