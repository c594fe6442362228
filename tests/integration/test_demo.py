"""The README's first command: the demo runs end to end on its own embedded broker."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.integration.test_deploy import hastream

pytestmark = pytest.mark.integration


def test_demo_runs_on_a_fresh_home_and_shows_results(tmp_path: Path) -> None:
    env = {**os.environ, "HASTREAM_HOME": str(tmp_path / "home")}
    env.pop("HASTREAM_BOOTSTRAP", None)
    r = hastream("demo", "--seconds", "4", "--rate", "200", env=env, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = re.search(r"done: (\d+) readings in; (\d+) window results and (\d+) alerts out", r.stdout)
    assert m, r.stdout[-2000:]
    assert int(m.group(1)) == 800 and int(m.group(2)) > 0, m.group(0)
