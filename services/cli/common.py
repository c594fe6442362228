"""What every CLI command shares: consoles, one-line errors, spec and settings loading."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

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


def bootstrap_for(spec: Spec, bootstrap: str | None) -> str:
    """The given bootstrap, else $HASTREAM_BOOTSTRAP, else the running deployment's broker."""
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
