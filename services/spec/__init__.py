"""The spec language: model, YAML parsing with locations, validation, and the per-node plan."""

from services.core.errors import SpecError
from services.spec.model import Aggregate, DpcConfig, NodeDef, OperatorDef, Scheme, Spec, StreamDef
from services.spec.parse import load_spec, parse_spec

__all__ = [
    "Aggregate",
    "DpcConfig",
    "NodeDef",
    "OperatorDef",
    "Scheme",
    "Spec",
    "SpecError",
    "StreamDef",
    "load_spec",
    "parse_spec",
]
