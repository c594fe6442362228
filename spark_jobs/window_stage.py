"""The Spark engine for a node: one keyed sliding/tumbling window aggregate as a Structured Streaming query.

A node with ``engine: spark`` runs exactly one window operator. Heavy keyed state (many keys,
long windows) lives in Spark's checkpointed state store instead of a Python service's memory;
the stage reads and writes the same Kafka topics, Avro payloads and ``ht.*`` headers as the
Python services, so either engine can feed the other.

Per replica ``r`` the stage reads every partition of ``spec.topic(input, r % replicas_of_stream(input))``
and writes ``spec.topic(output, r)``. This module wires the parts and is the command line:

* ``spark_jobs.plan``: topics, schemas and window of the replica, resolved once from the spec;
* ``spark_jobs.session``: the local Spark session with the connector jars;
* ``spark_jobs.query``: which input tuples count and which windows are emitted;
* ``spark_jobs.sink``: output tuples, their ids and headers, and no duplicates after a restart.

The Spark checkpoint (``checkpoint_dir``) holds the input offsets, the watermark and the
window state, so a restarted stage continues where it stopped.

Run ``python -m spark_jobs.window_stage SPEC NODE --replica R --checkpoint DIR [--bootstrap B]``;
SIGTERM or Ctrl-C stops the query and then the session.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn, Sequence

from pyspark.sql import SparkSession

from services.core.config import Settings
from services.core.errors import ConfigError
from services.spec import Spec, SpecError, load_spec
from spark_jobs.plan import StageError, default_checkpoint, plan_stage
from spark_jobs.query import DEFAULT_TRIGGER_MS, await_query, build_windows, start_query
from spark_jobs.session import spark_session, use_kafka_v1_source
from spark_jobs.sink import BatchWriter, StageStats


def run_stage(
    spec: Spec,
    node: str,
    bootstrap: str,
    replica: int = 0,
    checkpoint_dir: str | Path | None = None,
    trigger_ms: int = DEFAULT_TRIGGER_MS,
    lateness_ms: int | None = None,
    stop_event: threading.Event | None = None,
    timeout: float | None = None,
    max_offsets_per_trigger: int | None = None,
    spark: SparkSession | None = None,
) -> StageStats:
    """Run one replica of a spark node until ``stop_event`` is set, ``timeout`` passes or the query fails.

    With neither ``stop_event`` nor ``timeout`` it runs until the query fails (the CLI's
    await mode). A session passed in is reused and left running, so tests and callers that
    run several stages pay for one JVM; otherwise the stage creates and stops its own.
    Raises StageError (one line) if the query fails.
    """
    plan = plan_stage(spec, node, replica)
    lateness = plan.window.slide if lateness_ms is None else lateness_ms
    if lateness < 0:
        raise StageError(f"lateness_ms must be >= 0, got {lateness}")
    if trigger_ms < 0:
        raise StageError(f"trigger_ms must be >= 0, got {trigger_ms}")
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint(plan)
    ckpt.mkdir(parents=True, exist_ok=True)
    session = spark_session(plan.app_name) if spark is None else spark
    use_kafka_v1_source(session)
    try:
        writer = BatchWriter.for_plan(plan, bootstrap)
        windows = build_windows(session, plan, bootstrap, lateness, max_offsets_per_trigger)
        query = start_query(windows, writer, plan.query_name, ckpt, trigger_ms)
        failure = await_query(query, stop_event, timeout)
        if failure is not None and not (stop_event is not None and stop_event.is_set()):
            raise StageError(f"Spark stage {plan.node}.r{plan.replica} failed: {failure}")
        return writer.stats
    finally:
        if spark is None:  # the stage's own session
            session.stop()


# -- CLI ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line instead of usage plus message."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _parser() -> _Parser:
    p = _Parser(
        prog="python -m spark_jobs.window_stage",
        description="Run one replica of a spark node (one window operator) as a Spark Structured Streaming query.",
    )
    p.add_argument("spec", help="query spec YAML")
    p.add_argument("node", help="name of a node with engine: spark")
    p.add_argument("--replica", type=int, default=0, help="replica index (default 0)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: $HASTREAM_BOOTSTRAP)")
    p.add_argument("--checkpoint", help="Spark checkpoint folder (default: under $HASTREAM_HOME/spark/checkpoints)")
    p.add_argument("--trigger-ms", type=int, default=DEFAULT_TRIGGER_MS, help="micro-batch interval")
    p.add_argument("--lateness-ms", type=int, default=None, help="watermark delay (default: the window slide)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None, help="cap on input tuples per micro-batch")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _check_args(parser, args)
    spec, bootstrap = _load(parser, args)
    stop = _stop_on_signals()
    try:
        run_stage(
            spec,
            args.node,
            bootstrap,
            replica=args.replica,
            checkpoint_dir=args.checkpoint,
            trigger_ms=args.trigger_ms,
            lateness_ms=args.lateness_ms,
            stop_event=stop,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )
    except StageError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 1
    return 0


def _check_args(parser: _Parser, args: argparse.Namespace) -> None:
    """Bad numbers are usage errors, before anything starts."""
    if args.trigger_ms < 0:
        parser.error(f"--trigger-ms must be >= 0, got {args.trigger_ms}")
    if args.lateness_ms is not None and args.lateness_ms < 0:
        parser.error(f"--lateness-ms must be >= 0, got {args.lateness_ms}")
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error(f"--max-offsets-per-trigger must be >= 1, got {args.max_offsets_per_trigger}")


def _load(parser: _Parser, args: argparse.Namespace) -> tuple[Spec, str]:
    """The spec and bootstrap servers, the node checked to be a spark node: usage errors (one line) before Spark starts."""
    try:
        spec = load_spec(args.spec)
        plan_stage(spec, args.node, args.replica)
        return spec, Settings.from_env(args.bootstrap).bootstrap
    except SpecError as e:
        parser.exit(2, f"{parser.prog}: " + "; ".join(e.problems) + "\n")
    except (StageError, ConfigError) as e:
        parser.exit(2, f"{parser.prog}: {e}\n")


def _stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set, so the stage stops its query and session cleanly."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


if __name__ == "__main__":
    sys.exit(main())
