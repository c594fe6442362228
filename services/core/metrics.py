"""Prometheus metrics: every service serves ``/metrics`` on the port its launcher gives it.

A service's numbers are read when Prometheus scrapes (custom collectors over the counters
the service keeps anyway), so the data path makes no Prometheus call per tuple. The
launcher hands each service its port in ``$HASTREAM_METRICS_PORT``; the server binds
``$HASTREAM_METRICS_HOST``, loopback unless a deployment exposes it on purpose.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from threading import Thread
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.core import client_log
from services.core.errors import ConfigError

log = logging.getLogger(__name__)

PORT_ENV = "HASTREAM_METRICS_PORT"
HOST_ENV = "HASTREAM_METRICS_HOST"
DEFAULT_HOST = "127.0.0.1"
BASE_PORT = 9400  # the launcher gives a deployment's services the free ports from here up


def env_port() -> int | None:
    """$HASTREAM_METRICS_PORT, if set: None means the service serves no metrics."""
    raw = os.environ.get(PORT_ENV, "")
    try:
        port = int(raw) if raw else None
    except ValueError:
        raise ConfigError(f"{PORT_ENV}={raw!r} must be a port number") from None
    if port is not None and not 0 <= port < 65536:
        raise ConfigError(f"{PORT_ENV}={port} is not a port (0..65535)")
    return port


def env_host() -> str:
    return os.environ.get(HOST_ENV, "") or DEFAULT_HOST


def port_free(port: int, host: str | None = None) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or env_host(), port))
        except OSError:
            return False
    return True


def choose_ports(n: int, taken: Iterable[int] = (), base: int = BASE_PORT) -> list[int]:
    """``n`` ports from ``base`` up that nothing listens on and that are not ``taken`` (given to
    another running deployment), so each service keeps its port across restarts."""
    skip, port = set(taken), base
    out: list[int] = []
    while len(out) < n and port < 65536:
        if port not in skip and port_free(port):
            out.append(port)
        port += 1
    return out


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; ``port`` is the bound one (useful when 0 was asked)."""

    server: Any
    thread: Thread
    port: int

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(2)


class ClientMetrics(Collector):
    """The Kafka clients' own reports in this process, counted instead of logged line by line
    (``services.core.client_log``): librdkafka's log lines by facility, its errors by name, and the
    aiokafka reconnect lines dropped as chatter."""

    def collect(self) -> Iterable[Any]:
        yield counters(
            "hastream_kafka_client_log_lines",
            "librdkafka log lines, by facility",
            [({"facility": f}, n) for f, n in sorted(client_log.RDKAFKA_LOG_LINES.items())],
            ("facility",),
        )
        yield counters(
            "hastream_kafka_client_errors",
            "Kafka client errors reported by librdkafka, by name",
            [({"error": e}, n) for e, n in sorted(client_log.RDKAFKA_ERRORS.items())],
            ("error",),
        )
        yield counters(
            "hastream_kafka_client_suppressed_lines",
            "reconnect lines of other Kafka clients (aiokafka) dropped while a broker is unreachable",
            [({"logger": lg}, n) for lg, n in sorted(client_log.SUPPRESSED_LOG_LINES.items())],
            ("logger",),
        )


class Merged(Collector):
    """Several collectors of the same metrics (the partition tasks of one process, each with its
    ``partition`` label) as one: each family once, with every collector's samples."""

    def __init__(self, collectors: Sequence[Collector]) -> None:
        self.collectors = list(collectors)

    def collect(self) -> Iterable[Any]:
        families: dict[str, Any] = {}
        for c in self.collectors:
            for fam in c.collect():
                if fam.name in families:
                    families[fam.name].samples.extend(fam.samples)
                else:
                    families[fam.name] = fam
        return list(families.values())


def registry_of(*collectors: Collector) -> CollectorRegistry:
    """A registry of its own per service (services run side by side in one process in tests),
    with the process's Kafka client counters."""
    reg = CollectorRegistry(auto_describe=False)
    for c in (*collectors, ClientMetrics()):
        reg.register(c)
    return reg


def serve(registry: CollectorRegistry, port: int, host: str | None = None) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` (loopback by default) from a daemon thread."""
    server, thread = start_http_server(port, host or env_host(), registry)
    return MetricsServer(server, thread, int(server.server_port))


def serve_from_env(*collectors: Collector) -> MetricsServer | None:
    """Serve the collectors on the port the launcher gave this process, if it gave one."""
    port = env_port()
    if port is None:
        return None
    registry = registry_of(*collectors)
    try:
        return serve(registry, port)
    except OSError as e:  # metrics are no reason to stop a service
        server = serve(registry, 0)
        log.warning("metrics port %d is taken (%s): /metrics on port %d instead", port, e.strerror, server.port)
        return server


# -- building metric families from plain numbers ---------------------------------------------


Samples = Iterable[tuple[Mapping[str, str], float]]


def _family(cls: Any, name: str, doc: str, samples: Samples, label_names: Sequence[str]) -> Any:
    samples = list(samples)
    names = list(label_names or (samples[0][0] if samples else ()))
    fam = cls(name, doc, labels=names)
    for labels, value in samples:
        fam.add_metric([labels[n] for n in names], value)
    return fam


def counters(name: str, doc: str, samples: Samples, label_names: Sequence[str] = ()) -> CounterMetricFamily:
    """A counter family (``name`` without ``_total``) from (labels, value) pairs sharing the label names."""
    fam: CounterMetricFamily = _family(CounterMetricFamily, name, doc, samples, label_names)
    return fam


def gauges(name: str, doc: str, samples: Samples, label_names: Sequence[str] = ()) -> GaugeMetricFamily:
    """A gauge family from (labels, value) pairs sharing the label names."""
    fam: GaugeMetricFamily = _family(GaugeMetricFamily, name, doc, samples, label_names)
    return fam


def counter(name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> CounterMetricFamily:
    return counters(name, doc, [(labels or {}, value)])


def gauge(name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> GaugeMetricFamily:
    return gauges(name, doc, [(labels or {}, value)])
