"""Passive standby's checkpoints over fakes: a chain that starts with an image and goes on in
deltas, an image again once the deltas add up to one, and a standby that applies them holds the
primary's operator state at every checkpoint."""

from __future__ import annotations

import pickle

import pytest

from services.control.messages import RoleOrder
from services.core.tuples import BOUNDARY, STABLE
from services.ha.passive_standby import PassiveStandbyScheme
from services.node import restart, resume
from services.node.restart import RestartDelta, RestartImage
from services.spec import parse_spec
from tests.unit.dpc.fake_node import FakeNode
from tests.unit.operators.test_deltas import plain

SPEC = parse_spec("""\
name: ps
streams:
  a: {schema: reading, key: sensor}
  b: {schema: window_stat, key: key}
operators:
  win: {type: window, input: a, output: b, key: sensor, size: 400, slide: 100,
        aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}
nodes:
  n: {operators: [win], replicas: 2, ha: {scheme: passive_standby, interval_ms: 50}}
""")


@pytest.fixture
def primary(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    """Replica 0 made primary of a node nothing was written for yet."""
    monkeypatch.setattr(restart, "load", lambda bootstrap, topic, partition: None)
    monkeypatch.setattr(resume, "last_stable_id", lambda bootstrap, topic, partition: None)
    node = FakeNode(SPEC, "n", replica=0)
    node.images.last_bytes = 10**9  # no image is due again but where a test says so
    node.scheme.on_restart()
    node.scheme.on_control(RoleOrder("n", 0, 0, role="primary", epoch=1), 0.0)
    node.scheme.next_image = 0.0  # a checkpoint after every batch
    return node


def run(node: FakeNode, checkpoints: int, keys: int = 3, start: int = 0) -> None:
    """One batch of input per checkpoint, ``keys`` sensors each, time moving 30 ms a batch (from batch ``start``)."""
    for i in range(start, start + checkpoints):
        t = 1000 + 30 * i
        recs = [{"sensor": f"s{k}", "ts": t, "value": float(k + i), "seq": i} for k in range(keys)]
        msgs = [node.message("a", STABLE, i * keys + j, t, r) for j, r in enumerate(recs)]
        node.step([*msgs, node.message("a", BOUNDARY, (i + 1) * keys - 1, t + 1)], float(i + 1))
        node.scheme.next_image = 0.0


def checkpoints(node: FakeNode) -> list[RestartImage | RestartDelta]:
    return [pickle.loads(w.value or b"") for w in node.producer.topics["ps.restart.n"]]


def test_a_chain_starts_with_an_image_and_goes_on_in_numbered_deltas(primary: FakeNode) -> None:
    run(primary, 6)
    written = checkpoints(primary)
    assert isinstance(written[0], RestartImage) and written[0].seq == 1
    assert all(isinstance(c, RestartDelta) for c in written[1:])
    assert [c.seq for c in written] == [1, 2, 3, 4, 5, 6] and len({c.chain for c in written}) == 1


def test_an_image_goes_besides_the_deltas_once_they_weigh_four_images(primary: FakeNode) -> None:
    primary.images.last_bytes = 3000  # the image written at the start, as the writer reports it; deltas ~1 kB
    run(primary, 20)
    written = checkpoints(primary)
    images = [c.seq for c in written if isinstance(c, RestartImage)]
    deltas = [c for c in written if isinstance(c, RestartDelta)]
    assert images[0] == 1 and len(images) >= 2, "a second image once the deltas weigh four"
    assert set(images[1:]) <= {d.seq for d in deltas}, "it comes with the delta of its checkpoint, for a follower"
    assert sum(len(pickle.dumps(d)) for d in deltas if d.seq <= images[1]) >= 4 * 3000


def test_an_image_goes_instead_of_a_delta_weighing_half_of_it(primary: FakeNode) -> None:
    """A small state that changes nearly whole every interval: its image costs no more than a delta."""
    primary.images.last_bytes = 1500
    run(primary, 5)
    assert all(isinstance(c, RestartImage) for c in checkpoints(primary))


def test_a_failed_write_makes_the_next_checkpoint_an_image(primary: FakeNode) -> None:
    run(primary, 3)
    primary.images.failed = 1
    run(primary, 1)
    assert isinstance(checkpoints(primary)[-1], RestartImage)


def test_a_standby_applying_the_checkpoints_holds_the_primary_state_at_each(primary: FakeNode) -> None:
    standby = FakeNode(SPEC, "n", replica=1)
    scheme, ps = standby.scheme, primary.scheme
    assert isinstance(scheme, PassiveStandbyScheme) and isinstance(ps, PassiveStandbyScheme)
    at_checkpoint: list[object] = []
    checkpoint = ps._checkpoint

    def recorded() -> None:
        checkpoint()
        at_checkpoint.append(plain([op.state() for op in primary.pipeline.operators]))

    ps._checkpoint = recorded  # type: ignore[method-assign]
    primary.images.last_bytes = 3500  # an image now and then, instead of a delta or besides
    run(primary, 30, keys=5)
    images = 0
    for c in checkpoints(primary):  # an image comes right after the delta of the same checkpoint
        if isinstance(c, RestartImage):
            images += 1
            scheme._take_image(c)
        else:
            scheme._take_delta(c)
        want = at_checkpoint[c.seq - 1]
        assert plain([op.state() for op in standby.pipeline.operators]) == want, f"at checkpoint {c.seq}"
    deltas = [c for c in checkpoints(primary) if isinstance(c, RestartDelta)]
    assert images >= 3 and len(deltas) >= 10 and scheme.applied == len(deltas)


def test_the_primary_reports_a_checkpoint_as_its_restart_point_once_it_is_written(primary: FakeNode) -> None:
    """ha-review D1: the coordinator trims the log no further than what a takeover from the newest
    written checkpoint checks; a checkpoint still in the writer's queue is not that yet."""
    assert primary.keeps == {"b": 0}  # the takeover's own point: nothing written before it
    run(primary, 20)
    next_id = primary.scheme.path.soutputs["b"].next_id
    assert next_id > 0 and primary.keeps == {"b": next_id}
    primary.images.hold = True
    run(primary, 10, start=20)
    assert primary.keeps == {"b": next_id}, "a checkpoint not yet written is no restart point"
    needs = dict(primary.needs)
    primary.images.release()
    run(primary, 1, start=30)
    assert primary.keeps == {"b": primary.scheme.path.soutputs["b"].next_id} != {"b": next_id}
    # and its input: a takeover replays from the checkpoint's offsets (ha-review D4)
    assert primary.needs == checkpoints(primary)[-1].offsets and primary.needs["ps.a"] > needs["ps.a"]
