"""One exception hierarchy: every error hastream raises on purpose is a ``HastreamError``.

The CLI turns any of them into one readable line; each keeps the builtin base that
callers caught before (``ValueError`` for bad input, ``LookupError`` for a missing name,
``RuntimeError`` for a process or tool that failed), so ``except ValueError`` still works.
"""

from __future__ import annotations


class HastreamError(Exception):
    """Base of every error hastream raises on purpose; its message says what to fix."""


class ConfigError(HastreamError, ValueError):
    """A setting that cannot be used; the message says what to fix."""


class SpecError(HastreamError, ValueError):
    """Every problem found in a spec, one readable line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ExprError(HastreamError, ValueError):
    """An expression that is not allowed or names an unknown field."""


class SchemaNotFound(HastreamError, LookupError):
    """No ``schemas/<name>.avsc`` for a schema name used in a spec."""


class DecodeError(HastreamError, ValueError):
    """A payload that is not valid Avro of the expected schema."""


class HeaderError(HastreamError, ValueError):
    """A message whose ht header is missing or malformed."""


class RestartImageError(HastreamError, ValueError):
    """A restart image that cannot be written or used."""


class FaultError(HastreamError, LookupError):
    """A fault command that names nothing that can take it."""


class InputGapError(HastreamError, LookupError):
    """Stable tuples of an input are missing from every replica's log: nothing can fill the gap."""


class TrimmedError(HastreamError, LookupError):
    """A recovery position lies before its log's start: the records it needs were deleted."""


class FencedError(HastreamError, RuntimeError):
    """A newer incarnation of this node replica has started: this copy must write no more."""


class WriterConflictError(HastreamError, ValueError):
    """An input stream already has a live writer, or has ended: a second writer would break its ids."""


class ContractError(HastreamError, ValueError):
    """An input message breaks the input contract (an id out of order, a late record): dead-lettered with this."""
