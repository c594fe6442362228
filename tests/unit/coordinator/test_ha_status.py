"""``hastream status`` shows the HA node partitions and the crash loops the coordinator reports."""

from __future__ import annotations

from rich.console import Console

from services.cli.ha_status import crash_loops, ha_table


def test_the_ha_table_shows_vulnerable_partitions_takeovers_and_standby_lag() -> None:
    st = {
        "schemes": {"a": "passive_standby", "b": "active_standby"},
        "ha_partitions": [
            {"node": "a", "partition": 0, "live": 1, "takeover_s": 0.42},
            {"node": "b", "partition": 0, "live": 2, "takeover_s": None},
        ],
        "standby": [{"node": "b", "partition": 0, "replica": 1, "held": 37, "checkpoint_lag_s": None}],
        "crash_looping": [{"node": "a", "partition": 0, "replica": 1}],
    }
    table = ha_table(st)
    assert table is not None
    console = Console(width=200, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    row_a = next(line for line in lines if "passive_standby" in line)
    row_b = next(line for line in lines if "active_standby" in line and "passive" not in line)
    assert "(vulnerable)" in row_a and "0.42 s" in row_a
    assert "(vulnerable)" not in row_b and "r1: 37 held" in row_b
    assert crash_loops(st) == ["a p0 r1 is crash-looping: its process keeps exiting (see its log)"]


def test_no_ha_node_no_table() -> None:
    assert ha_table({"ha_partitions": []}) is None and crash_loops({}) == []
