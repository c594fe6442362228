"""Ex-Prod's routing: each result to the connection of its key's consumer partition, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.core.partitioner import key_bytes, partition_for
from services.exchange.route import router


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
