"""The consumer side of an exchange: each consumer partition merges its connections (one per producer
partition) by tuple time, and two replicas of it, reading the connections in different interleavings
and polling at different points, emit the same sequence: each key's results in their order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.core.partitioner import key_bytes, partition_for
from services.core.tuples import TupleType
from services.dpc.sunion import SUnion
from services.exchange.route import router
from tests.unit.dpc.test_sunion import BUCKET, END, interleave

KEYS = [f"k{i}" for i in range(9)]


@st.composite
def producer_output(draw: Any) -> list[tuple[dict, int]]:
    """One producer partition's results: keyed records in stime order."""
    out, stime = [], 0
    for i in range(draw(st.integers(0, 30))):
        stime += draw(st.integers(0, 6))
        out.append(({"k": draw(st.sampled_from(KEYS)), "n": i}, stime))
    return out


def connection_events(port: int, items: list[tuple[dict, int]], bounds: list[bool]) -> list[tuple]:
    """What one connection carries: its results with dense ids, boundaries after some, then the end."""
    events: list[tuple] = []
    for i, (rec, stime) in enumerate(items):
        events.append(("t", port, i, stime, rec))
        if bounds[i % len(bounds)]:
            events.append(("b", port, stime))
    return events + [("b", port, END)]


def merged(conns: list[list[tuple]], draw: Any) -> list[tuple]:
    su = SUnion(len(conns), BUCKET, delay_s=60)
    polls = draw(st.lists(st.booleans(), min_size=1, max_size=6))
    out = []
    for i, ev in enumerate(interleave(draw, conns)):
        if ev[0] == "t":
            su.push(ev[1], TupleType.STABLE, ev[2], ev[3], ev[4], 0.0)
        else:
            su.boundary(ev[1], ev[2])
        if polls[i % len(polls)]:
            out += su.poll(0.0)
    out += su.poll(0.0)
    assert all(t.type is TupleType.STABLE for t in out)
    return [(t.stime, t.port, t.id, t.rec["k"], t.rec["n"]) for t in out]


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 4))
def test_both_replicas_of_a_consumer_partition_merge_its_connections_alike(data: Any, ups: int, downs: int) -> None:
    produced = [data.draw(producer_output()) for _ in range(ups)]
    routed = []  # per producer partition: its results per consumer partition
    for items in produced:
        conns: list[list] = [[] for _ in range(downs)]
        router("k" if downs > 1 else None, conns)(items)
        routed.append(conns)
    bounds = data.draw(st.lists(st.booleans(), min_size=1, max_size=5))
    for i in range(downs):
        conns = [connection_events(j, routed[j][i], bounds) for j in range(ups)]
        first, second = merged(conns, data.draw), merged(conns, data.draw)
        assert first == second, f"consumer partition {i}: the replicas' orders differ"
        assert first == sorted(first[:])  # by (stime, connection, id): tuple time first
        mine = [
            (rec["k"], rec["n"])
            for items in produced
            for rec, _ in items
            if partition_for(key_bytes(rec["k"]), downs) == i
        ]
        assert sorted((k, n) for *_, k, n in first) == sorted(mine)
        for k in KEYS:  # a key's results come from one producer partition each, in its order
            for j in range(ups):
                ns = [n for _, port, _, kk, n in first if kk == k and port == j]
                assert ns == sorted(ns)
