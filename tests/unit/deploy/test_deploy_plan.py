"""The local launcher starts the right processes: one per Python node partition, one per Spark stage."""

from __future__ import annotations

from pathlib import Path

from services.deploy.local import service_commands, service_env
from services.spec import load_spec

REPO = Path(__file__).resolve().parents[3]


def test_python_nodes_run_one_process_per_replica_partition_plus_the_coordinator() -> None:
    spec = load_spec(REPO / "examples" / "demo.yaml")
    cmds = dict(service_commands(spec, REPO / "examples" / "demo.yaml"))
    nodes = ("ingress_readings", "ingest", "stats", "alerts", "egress_hot_stats_stable")
    assert sorted(cmds) == sorted(["coordinator"] + [f"{n}.r0.p{p}" for n in nodes for p in (0, 1)])
    argv = cmds["stats.r0.p1"]
    assert argv[1:] == [
        "-m",
        "services.cli.main",
        "node",
        "run",
        str(REPO / "examples" / "demo.yaml"),
        "stats",
        "--partition",
        "1",
        "--replica",
        "0",
    ]


def test_spark_node_runs_as_a_node_process_per_replica_partition() -> None:
    spec = load_spec(REPO / "examples" / "spark.yaml")
    cmds = dict(service_commands(spec, REPO / "examples" / "spark.yaml"))
    assert sorted(cmds) == ["clean.r0.p0", "clean.r0.p1", "coordinator", "heavy.r0.p0", "heavy.r0.p1"]
    argv = cmds["heavy.r0.p1"]
    assert argv[1:6] == ["-m", "services.cli.main", "node", "run", str(REPO / "examples" / "spark.yaml")]
    assert argv[6:] == ["heavy", "--partition", "1", "--replica", "0"]
    # Upstream nodes come first, so their output topics are being written when the Spark node starts.
    assert list(cmds).index("heavy.r0.p0") > list(cmds).index("clean.r0.p1")


def test_services_get_the_bootstrap_from_the_environment() -> None:
    assert service_env("127.0.0.1:9")["HASTREAM_BOOTSTRAP"] == "127.0.0.1:9"


def test_a_deployment_owns_its_topics_and_the_coordinators_but_never_a_shared_one() -> None:
    """What ``hastream rm --topics`` and a fresh demo delete: a source's shared ``topic:`` may be
    read by other deployments, so it is never among them."""
    from services.coordinator.names import internal_topics
    from services.deploy.topics import owned_topics
    from services.spec import parse_spec

    text = (REPO / "examples" / "chain.yaml").read_text()
    spec = parse_spec(text.replace("s1:     {schema: reading", "s1: {topic: plant.s1, schema: reading", 1))
    owned = owned_topics(spec)
    assert "plant.s1" not in owned and spec.topic("s1") == "plant.s1"
    assert {"chain.s2", "chain.merged.r1", "chain.deadletter", *internal_topics(spec)} <= set(owned)
    assert all(t.startswith(("chain.", "hastream-chain-")) for t in owned), owned


def test_a_deployment_creates_and_owns_its_egress_topics_and_validate_lists_them(tmp_path: Path) -> None:
    """``up`` creates each egress topic with the stream's partitions, the ``latest`` one compacted (it
        keeps the newest version of each result for good); ``rm --topics`` deletes them, even one the spec
        names, since only the deployment writes it; ``validate --topics`` lists them, ``validate`` says what
    each egress does."""
    from typer.testing import CliRunner

    from services.cli.main import app
    from services.deploy.topics import owned_topics, topic_specs

    stats = "  stats:  {schema: window_stat, key: key}"
    egress = "[{mode: stable}, {mode: latest, topic: plant.stats}]"
    path = tmp_path / "chain.yaml"
    path.write_text((REPO / "examples" / "chain.yaml").read_text().replace(stats, f"{stats[:-1]}, egress: {egress}}}"))
    spec = load_spec(path)
    specs = {t.name: t for t in topic_specs(spec, 3, {"min.insync.replicas": "2"})}
    assert specs["chain.stats.stable"].config == {"min.insync.replicas": "2"}
    assert specs["plant.stats"].config == {"min.insync.replicas": "2", "cleanup.policy": "compact"}
    assert specs["plant.stats"].partitions == spec.streams["stats"].partitions
    assert {"chain.stats.stable", "plant.stats"} <= set(owned_topics(spec))
    listed = CliRunner().invoke(app, ["validate", str(path), "--topics"])
    assert listed.exit_code == 0, listed.output
    assert {"stats chain.stats.stable", "stats plant.stats"} <= set(listed.output.splitlines())
    said = CliRunner().invoke(app, ["validate", str(path)], env={"COLUMNS": "250"})
    assert "egress_stats_latest: the latest egress of stats to plant.stats (json, a commit every 100 ms" in said.output
