"""The specs the exchange bench deploys."""

from __future__ import annotations

from bench.workload import WINDOW_SIZE_MS, WINDOW_SLIDE_MS

# Failure-free throughput: a merge that waits on a connection starved of CPU (the node processes and
# the broker on 2 cores) must not go tentative, which would change what the output holds mid-run.
NO_TIMEOUT = "dpc: {delay: 60000}"
# The throughput bench's sliding window (Quix's hopping window in the peer has the same size and step).
WINDOW = (
    "{type: window, input: warm, output: stats, key: KEY, "
    + f"size: {WINDOW_SIZE_MS}, slide: {WINDOW_SLIDE_MS}, "
    + "aggregates: {count: count, sum: sum(value), avg: avg(value), min: min(value), max: max(value)}}"
)


def window_text(name: str, source_key: str, window_key: str) -> str:
    """A filter node and a window node of 2 partitions each."""
    return f"""\
name: {name}
{NO_TIMEOUT}
streams:
  readings: {{schema: located, key: {source_key}, partitions: 2}}
  warm: {{schema: located, key: {source_key}, partitions: 2}}
  stats: {{schema: window_stat, key: key, partitions: 2}}
operators:
  keep: {{type: filter, input: readings, output: warm, where: "value > -1000"}}
  win: {WINDOW.replace("KEY", window_key)}
nodes:
  pre: {{operators: [keep]}}
  win: {{operators: [win]}}
"""


def tasks_text(name: str, processes: int) -> str:
    """A window node of 4 partitions in ``processes`` processes, reading the source itself."""
    win = WINDOW.replace("KEY", "sensor").replace("input: warm", "input: readings")
    return f"""\
name: {name}
{NO_TIMEOUT}
streams:
  readings: {{schema: located, key: sensor, partitions: 4}}
  stats: {{schema: window_stat, key: key, partitions: 4}}
operators:
  win: {win}
nodes:
  win: {{operators: [win], processes: {processes}}}
"""


def hop_text(name: str, second: int) -> str:
    return f"""\
name: {name}
streams:
  readings: {{schema: located, key: sensor, partitions: 2}}
  warm: {{schema: located, key: sensor, partitions: 2}}
  out: {{schema: located, key: sensor, partitions: {second}}}
operators:
  keep: {{type: filter, input: readings, output: warm, where: "value > -1000"}}
  again: {{type: filter, input: warm, output: out, where: "value > -1000"}}
nodes:
  pre: {{operators: [keep]}}
  post: {{operators: [again]}}
"""


def union_text(name: str, sources: int) -> str:
    srcs = [f"s{i}" for i in range(sources)]
    streams = "".join(f"  {s}: {{schema: reading, key: sensor}}\n" for s in srcs)
    op = (
        f"{{type: union, inputs: [{', '.join(srcs)}], output: out}}"
        if sources > 1
        else '{type: filter, input: s0, output: out, where: "value > -1000"}'
    )
    return f"name: {name}\nstreams:\n{streams}  out: {{schema: reading, key: sensor}}\noperators:\n  op: {op}\nnodes:\n  n: {{operators: [op]}}\n"
