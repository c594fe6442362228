"""The local launcher: a spec's services as local processes on an embedded or given broker.

``up`` provisions topics and starts one process per node replica partition (one per
replica for a Spark node, which covers all partitions); ``down`` stops them with SIGTERM
so each flushes and commits. Processes are started and signalled through ``processes``. The deployment's state (pids, bootstrap, logs) is a JSON
file under ``.hastream/deployments/<name>/`` so later commands can find it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services.core.admin import TopicSpec, broker_count, ensure_topics
from services.core.paths import REPO_ROOT, hastream_home
from services.deploy import processes
from services.node.restart import TOPIC_CONFIG as RESTART_TOPIC_CONFIG
from services.spec import Spec


@dataclass
class Process:
    role: str  # "<node>.r<replica>.p<partition>", or "<node>.r<replica>" for a Spark stage
    pid: int
    log: str
    argv: list[str]


@dataclass
class Deployment:
    name: str
    spec_path: str
    bootstrap: str
    kafka_dir: str | None = None  # set when ``up`` started the broker itself
    processes: list[Process] = field(default_factory=list)

    @staticmethod
    def dir_for(name: str) -> Path:
        return hastream_home() / "deployments" / name

    @property
    def dir(self) -> Path:
        return self.dir_for(self.name)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "deployment.json").write_text(json.dumps(asdict(self), indent=2))

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
        root = hastream_home() / "deployments"
        return [cls.load(p.parent.name) for p in sorted(root.glob("*/deployment.json"))]

    def alive(self, p: Process) -> bool:
        return processes.pid_alive(p.pid)


def service_env(bootstrap: str) -> dict[str, str]:
    """Environment of every service: the same variables docker-compose.yml sets."""
    env = dict(os.environ)
    env["HASTREAM_BOOTSTRAP"] = bootstrap
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def service_commands(spec: Spec, spec_path: Path) -> list[tuple[str, list[str]]]:
    """(role, argv) of every process of the deployment: the coordinator, then nodes upstream first."""
    py = sys.executable
    out = [("coordinator", [py, "-m", "services.cli.main", "coordinator", str(spec_path)])]
    for n in spec.topo_nodes():
        node = spec.nodes[n]
        for r in range(node.replicas):
            if node.engine == "spark":
                ckpt = Deployment.dir_for(spec.name) / "spark" / f"{n}.r{r}"
                out.append(
                    (
                        f"{n}.r{r}",
                        [
                            py,
                            "-m",
                            "spark_jobs.window_stage",
                            str(spec_path),
                            n,
                            "--replica",
                            str(r),
                            "--checkpoint",
                            str(ckpt),
                        ],
                    )
                )
                continue
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
    """Every topic of a deployment with its settings; restart topics take messages as large as an image."""
    restart_topics = {t for t, _ in spec.restart_topics()}
    return [
        TopicSpec(t, p, replication, {**(config or {}), **(RESTART_TOPIC_CONFIG if t in restart_topics else {})})
        for t, p in spec.all_topics()
    ]


def up(spec: Spec, spec_path: Path, bootstrap: str | None = None, brokers: int = 1) -> Deployment:
    """Start the broker (unless given), create topics, start every service."""
    try:
        existing = Deployment.load(spec.name)
        if any(existing.alive(p) for p in existing.processes):
            raise RuntimeError(f"deployment '{spec.name}' is already running (stop it with: hastream down {spec.name})")
    except LookupError:
        pass
    kafka_dir = None
    if bootstrap is None:
        from infra.kafka.cluster import KafkaCluster

        kdir = hastream_home() / "kafka"
        cluster = KafkaCluster.load(kdir) if (kdir / "cluster.json").exists() else None
        if cluster is None or not cluster.is_running():
            cluster = KafkaCluster(brokers=brokers, data_dir=kdir).start(detach=True)
        bootstrap, kafka_dir = cluster.bootstrap, str(kdir)
    provision(spec, bootstrap)
    dep = Deployment(spec.name, str(spec_path.resolve()), bootstrap, kafka_dir)
    logs = dep.dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = service_env(bootstrap)
    for role, argv in service_commands(spec, spec_path.resolve()):
        log = logs / f"{role}.log"
        dep.processes.append(Process(role, processes.spawn(argv, log, env).pid, str(log), argv))
    dep.save()
    return dep


def restart(dep: Deployment, role: str) -> Process:
    """Start the process of ``role`` again with its recorded argv and log (kill -9 it first if
    it still runs: two replicas with one role would both write its topic); saves the new pid."""
    proc = next((p for p in dep.processes if p.role == role), None)
    if proc is None:
        raise LookupError(
            f"no process '{role}' in deployment '{dep.name}' (processes: {', '.join(p.role for p in dep.processes)})"
        )
    if dep.alive(proc):
        processes.kill(proc.pid)
    proc.pid = processes.spawn(proc.argv, proc.log, service_env(dep.bootstrap)).pid
    dep.save()
    return proc


def down(dep: Deployment, timeout: float = 30, stop_kafka: bool = False) -> list[str]:
    """SIGTERM every service, SIGKILL what is still alive after ``timeout``; returns roles stopped."""
    signalled = set(processes.stop([p.pid for p in dep.processes], timeout))
    stopped = [p.role for p in dep.processes if p.pid in signalled]
    dep.processes = []
    dep.save()
    if stop_kafka and dep.kafka_dir:
        from infra.kafka.cluster import KafkaCluster

        KafkaCluster.load(Path(dep.kafka_dir)).stop()
    return stopped
