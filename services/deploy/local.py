"""The local launcher: a spec's services as local processes on an embedded or given broker.

``up`` provisions topics and starts the deployment's supervisor (``supervisor.py``), which
starts one process per node replica partition (a Spark node's too, each with its own Spark
session), or per node replica process where a node hosts several partitions in each (``processes:``) and restarts any that crashes, as compose's ``restart: on-failure``
does; ``down`` has it stop them with SIGTERM so each flushes and commits. Processes are
started and signalled through ``processes``. The deployment's record is ``deployment.py``,
its topics ``topics.py``, its broker ``broker.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from services.core import metrics
from services.core.admin import delete_topics
from services.core.login import Login
from services.core.logs import rotate
from services.core.paths import REPO_ROOT, hastream_home
from services.deploy import access, processes
from services.deploy.broker import admin_login, check_login, embedded_broker, release_broker
from services.deploy.deployment import Deployment, Process
from services.deploy.topics import owned_topics, provision
from services.spec import Spec
from services.spec.egress import egress_units, replicated


def service_env(bootstrap: str) -> dict[str, str]:
    """Environment of every service: the same variables docker-compose.yml sets."""
    env = dict(os.environ)
    env["HASTREAM_BOOTSTRAP"] = bootstrap
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def process_env(env: dict[str, str], proc: Process, logins: dict[str, Login] | None = None) -> dict[str, str]:
    """``env`` with what is the process's own: its metrics port, and its login (only its own) when
    the deployment has ``logins``."""
    own = {metrics.PORT_ENV: str(proc.metrics_port)} if proc.metrics_port else {}
    if logins:
        own.update(access.login_env(logins.get(proc.login)))
    return {**env, **own} if own else env


def service_commands(spec: Spec, spec_path: Path) -> list[tuple[str, list[str]]]:
    """(role, argv) of every process of the deployment: the coordinator, then nodes upstream first,
    then the egresses (``services.egress.service``)."""
    cli = [sys.executable, "-m", "services.cli.main"]
    out = [("coordinator", [*cli, "coordinator", str(spec_path)])]
    egresses = egress_units(spec)
    for name, replicas, partitions in replicated(spec):
        if name in egresses:
            stream, e = egresses[name]
            argv = ["egress", str(spec_path), stream, "--mode", e.mode]
        else:
            argv = ["node", "run", str(spec_path), name]
        hosts = spec.node_processes(name) if name in spec.nodes else partitions
        for r in range(replicas):
            if hosts < partitions:  # each process hosts several partition tasks (``services.node.tasks``)
                for q in range(hosts):
                    out.append((f"{name}.r{r}.proc{q}", [*cli, *argv, "--process", str(q), "--replica", str(r)]))
                continue
            for p in range(partitions):
                out.append((f"{name}.r{r}.p{p}", [*cli, *argv, "--partition", str(p), "--replica", str(r)]))
    return out


def up(
    spec: Spec,
    spec_path: Path,
    bootstrap: str | None = None,
    brokers: int = 1,
    sasl: bool | None = None,
    *,
    fresh: bool = False,
) -> Deployment:
    """Start the broker (unless given), create topics, and with SASL (``sasl``, or None: whatever the
    embedded broker takes) a user per service with its ACLs; then start every service under a supervisor.
    ``fresh`` first deletes what an earlier run of the deployment left: its records and its topics."""
    try:
        existing = Deployment.load(spec.name)
        if existing.running():
            raise RuntimeError(f"deployment '{spec.name}' is already running (stop it with: hastream down {spec.name})")
    except LookupError:
        pass
    kafka_dir = None
    if bootstrap is None:
        bootstrap, kafka_dir = embedded_broker(brokers, sasl)
    admin = admin_login(bootstrap, sasl)
    if fresh:
        _start_over(spec, bootstrap, admin)
    dep = Deployment(spec.name, str(spec_path.resolve()), bootstrap, kafka_dir, started=time.time())
    dep.processes = [
        Process(role, 0, str(dep.dir / "logs" / f"{role}.log"), argv)
        for role, argv in service_commands(spec, spec_path.resolve())
    ]
    if admin is None:
        provision(spec, bootstrap)
    else:
        _provision_access(spec, dep, admin)
    logs = dep.dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    taken = [p.metrics_port for d in Deployment.all() if d.name != dep.name and d.supervised() for p in d.processes]
    for proc, port in zip(dep.processes, metrics.choose_ports(len(dep.processes), taken), strict=False):
        proc.metrics_port = port
    for f in [str(logs / "supervisor.log"), *(p.log for p in dep.processes)]:
        rotate(f)  # one file per run: the last runs' logs are kept as .1, .2
    dep.clear_requests()
    dep.save()
    env = {**service_env(bootstrap), "HASTREAM_HOME": str(hastream_home().resolve())}
    argv = [sys.executable, "-m", "services.deploy.supervisor", spec.name]
    return _wait_started(dep, processes.spawn(argv, logs / "supervisor.log", env).pid)


def _start_over(spec: Spec, bootstrap: str, admin: Login | None) -> None:
    """Forget a stopped earlier run of the deployment: its records, and its topics on the broker."""
    try:
        remove(Deployment.load(spec.name))
    except LookupError:
        pass
    with access.acting_as(admin):
        delete_topics(bootstrap, owned_topics(spec))


def remove_topics(dep: Deployment, spec: Spec) -> list[str]:
    """Delete a stopped deployment's own topics on its broker (``owned_topics``); returns those deleted."""
    if dep.running():
        raise RuntimeError(f"deployment '{dep.name}' is running: stop it first with: hastream down {dep.name}")
    return delete_topics(dep.bootstrap, owned_topics(spec))


def _provision_access(spec: Spec, dep: Deployment, admin: Login) -> None:
    """As the admin: the topics, then a user per service with its ACLs, whose logins the deployment
    keeps (0600) and hands each process its own of."""
    with access.acting_as(admin):
        check_login(dep.bootstrap, admin)
        provision(spec, dep.bootstrap)
    logins = access.new_logins(spec, admin)
    access.provision(spec, dep.bootstrap, logins)
    access.save_logins(dep.dir, logins)
    dep.sasl = True
    for proc in dep.processes:
        proc.login = access.login_key(spec, proc.role)


def _wait_started(dep: Deployment, supervisor: int, timeout: float = 30) -> Deployment:
    """The deployment once its supervisor has started every service; raises if the supervisor dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = Deployment.load(dep.name)
        if d.supervisor == supervisor and all(p.pid > 0 for p in d.processes):
            return d
        if not processes.pid_alive(supervisor):
            break
        time.sleep(0.05)
    lines = (dep.dir / "logs" / "supervisor.log").read_text(errors="replace").strip().splitlines()
    raise RuntimeError(
        f"the supervisor of '{dep.name}' did not start its services: {lines[-1] if lines else 'no output'}"
    )


def restart(dep: Deployment, role: str, timeout: float = 30) -> Process:
    """Start the process of ``role`` again with its recorded argv and log (kill -9 first if it still
    runs: two replicas with one role would both write its topic). The supervisor does it when it
    runs (it is the services' parent); this waits until it has and returns the new process."""
    proc = next((p for p in dep.processes if p.role == role), None)
    if proc is None:
        raise LookupError(
            f"no process '{role}' in deployment '{dep.name}' (processes: {', '.join(p.role for p in dep.processes)})"
        )
    if not dep.supervised():
        return _restart_here(dep, proc)
    old = proc.pid
    dep.request_restart(role)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = next(p for p in Deployment.load(dep.name).processes if p.role == role)
        if new.pid != old and new.pid > 0:
            proc.pid, proc.restarts = new.pid, new.restarts
            return proc
        time.sleep(0.05)
    raise RuntimeError(f"the supervisor of '{dep.name}' did not restart '{role}' within {timeout:g}s")


def _restart_here(dep: Deployment, proc: Process) -> Process:
    """Restart without a supervisor (it was stopped or killed): spawn the process from here."""
    if dep.alive(proc):
        processes.kill(proc.pid)
    env = process_env(service_env(dep.bootstrap), proc, dep.logins())
    proc.pid = processes.spawn(proc.argv, proc.log, env).pid
    proc.restarts += 1
    dep.release(proc.role)
    dep.save()
    return proc


def down(dep: Deployment, timeout: float | None = None, stop_kafka: bool = False) -> list[str]:
    """Stop every service (SIGTERM, SIGKILL what is still alive after ``timeout``) and the supervisor
    first, so nothing is restarted, and with ``stop_kafka`` the embedded broker unless another running
    deployment uses it; returns the roles that were running."""
    stopped = [p.role for p in dep.processes if dep.alive(p)]
    timeout = stop_timeout(dep.bootstrap) if timeout is None else timeout
    if dep.supervised():  # it stops its services on SIGTERM and exits
        processes.stop([dep.supervisor], timeout + 15)
    dep = Deployment.load(dep.name)  # the pids the supervisor last started
    processes.stop([p.pid for p in dep.processes if p.pid > 0], timeout, resume_first=True)
    dep.processes, dep.supervisor = [], 0
    dep.save()
    if stop_kafka and dep.kafka_dir:
        release_broker(dep.kafka_dir)
    return stopped


# What a service gets to stop after SIGTERM: time to flush its outputs and commit, as compose's
# stop_grace_period; with its broker unreachable there is nothing to flush to, so a short grace.
STOP_TIMEOUT_S = 30.0
UNREACHABLE_STOP_TIMEOUT_S = 3.0


def stop_timeout(bootstrap: str) -> float:
    """How long stopping services on ``bootstrap`` may wait for them before kill -9."""
    from services.core.client_log import port_open

    reachable = any(port_open(address) for address in bootstrap.split(","))
    return STOP_TIMEOUT_S if reachable else UNREACHABLE_STOP_TIMEOUT_S


def remove(dep: Deployment) -> None:
    """Delete a stopped deployment's records (state, logs, coordinator data); its topics stay on the broker."""
    if dep.running():
        raise RuntimeError(f"deployment '{dep.name}' is running: stop it first with: hastream down {dep.name}")
    shutil.rmtree(dep.dir)


def prune() -> list[str]:
    """Delete the records of every stopped deployment; returns their names."""
    gone = [d for d in Deployment.all() if not d.running()]
    for d in gone:
        remove(d)
    return [d.name for d in gone]
