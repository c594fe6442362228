"""A tuple SUnion holds comes back from a restart image's pickle with every field."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from services.core.tuples import TupleType
from services.dpc.buckets import STuple

tuples = st.builds(
    STuple,
    st.sampled_from(list(TupleType)),
    st.integers(0, 8),
    st.integers(0, 2**40),
    st.integers(-(2**40), 2**40),
    st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4) | st.none(), max_size=4),
    st.integers(-(2**40), 2**40),
    st.integers(-1, 2**40),
)


@given(st.lists(tuples, max_size=20))
def test_a_pickled_tuple_keeps_every_field_and_its_type(ts: list[STuple]) -> None:
    back = pickle.loads(pickle.dumps(ts, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == ts
    assert all(type(b) is STuple and isinstance(b.type, TupleType) for b in back)
