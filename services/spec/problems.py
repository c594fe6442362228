"""Spec problems with their place in the YAML file: ``file:line:col: path: message``, all collected before reporting."""

from __future__ import annotations

import re
from typing import Any

import yaml

TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # what Kafka accepts as a topic name


def to_python(node: yaml.Node, path: tuple, marks: dict[tuple, yaml.Mark]) -> Any:
    """The YAML node as plain Python, recording where each value sits in ``marks``."""
    marks[path] = node.start_mark
    if isinstance(node, yaml.MappingNode):
        out = {}
        for k, v in node.value:
            key = yaml.safe_load(yaml.serialize(k)) if not isinstance(k, yaml.ScalarNode) else k.value
            marks[path + (key, "__key__")] = k.start_mark
            out[key] = to_python(v, path + (key,), marks)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [to_python(v, path + (i,), marks) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


class Problems:
    """Collects problems with the location of the YAML node they refer to."""

    def __init__(self, source: str, marks: dict[tuple, yaml.Mark]) -> None:
        self.source = source
        self.marks = marks
        self.problems: list[str] = []

    def err(self, path: tuple, msg: str) -> None:
        mark = None
        for i in range(len(path), -1, -1):
            mark = self.marks.get(path[:i])
            if mark is not None:
                break
        loc = f"{self.source}:{mark.line + 1}:{mark.column + 1}" if mark else self.source
        dotted = ".".join(str(p) for p in path) or "(top)"
        self.problems.append(f"{loc}: {dotted}: {msg}")

    def mapping(self, obj: Any, path: tuple, what: str) -> dict:
        if obj is None:
            return {}
        if not isinstance(obj, dict):
            self.err(path, f"{what} must be a mapping, got {type(obj).__name__}")
            return {}
        return obj

    def unknown_keys(self, obj: dict, allowed: set[str], path: tuple) -> None:
        for k in obj:
            if k not in allowed:
                self.err(path + (k,), f"unknown key '{k}' (allowed: {', '.join(sorted(allowed))})")

    def pos_int(self, obj: dict, key: str, path: tuple, default: int | None = None, minimum: int = 1) -> int:
        v = obj.get(key, default)
        if v is None:
            self.err(path, f"'{key}' is required")
            return minimum
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            self.err(path + (key,), f"'{key}' must be an integer >= {minimum}, got {v!r}")
            return minimum
        return v

    def topic(self, obj: dict, path: tuple) -> str | None:
        """``obj``'s ``topic:``, a Kafka topic name (None: not given, or not a name, reported)."""
        topic = obj.get("topic")
        if topic is None:
            return None
        if not isinstance(topic, str) or not TOPIC_RE.match(topic) or topic in (".", ".."):
            self.err(
                path + ("topic",), f"'topic' must be a Kafka topic name (letters, digits, '.', '_', '-'), got {topic!r}"
            )
            return None
        return topic

    def name_list(self, v: Any, path: tuple, what: str) -> list[str]:
        if isinstance(v, str):
            return [v]
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return v
        self.err(path, f"{what} must be a name or a non-empty list of names")
        return []
