"""The class a descriptor names as ``module:Class``, imported when it is first built.

The spec's registries (schemes, state stores) are data in the spec layer: they name their
classes, which live in layers above it. Whoever builds from a descriptor imports the class
here, on first use, so the registry never imports what it names.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import Any


@cache
def factory(ref: str) -> Any:
    """The attribute ``ref`` names (``module:Class``), its module imported once."""
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)
