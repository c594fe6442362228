"""The Kafka distribution's own command-line clients, run from the broker's jars: what a Java user of
hastream's topics runs (``kafka-console-consumer.sh`` is a wrapper of the same class)."""

from __future__ import annotations

import subprocess

from infra.kafka.cluster import KafkaClusterError, ensure_kafka_jars, java_binary, java_error_line

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


def console_consume(
    bootstrap: str, topic: str, max_messages: int, timeout_s: float, read_committed: bool = True
) -> list[tuple[str, str]]:
    """(key, value) of the first ``max_messages`` records of ``topic`` as the Java console consumer prints
    them from the beginning (``--isolation-level read_committed`` unless told), fewer if none comes for
    ``timeout_s``. A Java failure other than that timeout raises ``KafkaClusterError`` with its line."""
    cmd = [java_binary(), "-cp", f"{ensure_kafka_jars()}/*", CONSOLE_CONSUMER, "--bootstrap-server", bootstrap]
    cmd += ["--topic", topic, "--from-beginning", "--max-messages", str(max_messages)]
    cmd += ["--timeout-ms", str(int(timeout_s * 1000)), "--property", "print.key=true"]
    cmd += ["--property", "key.separator=\t"]
    if read_committed:
        cmd += ["--isolation-level", "read_committed"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 120)
    if done.returncode != 0 and "TimeoutException" not in done.stderr:
        raise KafkaClusterError(f"the console consumer failed: {java_error_line(done.stdout + done.stderr)}")
    return [_split(line) for line in done.stdout.splitlines() if "\t" in line]


def _split(line: str) -> tuple[str, str]:
    key, value = line.split("\t", 1)
    return key, value
