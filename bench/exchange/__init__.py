"""What the exchange costs, and what partition tasks and early release give, through a real broker.

    python -m bench.exchange [--tuples N] [--repeat R] [--rate R] [--seconds S] [--quick] [--bootstrap B]

Every node runs as the launcher runs it, one process per node partition (``bench.harness.ServiceProcesses``),
one replica, DPC; every topic stamps LogAppendTime, so times below are the broker's append times.

* **Exchange, pre-loaded input** (``--tuples`` located readings in 2 partitions): a filter node (2
  partitions) feeds a sliding window keyed by building (2 partitions). *direct*: the readings are
  written keyed by building, so the window reads its input as it is split; *exchange*: they are
  written keyed by sensor, so the filter's output crosses an exchange (4 connections). Same records,
  same windows. Throughput: input tuples / (append of the last window result - append of the first
  input). CPU per tuple: the node processes' CPU from the moment they all ran until the last result,
  per input tuple. Both outputs equal the reference evaluation, partition by partition, before any figure.
* **Latency per hop** (``--rate`` tuples/s for ``--seconds``): the filter node (2 partitions) feeds a
  second filter of 2 partitions (*direct*, one input in log order) or 3 (*exchange*: 2 connections
  merged by tuple time). Per tuple: append of the second filter's output minus append of the first's
  (same ``seq``); the first second is warm-up.
* **Union**: three sources into a one-partition union node, beside one source into a filter node; per
  tuple, append of the output minus append of its input. Its merge releases what every input's
  boundary has passed (``SUnion(early=True)``), not whole buckets.
* **Partition tasks**: a window node of 4 partitions in 1 and in 2 processes (``processes:``), throughput
  as above.

Goals (issue 36): the exchange adds <= 3 us CPU per tuple, <= 3 ms p50 and <= 10 ms p99 per hop; the
union node's p50 <= 10 ms at 1,000 tuples/s; 2 processes >= 1.7x 1 process for 4 partitions.
Results: ``bench/results/exchange.json`` and ``docs/exchange.png``.
"""
