"""What every CLI command shares: consoles, one-line errors, spec and settings loading."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Iterable

import typer
from rich.console import Console
from rich.markup import escape

from services.core.config import Settings
from services.core.errors import ConfigError
from services.spec import Spec, SpecError, load_spec

SpecArg = Annotated[Path, typer.Argument(help="Query network spec (YAML).", exists=False)]
BootstrapOpt = Annotated[
    str | None,
    typer.Option(
        "--bootstrap", "-b", help="Kafka bootstrap servers (default: $HASTREAM_BOOTSTRAP or the deployment's broker)."
    ),
]

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one readable error line and return the Exit to raise."""
    for line in message.splitlines() or [message]:
        err.print(f"[bold red]error:[/] {escape(line)}")
    return typer.Exit(code)


def spec_or_exit(path: Path) -> Spec:
    try:
        return load_spec(path)
    except SpecError as e:
        raise fail(str(e)) from None


def settings_or_exit(bootstrap: str | None) -> Settings:
    try:
        return Settings.from_env(bootstrap)
    except ConfigError as e:
        raise fail(str(e)) from None


def bootstrap_for(spec: Spec, bootstrap: str | None, stream: str | None = None) -> str:
    """The given bootstrap, else $HASTREAM_BOOTSTRAP, else the deployment's broker; once it answers
    and has the topics of ``stream`` (default: of the spec's inputs), else one line and exit 2
    instead of a minute of retries."""
    found = _bootstrap(spec, bootstrap)
    streams = [stream] if stream is not None and stream in spec.streams else spec.sources()
    topics = [t for s in streams for t in spec.stream_topics(s)]
    broker_or_exit(found, topics, f"hastream up {spec.path or 'SPEC'}")
    return found


def _bootstrap(spec: Spec, bootstrap: str | None) -> str:
    if bootstrap:
        return bootstrap
    if os.environ.get("HASTREAM_BOOTSTRAP"):
        return os.environ["HASTREAM_BOOTSTRAP"]
    from services.deploy.local import Deployment

    try:
        return Deployment.load(spec.name).bootstrap
    except LookupError:
        raise fail(
            f"no broker for '{spec.name}': deploy it with 'hastream up', or pass --bootstrap / set HASTREAM_BOOTSTRAP"
        ) from None


def broker_or_exit(bootstrap: str, topics: Iterable[str] = (), create_with: str = "hastream up SPEC") -> None:
    """Exit with one line unless a broker answers at ``bootstrap`` and has every one of ``topics``."""
    from confluent_kafka import KafkaException

    from services.core.admin import admin_client

    unreachable = (
        f"the Kafka broker at {bootstrap} is not reachable: start it with 'hastream kafka start' "
        "(or pass --bootstrap / set HASTREAM_BOOTSTRAP)"
    )
    if not broker_reachable(bootstrap):
        raise fail(unreachable)
    try:
        existing = admin_client(bootstrap).list_topics(timeout=5).topics
    except KafkaException:
        raise fail(unreachable) from None
    missing = [t for t in topics if t not in existing]
    if missing:
        more = f" and {len(missing) - 1} more of the spec's topics" if len(missing) > 1 else ""
        raise fail(
            f"no topic '{missing[0]}'{more} on the Kafka broker at {bootstrap}: create them with '{create_with}'"
        )


def broker_reachable(bootstrap: str) -> bool:
    """Whether any of the bootstrap brokers accepts connections (a fast check, no client, no retries)."""
    from services.core.kafka import port_open

    return any(port_open(address) for address in bootstrap.split(","))


def kafka_error_text(e: Exception) -> str:
    """A Kafka exception's message without the KafkaError{...} wrapping."""
    first = e.args[0] if e.args else e
    text = first.str() if hasattr(first, "str") else str(first)
    return str(text)


class _ErrLine(logging.Handler):
    """Log records as lines on the CLI's stderr console."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(f"[yellow]{escape(record.getMessage())}[/]")


def cli_logging() -> None:
    """A command's logging: what it waits for (a broker) as one line on stderr; librdkafka only on errors."""
    wait = logging.getLogger("hastream.kafka")
    wait.handlers, wait.propagate = [_ErrLine()], False
    wait.setLevel(logging.INFO)
    logging.getLogger("hastream.librdkafka").setLevel(logging.ERROR)


def service_logging(service: str = "hastream") -> None:
    """A service's logging: one line per event, in the one format of ``services.core.logs``, in its log file."""
    from services.core.logs import setup_logging

    setup_logging(service)
    wait = logging.getLogger("hastream.kafka")
    wait.handlers, wait.propagate = [], True
    logging.getLogger("hastream.librdkafka").setLevel(logging.WARNING)
