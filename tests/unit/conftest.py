"""Unit tests run a move's seek inline, so a switch applies in the call that decides it."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from typing import Any, Callable

import pytest

from services.dpc import seeks


class InlineExecutor(Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)
        return f


@pytest.fixture(autouse=True)
def inline_seeks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seeks, "SEEKS", InlineExecutor())
