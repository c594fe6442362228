"""The local launcher: a spec's services as local processes on an embedded or given broker.

``up`` provisions topics and starts the deployment's supervisor (``supervisor.py``), which
starts one process per node replica partition (a Spark node's too, each with its own Spark
session) and restarts any that crashes, as compose's ``restart: on-failure``
does; ``down`` has it stop them with SIGTERM so each flushes and commits. Processes are
started and signalled through ``processes``. The deployment's state (pids, restarts,
bootstrap, logs) is a JSON file under ``.hastream/deployments/<name>/`` so later commands
can find it; fault injection leaves requests for the supervisor beside it (``hold``,
``request_restart``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services.coordinator.names import internal_topics
from services.core import metrics
from services.core.admin import TopicSpec, broker_count, delete_topics, ensure_topics
from services.core.kafka import Login
from services.core.logs import rotate
from services.core.paths import REPO_ROOT, hastream_home
from services.deploy import access, processes
from services.ha.acks import TOPIC_CONFIG as ACKS_TOPIC_CONFIG
from services.ha.logs import TOPIC_CONFIG as HA_LOG_CONFIG
from services.ha.logs import recovery_logs
from services.node.restart import TOPIC_CONFIG as RESTART_TOPIC_CONFIG
from services.spec import Spec


@dataclass
class Process:
    role: str  # "<node>.r<replica>.p<partition>"
    pid: int
    log: str
    argv: list[str]
    restarts: int = 0  # starts after the first, by the supervisor or ``hastream fault restart``
    metrics_port: int = 0  # where it serves /metrics ($HASTREAM_METRICS_PORT); 0: none
    login: str = ""  # key of its SASL login in the deployment's credentials (``access``); "": none


@dataclass
class Deployment:
    name: str
    spec_path: str
    bootstrap: str
    kafka_dir: str | None = None  # set when ``up`` started the broker itself
    processes: list[Process] = field(default_factory=list)
    supervisor: int = 0  # pid of the process that starts and restarts the services
    started: float = 0.0  # wall-clock time of ``up``, to tell the most recent deployment
    sasl: bool = False  # each service logs in as its own user (``credentials.json`` in its dir)

    HELD = "held"  # <dir>/held/<role>: fault injection keeps the role down
    RESTART = "restart"  # <dir>/restart/<role>: start the role again now (kill it first if it runs)

    @staticmethod
    def dir_for(name: str) -> Path:
        return hastream_home() / "deployments" / name

    @property
    def dir(self) -> Path:
        return self.dir_for(self.name)

    def logins(self) -> dict[str, Login]:
        """The SASL logins of its services and the admin's, by key (none without SASL)."""
        return access.load_logins(self.dir) if self.sasl else {}

    def save(self) -> None:
        """Write the state file whole (readers never see half of it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f"deployment.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.dir / "deployment.json")

    @classmethod
    def load(cls, name: str) -> Deployment:
        f = cls.dir_for(name) / "deployment.json"
        if not f.exists():
            raise LookupError(f"no deployment '{name}' (start one with: hastream up SPEC)")
        d = json.loads(f.read_text())
        d["processes"] = [Process(**p) for p in d["processes"]]
        return cls(**d)

    @classmethod
    def all(cls) -> list[Deployment]:
        """Every recorded deployment, running or stopped (a record that cannot be read is left out)."""
        root = hastream_home() / "deployments"
        found = []
        for p in sorted(root.glob("*/deployment.json")):
            try:
                found.append(cls.load(p.parent.name))
            except (LookupError, ValueError, TypeError, KeyError):
                continue
        return found

    def alive(self, p: Process) -> bool:
        return p.pid > 0 and processes.pid_alive(p.pid)

    def supervised(self) -> bool:
        """Whether this deployment's supervisor runs (it restarts crashed services)."""
        return self.supervisor > 0 and processes.pid_alive(self.supervisor)

    def running(self) -> bool:
        """Whether anything of the deployment runs: its supervisor or any of its services."""
        return self.supervised() or any(self.alive(p) for p in self.processes)

    # -- requests to the supervisor: a marker file per role ---------------------------
    def _marker(self, kind: str, role: str) -> Path:
        return self.dir / kind / role

    def hold(self, role: str) -> None:
        """Keep ``role`` down when it ends: a fault kill that lasts until ``request_restart``."""
        self._marker(self.HELD, role).parent.mkdir(parents=True, exist_ok=True)
        self._marker(self.HELD, role).touch()

    def held(self, role: str) -> bool:
        return self._marker(self.HELD, role).exists()

    def release(self, role: str) -> None:
        self._marker(self.HELD, role).unlink(missing_ok=True)

    def request_restart(self, role: str) -> None:
        """Ask the supervisor to start ``role`` again at once, held or not, killing it first if it runs."""
        self._marker(self.RESTART, role).parent.mkdir(parents=True, exist_ok=True)
        self._marker(self.RESTART, role).touch()

    def take_restart_request(self, role: str) -> bool:
        """Whether a restart of ``role`` was asked for; consumes the request and lifts any hold."""
        try:
            self._marker(self.RESTART, role).unlink()
        except FileNotFoundError:
            return False
        self.release(role)
        return True

    def clear_requests(self) -> None:
        for kind in (self.HELD, self.RESTART):
            for f in (self.dir / kind).glob("*"):
                f.unlink(missing_ok=True)


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
    """(role, argv) of every process of the deployment: the coordinator, then nodes upstream first."""
    py = sys.executable
    out = [("coordinator", [py, "-m", "services.cli.main", "coordinator", str(spec_path)])]
    for n in spec.topo_nodes():
        node = spec.nodes[n]
        for r in range(node.replicas):
            for p in range(spec.node_partitions(n)):
                out.append(
                    (
                        f"{n}.r{r}.p{p}",
                        [
                            py,
                            "-m",
                            "services.cli.main",
                            "node",
                            "run",
                            str(spec_path),
                            n,
                            "--partition",
                            str(p),
                            "--replica",
                            str(r),
                        ],
                    )
                )
    return out


def provision(spec: Spec, bootstrap: str) -> list[str]:
    """Create the deployment's topics (replication 3 where the cluster has 3 brokers)."""
    rf = 3 if broker_count(bootstrap) >= 3 else 1
    cfg = {"min.insync.replicas": "2"} if rf == 3 else {}
    return ensure_topics(bootstrap, topic_specs(spec, rf, cfg))


def topic_specs(spec: Spec, replication: int = 1, config: dict[str, str] | None = None) -> list[TopicSpec]:
    """Every topic of a deployment with its settings: restart topics take messages as large as an
    image, and the logs HA schemes recover from keep every record until trimmed."""
    own = {t: RESTART_TOPIC_CONFIG for t, _ in spec.restart_topics()}
    own.update({t: HA_LOG_CONFIG for t in recovery_logs(spec)})
    own[spec.acks_topic] = ACKS_TOPIC_CONFIG
    return [TopicSpec(t, p, replication, {**(config or {}), **own.get(t, {})}) for t, p in spec.all_topics()]


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


def owned_topics(spec: Spec) -> list[str]:
    """The topics that belong to the deployment alone: all of its own, the coordinator's, and none
    that a source shares by name (``topic:``)."""
    shared = {sd.topic for sd in spec.streams.values() if sd.topic}
    return [t for t, _ in spec.all_topics() if t not in shared] + internal_topics(spec)


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
        _check_login(dep.bootstrap, admin)
        provision(spec, dep.bootstrap)
    logins = access.new_logins(spec, admin)
    access.provision(spec, dep.bootstrap, logins)
    access.save_logins(dep.dir, logins)
    dep.sasl = True
    for proc in dep.processes:
        proc.login = access.login_key(spec, proc.role)


def embedded_broker(brokers: int = 1, sasl: bool | None = None) -> tuple[str, str]:
    """(bootstrap, data dir) of the broker in ``<home>/kafka``: resumed on its ports and data if it
    is stopped or crashed, a new one with ``brokers`` brokers (and SASL if ``sasl``) if there is none.
    A broker whose SASL differs from an explicit ``sasl`` is a RuntimeError that says what to do."""
    from infra.kafka.cluster import KafkaCluster

    kdir = hastream_home() / "kafka"
    cluster = KafkaCluster.load(kdir) if (kdir / "cluster.json").exists() else None
    if cluster is None or not cluster.stored():
        cluster = KafkaCluster(brokers=brokers, data_dir=kdir, sasl=bool(sasl)).start(detach=True)
    else:
        _check_sasl(cluster.sasl, sasl, kdir)
        if not all(cluster.alive()):
            cluster.start(detach=True)
    return cluster.bootstrap, str(kdir)


def _check_sasl(has: bool, wanted: bool | None, kdir: Path) -> None:
    """A broker without SASL for ``--sasl``, or a SASL broker for ``--no-sasl``: say what to do instead."""
    if wanted is True and not has:
        raise RuntimeError(
            f"the Kafka broker in {kdir} runs without SASL: deploy without --sasl, or stop it and start a new one "
            "with 'hastream kafka start --fresh --sasl' (which deletes its topics)"
        )
    if wanted is False and has:
        raise RuntimeError(f"the Kafka broker in {kdir} takes only SASL logins: deploy with --sasl")


def admin_login(bootstrap: str, sasl: bool | None) -> Login | None:
    """The admin login a SASL deployment on ``bootstrap`` provisions with: the embedded broker's own if
    ``bootstrap`` is it, else the environment's ($HASTREAM_SASL_USERNAME, the broker's admin); None
    without SASL (``sasl`` False, or None and ``bootstrap`` no embedded SASL broker)."""
    from infra.kafka.cluster import KafkaCluster
    from services.core.kafka import env_login

    kdir = hastream_home() / "kafka"
    cluster = KafkaCluster.load(kdir) if (kdir / "cluster.json").exists() else None
    if cluster is not None and cluster.stored() and cluster.bootstrap == bootstrap:
        _check_sasl(cluster.sasl, sasl, kdir)
        return Login(*cluster.admin_login()) if cluster.sasl else None
    if not sasl:
        return None
    login = env_login()
    if login is None:
        raise RuntimeError(
            f"--sasl on the Kafka broker at {bootstrap} needs its admin login: set HASTREAM_SASL_USERNAME and "
            "HASTREAM_SASL_PASSWORD"
        )
    return login


def _check_login(bootstrap: str, admin: Login) -> None:
    """Fail with one line unless the broker at ``bootstrap`` takes ``admin``'s login."""
    from confluent_kafka import KafkaException

    from services.core.admin import admin_client
    from services.core.kafka import LOGIN_REFUSALS

    client = admin_client(bootstrap)
    try:
        client.list_topics(timeout=5)
    except KafkaException:
        client.poll(0)
        why = LOGIN_REFUSALS.reason(bootstrap) or "no answer"
        raise RuntimeError(
            f"the Kafka broker at {bootstrap} did not take the login of '{admin.username}': {why}"
        ) from None


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
    from services.core.kafka import port_open

    reachable = any(port_open(address) for address in bootstrap.split(","))
    return STOP_TIMEOUT_S if reachable else UNREACHABLE_STOP_TIMEOUT_S


def broker_users(kafka_dir: str, but: set[str]) -> list[str]:
    """Running deployments, other than ``but``, on the embedded broker in ``kafka_dir``."""
    return [d.name for d in Deployment.all() if d.name not in but and d.kafka_dir == kafka_dir and d.running()]


def release_broker(kafka_dir: str, stopping: set[str] | None = None) -> list[str]:
    """Stop the embedded broker in ``kafka_dir`` (its data stays for the next start) unless running
    deployments other than ``stopping`` use it; returns those, which keep it running."""
    from infra.kafka.cluster import KafkaCluster

    users = broker_users(kafka_dir, stopping or set())
    if not users:
        KafkaCluster.load(Path(kafka_dir)).stop()
    return users


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
