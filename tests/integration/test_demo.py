"""The README's first command: the demo runs end to end on its own embedded broker."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.integration.test_deploy import hastream

pytestmark = pytest.mark.integration


def _demo(env: dict[str, str]) -> tuple[int, int, int]:
    """Run the demo as the README does; (readings in, window results out, alerts out). A plain
    read_committed consumer of hot_stats' egress topic reads as many window results as hastream's reader."""
    r = hastream("demo", "--seconds", "4", "--rate", "200", env=env, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = re.search(
        r"done: (\d+) readings in; (\d+) window results and (\d+) alerts out; (\d+) window results on "
        r"demo.hot_stats.stable",
        r.stdout,
    )
    assert m, r.stdout[-2000:]
    assert m.group(4) == m.group(2), "the egress topic holds each stable window result once"
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def test_demo_runs_on_a_fresh_home_and_again_shows_only_its_own_results(tmp_path: Path) -> None:
    """The demo feeds its input through an ingress, as any Kafka producer would. A second run on the
    same broker starts from fresh topics: its results are its own input's, not added to the first's."""
    env = {**os.environ, "HASTREAM_HOME": str(tmp_path / "home")}
    env.pop("HASTREAM_BOOTSTRAP", None)
    first = _demo(env)
    assert first[0] == 800 and first[1] > 0 and first[2] > 0, first
    again = _demo(env)
    assert again[0] == 800 and again[1] > 0, again
    assert again[2] == first[2], "the same seeded readings give the same alerts, and only those"
