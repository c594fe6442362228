"""``hastream coordinator SPEC``: run a deployment's coordinator; and the DPC-state table of ``hastream status``.

The coordinator's code is in ``services.coordinator``; this module only parses options and
prints. ``replica_states`` asks the coordinator's ``/status`` and, when it is not reachable,
reads the heartbeats topic itself, so ``status`` shows node states even with no coordinator.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from services.cli.common import fail, out, service_logging, settings_or_exit, spec_or_exit

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator

STATE_STYLE = {
    "STABLE": "green",
    "UPSTREAM_FAILURE": "yellow",
    "STABILIZATION": "cyan",
    "RECOVERING": "magenta",
    "FAILED": "red",
}


def coordinator(
    spec: Annotated[Path, typer.Argument(help="Query network spec (YAML).")],
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "-p",
            help="Port of the status page and JSON API (default: $HASTREAM_COORDINATOR_PORT, else 6066, or a free port while 6066 is taken).",
        ),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option("--bootstrap", "-b", help="Kafka bootstrap servers (default: $HASTREAM_BOOTSTRAP).")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="faust's local data dir (default: the deployment's dir, <home>/deployments/<spec name>/coordinator).",
            file_okay=False,
        ),
    ] = None,
    bind: Annotated[
        str | None,
        typer.Option(
            "--bind",
            help="Address the status page listens on (default: $HASTREAM_STATUS_HOST, else 127.0.0.1; 0.0.0.0 exposes it, unauthenticated, to every network).",
        ),
    ] = None,
    lease: Annotated[float, typer.Option(help="Seconds a grant is held at most when its DONE never comes.")] = 30.0,
    log_level: Annotated[str, typer.Option("--log-level", help="faust / coordinator log level.")] = "info",
) -> None:
    """Run the coordinator of a deployment until SIGTERM: replica states, failure detection,
    staggered reconciliation grants, status page on http://localhost:PORT/."""
    from services.coordinator.app import Coordinator
    from services.core.client_log import quiet_aiokafka
    from services.deploy.deployment import Deployment

    s = spec_or_exit(spec)
    settings = settings_or_exit(bootstrap)
    if lease <= 0:
        raise fail(f"--lease must be positive, got {lease}")
    service_logging("coordinator")
    quiet_aiokafka()
    port, host = _status_address(port, bind)
    coord = Coordinator(
        s,
        settings.bootstrap,
        port=port,
        lease_ms=int(lease * 1000),
        data_dir=data_dir or Deployment.dir_for(s.name) / "coordinator",
        bind=host,
    )
    _run(coord, log_level)


def _status_address(port: int | None, bind: str | None) -> tuple[int | None, str]:
    """(port, host) of the status page: the options', else the environment's; a port that is taken or
    no port is one error line."""
    from services.coordinator.address import PORT_ENV, env_host, env_port, port_free

    try:
        port = port if port is not None else env_port()
    except ValueError as e:
        raise fail(str(e)) from None
    host = bind or env_host()
    if port is not None and not (0 < port < 65536 and port_free(port, host)):
        raise fail(f"port {port} is in use or not a port (1..65535): pick another with --port or ${PORT_ENV}")
    return port, host


def _run(coord: Coordinator, log_level: str) -> None:
    """Run until SIGTERM; another coordinator of the deployment already running is one error line."""
    from services.coordinator.app import AnotherCoordinator

    try:
        coord.run(loglevel=log_level)
    except AnotherCoordinator as e:
        raise fail(str(e)) from None


def coordinator_port(dep: Any) -> int:
    """The port a deployment's coordinator serves on: what it recorded in its data dir, else its
    ``--port``, else $HASTREAM_COORDINATOR_PORT or 6066."""
    from services.coordinator.address import DEFAULT_PORT, env_port, port_file

    proc = next((p for p in dep.processes if p.role == "coordinator"), None)
    argv = proc.argv if proc is not None else []
    data_dir = Path(argv[argv.index("--data-dir") + 1]) if "--data-dir" in argv[:-1] else dep.dir / "coordinator"
    try:
        rec = json.loads(port_file(data_dir).read_text())
        if proc is None or rec.get("pid") == proc.pid:
            return int(rec["port"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if "--port" in argv[:-1]:
        try:
            return int(argv[argv.index("--port") + 1])
        except ValueError:
            pass
    try:
        return env_port() or DEFAULT_PORT
    except ValueError:
        return DEFAULT_PORT


def replica_states(dep: Any) -> tuple[str, list[dict[str, Any]], dict[str, Any] | None]:
    """(source, rows, the coordinator's status or None) of every node replica's DPC state: from the
    coordinator, else the heartbeats topic."""
    from services.coordinator.app import expected_replicas
    from services.coordinator.client import fetch_status, status_url
    from services.spec import load_spec

    spec = load_spec(Path(dep.spec_path))
    url = status_url(coordinator_port(dep))
    try:
        st = fetch_status(url, timeout=1.5)
        if st.get("spec") == spec.name:
            return f"coordinator {url.rsplit('/', 1)[0]}", st["replicas"], st
    except OSError:
        pass
    rows = _states_from_heartbeats(dep.bootstrap, spec, expected_replicas(spec))
    return "heartbeats topic (coordinator not reachable)", rows, None


def _states_from_heartbeats(bootstrap: str, spec: Any, expected: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    from services.control.messages import COORDINATOR, replica_key
    from services.control.monitor import ReplicaMonitor
    from services.control.states import NodeState
    from services.core.admin import admin_client
    from services.dpc.consistency import STARTING

    if spec.heartbeat_topic not in admin_client(bootstrap).list_topics(timeout=5).topics:
        return []
    mon = ReplicaMonitor(bootstrap, spec.heartbeat_topic, spec.dpc.failure_timeout / 1000.0)
    try:
        time.sleep(max(0.5, 2 * spec.dpc.heartbeat_interval / 1000.0))  # the latest heartbeats arrive
        seen = {replica_key(st.node, st.partition, st.replica): st for st in mon.snapshot() if st.node != COORDINATOR}
        keys = {replica_key(*e): e for e in expected}
        keys.update({k: (st.node, st.partition, st.replica) for k, st in seen.items()})
        rows, now = [], time.monotonic()
        for key, (node, p, r) in sorted(keys.items(), key=lambda kv: kv[1]):
            st = seen.get(key)
            rows.append(
                {
                    "node": node,
                    "partition": p,
                    "replica": r,
                    "state": mon.state(node, p, r).value if st else STARTING,  # as the coordinator shows it
                    "reported": st.state.value if st else None,
                    "age_ms": round((now - st.seen) * 1000) if st and st.seen is not None else None,
                    "pid": st.pid if st else 0,
                    "stable": st.stable if st else 0,
                    "lag": st.lag if st else 0,
                    "role": st.role if st else "",
                    "epoch": st.epoch if st else 0,
                    "seen": st is not None,
                    "reconciliation": None,
                }
            )
        coord = mon.state(COORDINATOR, 0, 0)
        if coord is not NodeState.FAILED:
            rows.append(
                {
                    "node": COORDINATOR,
                    "partition": 0,
                    "replica": 0,
                    "state": coord.value,
                    "reported": coord.value,
                    "age_ms": None,
                    "pid": 0,
                    "seen": True,
                    "reconciliation": None,
                }
            )
        return rows
    finally:
        mon.close()


def print_ha(st: dict[str, Any]) -> None:
    """The HA node partitions' table and the crash-loop warnings, from the coordinator's status."""
    from services.cli.ha_status import crash_loops, ha_table

    table = ha_table(st)
    if table is not None:
        out.print(table)
    for line in crash_loops(st):
        out.print(f"[red]{line}[/]")


def replica_table(title: str, rows: list[dict[str, Any]], schemes: dict[str, str] | None = None) -> Table:
    """``schemes``: node -> its recovery scheme, for the scheme column (the HA schemes add role and epoch)."""
    t = Table(title=title)
    schemes = schemes or {}
    for c in (
        "node",
        "partition",
        "replica",
        "scheme",
        "role",
        "DPC state",
        "last heartbeat",
        "stable out",
        "input lag",
        "pid",
        "reconciliation",
    ):
        t.add_column(c)
    for r in rows:
        state = r["state"]
        shown = f"[{STATE_STYLE.get(state, 'white')}]{state}[/]"
        if state == "FAILED" and r.get("reported"):
            shown += f" [dim](last {r['reported']})[/]"
        age = "never" if not r.get("seen") else ("-" if r.get("age_ms") is None else f"{r['age_ms'] / 1000:.1f} s ago")
        t.add_row(
            r["node"],
            str(r["partition"]),
            str(r["replica"]),
            schemes.get(r["node"], ""),
            f"{r['role']} (epoch {r.get('epoch', 0)})" if r.get("role") else "-",
            shown,
            age,
            str(r.get("stable", "")) if r.get("seen") else "",
            str(r.get("lag", "")) if r.get("seen") else "",
            str(r.get("pid") or ""),
            r.get("reconciliation") or "-",
        )
    return t


def print_replica_states(dep: Any) -> None:
    """The DPC-state table under a deployment's process table (``hastream status``)."""
    try:
        source, rows, st = replica_states(dep)
    except Exception as e:  # a broker that is gone, a spec that moved: status still shows the processes
        out.print(f"[dim]node replica states unavailable: {type(e).__name__}: {e}[/]")
        return
    if not rows:
        out.print("[dim]no node heartbeats yet[/]")
        return
    from services.spec import load_spec

    schemes = {n: nd.ha.scheme.value for n, nd in load_spec(Path(dep.spec_path)).nodes.items()}
    out.print(replica_table(f"{dep.name}: node replicas (from {source})", rows, schemes))
    if st is not None:
        print_ha(st)
