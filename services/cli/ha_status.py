"""What ``hastream status`` shows of the HA nodes, from the coordinator's status: per node partition
its scheme, live replicas (one: vulnerable, a failure now is an outage), the last takeover's time and
how far its secondaries are behind; then the replicas that keep restarting."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def ha_table(st: dict[str, Any]) -> Table | None:
    """None when the deployment has no HA node."""
    parts = st.get("ha_partitions") or []
    if not parts:
        return None
    behind: dict[tuple[str, int], list[str]] = {}
    for r in st.get("standby") or []:
        lag = f"r{r['replica']}: " + (
            f"checkpoint {r['checkpoint_lag_s']:.1f} s old"
            if r["checkpoint_lag_s"] is not None
            else f"{r['held']} held"
        )
        behind.setdefault((r["node"], r["partition"]), []).append(lag)
    t = Table(title="HA node partitions (from the coordinator)")
    for c in ("node", "partition", "scheme", "live replicas", "last takeover", "standby lag"):
        t.add_column(c)
    schemes = st.get("schemes") or {}
    for p in parts:
        live = str(p["live"]) + (" [red](vulnerable)[/]" if p["live"] <= 1 else "")
        took = "-" if p["takeover_s"] is None else f"{p['takeover_s']:.2f} s"
        lags = ", ".join(behind.get((p["node"], p["partition"]), [])) or "-"
        t.add_row(p["node"], str(p["partition"]), schemes.get(p["node"], ""), live, took, lags)
    return t


def crash_loops(st: dict[str, Any]) -> list[str]:
    """One line per replica restarted again and again lately."""
    return [
        f"{r['node']} p{r['partition']} r{r['replica']} is crash-looping: its process keeps exiting (see its log)"
        for r in st.get("crash_looping") or []
    ]
