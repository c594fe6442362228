"""Failure-free reference runs of the chain by shape, shared by the fault tests of this directory."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from tests.dpc_chain import DEFAULT, Run, Shape, run_chain


@pytest.fixture(scope="session")
def reference(
    kafka: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Callable[[Shape], Run]:
    """``reference(shape)``: the failure-free run of that shape on the shared broker, run once per session
    (the default shape is the ``failure_free`` fixture)."""
    runs: dict[Shape, Run] = {}

    def get(shape: Shape) -> Run:
        if shape == DEFAULT:
            return request.getfixturevalue("failure_free")
        if shape not in runs:
            runs[shape] = run_chain(kafka, tmp_path_factory.mktemp("ff"), [], None, shape=shape)
        return runs[shape]

    return get
