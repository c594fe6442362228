"""docker-compose.yml and its SASL override as Docker would see them, for tests without Docker:
a service's merged and interpolated environment, and the broker settings the apache/kafka image
makes of its KAFKA_* variables."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from services.core.paths import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
SASL = REPO_ROOT / "docker-compose.sasl.yml"
VARIABLE = re.compile(r"\$\{(\w+)(?::?\?[^}]*)?\}")  # ${VAR} and ${VAR:?message}
_NOT_PROPERTIES = {"KAFKA_OPTS", "KAFKA_HEAP_OPTS"}  # the JVM's, not the broker's


def services(*files: Path) -> dict[str, dict[str, Any]]:
    """The services of the compose files, later files merged over earlier ones (environments key by key)."""
    out: dict[str, dict[str, Any]] = {}
    for f in files or (COMPOSE,):
        for name, svc in (yaml.safe_load(f.read_text())["services"] or {}).items():
            merged = {**out.get(name, {}), **svc}
            merged["environment"] = {**environment(out.get(name, {})), **environment(svc)}
            out[name] = merged
    return out


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, from either compose form (mapping or KEY=VALUE list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def interpolated(env: Mapping[str, str], dotenv: Mapping[str, str]) -> dict[str, str]:
    """``env`` with every ``${VAR}`` replaced from ``dotenv``, as compose does with ``.env``."""
    return {k: VARIABLE.sub(lambda m: dotenv[m.group(1)], v) for k, v in env.items()}


def image_properties(env: Mapping[str, str]) -> dict[str, str]:
    """The broker properties the apache/kafka image renders from KAFKA_* variables:
    in a name, '___' is '-', '__' is '_' and '_' is '.'."""
    out = {}
    for k, v in env.items():
        if k.startswith("KAFKA_") and k not in _NOT_PROPERTIES:
            name = k[len("KAFKA_") :].lower().replace("___", "\0").replace("__", "\1").replace("_", ".")
            out[name.replace("\0", "-").replace("\1", "_")] = v
    return out
