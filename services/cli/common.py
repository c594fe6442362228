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
from services.core.login import Login
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


def bootstrap_for(spec: Spec, bootstrap: str | None, stream: str | None = None, *, writer: bool = False) -> str:
    """The given bootstrap, else $HASTREAM_BOOTSTRAP, else the deployment's broker; once it answers
    and has the topics of ``stream`` (default: of the spec's inputs), else one line and exit 2
    instead of a minute of retries. On a SASL deployment's broker the command logs in as the
    deployment's writer of ``stream`` (``writer``) or its admin, unless the environment has a login."""
    found = _bootstrap(spec, bootstrap)
    if writer and stream is not None and (raw := spec.raw_of(stream)) is not None:
        stream = raw.name  # an ingress stream is written through its raw topic
    use_deployment_login(spec.name, found, stream if writer else None)
    streams = [stream] if stream is not None and stream in spec.streams else spec.sources()
    topics = [t for s in streams for t in spec.stream_topics(s)]
    broker_or_exit(found, topics, f"hastream up {spec.path or 'SPEC'}")
    return found


def use_deployment_login(name: str, bootstrap: str, source: str | None = None) -> None:
    """Give this command the login deployment ``name`` keeps for the writer of ``source`` (else its
    admin's) when it talks to that deployment's broker and the environment has no login of its own."""
    from services.core.login import env_login

    if env_login() is not None:
        return
    login = deployment_login(name, bootstrap, source)
    if login is not None:
        os.environ.update(login.env())


def deployment_login(name: str, bootstrap: str, source: str | None = None) -> Login | None:
    """The login deployment ``name`` keeps for the writer of ``source``, else its admin's; None when it
    has no logins or is on another broker than ``bootstrap``."""
    from services.deploy import access
    from services.deploy.deployment import Deployment

    try:
        dep = Deployment.load(name)
    except (LookupError, ValueError, TypeError, KeyError):
        return None
    if dep.bootstrap != bootstrap:
        return None
    logins = dep.logins()
    return logins.get(access.SOURCE + source if source else "") or logins.get(access.ADMIN)


def _bootstrap(spec: Spec, bootstrap: str | None) -> str:
    if bootstrap:
        return bootstrap
    if os.environ.get("HASTREAM_BOOTSTRAP"):
        return os.environ["HASTREAM_BOOTSTRAP"]
    from services.deploy.deployment import Deployment

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
    admin = admin_client(bootstrap)
    try:
        existing = admin.list_topics(timeout=5).topics
    except KafkaException:
        admin.poll(0)  # the client's error reports: a refused login says more than "not reachable"
        raise fail(login_refused(bootstrap) or _closed(bootstrap) or unreachable) from None
    missing = [t for t in topics if t not in existing]
    if missing:
        more = f" and {len(missing) - 1} more of the spec's topics" if len(missing) > 1 else ""
        raise fail(
            f"no topic '{missing[0]}'{more} on the Kafka broker at {bootstrap}: create them with '{create_with}'"
        )


def login_refused(bootstrap: str) -> str | None:
    """What to say when the broker at ``bootstrap`` refused this process's login, if it did."""
    from services.core.client_log import LOGIN_REFUSALS
    from services.core.login import env_login

    reason = LOGIN_REFUSALS.reason(bootstrap)
    if reason is None:
        return None
    login = env_login()
    if login is None:
        return (
            f"the Kafka broker at {bootstrap} wants a login ({reason}): set HASTREAM_SASL_USERNAME and "
            "HASTREAM_SASL_PASSWORD, or use the deployment 'hastream up --sasl' made"
        )
    return (
        f"the Kafka broker at {bootstrap} refused the login of user '{login.username}' ({reason}): "
        "check HASTREAM_SASL_USERNAME and HASTREAM_SASL_PASSWORD"
    )


def _closed(bootstrap: str) -> str | None:
    """What to say when a broker accepts connections but a client without a login gets no answer:
    a SASL broker closes them."""
    from services.core.login import env_login

    if env_login() is not None or not broker_reachable(bootstrap):
        return None
    return (
        f"the Kafka broker at {bootstrap} accepts connections but closes them: if it wants a SASL login, "
        "set HASTREAM_SASL_USERNAME and HASTREAM_SASL_PASSWORD"
    )


def broker_reachable(bootstrap: str) -> bool:
    """Whether any of the bootstrap brokers accepts connections (a fast check, no client, no retries)."""
    from services.core.client_log import port_open

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
    login = logging.getLogger("hastream.kafka.login")  # a refused login: the command says it in its error line
    login.handlers, login.propagate = [logging.NullHandler()], False


def service_logging(service: str = "hastream") -> None:
    """A service's logging: one line per event, in the one format of ``services.core.logs``, in its log file."""
    from services.core.logs import setup_logging

    setup_logging(service)
    wait = logging.getLogger("hastream.kafka")
    wait.handlers, wait.propagate = [], True
    login = logging.getLogger("hastream.kafka.login")
    login.handlers, login.propagate = [], True
    logging.getLogger("hastream.librdkafka").setLevel(logging.WARNING)
