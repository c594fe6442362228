"""Ex-Prod's routing: each result to the connection of its key's consumer partition, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.core.partitioner import key_bytes, partition_for
from services.exchange.route import checked, router


@given(
    st.lists(st.tuples(st.one_of(st.text(max_size=6), st.integers(-5, 5)), st.integers(0, 10**6)), max_size=60),
    st.integers(1, 5),
)
def test_each_result_goes_to_its_keys_partition_in_the_order_it_came(rows: list, parts: int) -> None:
    conns: list[list] = [[] for _ in range(parts)]
    emit = router("k", conns)
    items = [({"k": k, "n": i}, t) for i, (k, t) in enumerate(rows)]
    half = len(items) // 2
    emit(items[:half])
    emit(items[half:])
    for p, got in enumerate(conns):
        assert got == [it for it in items if partition_for(key_bytes(it[0]["k"]), parts) == p]


def test_one_consumer_partition_takes_everything_without_a_key() -> None:
    only: list = []
    router(None, [only])([({"a": 1}, 5), ({"a": 2}, 6)])
    assert only == [({"a": 1}, 5), ({"a": 2}, 6)]


def test_a_consumer_partition_rejects_what_was_routed_to_another_and_keeps_the_rest_in_order() -> None:
    parts, me = 3, 1
    keys = [f"k{i}" for i in range(12)]
    items = [({"k": k, "n": i}, i) for i, k in enumerate(keys)]
    taken: list = []
    rejected: list = []
    checked(taken.extend, "k", parts, me, lambda it, why: rejected.append((it, why)))(items)
    mine = [it for it in items if partition_for(key_bytes(it[0]["k"]), parts) == me]
    assert taken == mine and 0 < len(mine) < len(items)
    assert [it for it, _ in rejected] == [it for it in items if it not in mine]
    other = partition_for(key_bytes(rejected[0][0][0]["k"]), parts)
    assert rejected[0][1] == f"routed to partition 1, but CRC32 of its 'k' picks partition {other} of 3"
