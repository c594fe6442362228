"""The command line: ``python -m bench.throughput`` runs the benchmark; with ``--worker`` (not part
of the public interface) it is one worker process, running the job it is given."""

from __future__ import annotations

import argparse

import bench.throughput
from bench.throughput.run import PROFILE_OUT, run
from bench.throughput.worker import worker_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.throughput", description=(bench.throughput.__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument(
        "--tuples",
        type=int,
        default=None,
        help="pre-loaded input tuples per throughput run (default 300000, --quick 100000)",
    )
    ap.add_argument("--quick", action="store_true", help="small run (about a minute including broker start)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="throughput runs per processor; the median counts (default 3, --quick 1)",
    )
    ap.add_argument("--rate", type=float, default=1000, help="input tuples/s of the latency phase")
    ap.add_argument(
        "--paced-seconds", type=float, default=None, help="length of each latency run (default 15, --quick 6)"
    )
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    ap.add_argument(
        "--profile", action="store_true", help=f"also profile one filter+map run (cProfile, {PROFILE_OUT.name})"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.tuples = a.tuples or (100_000 if a.quick else 300_000)
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.paced_seconds = a.paced_seconds or (6.0 if a.quick else 15.0)
    return a


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    run(args)


if __name__ == "__main__":
    main()
