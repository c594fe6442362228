"""The coordinator's web pages: ``/status`` (JSON), ``/metrics`` (Prometheus) and ``/`` (the live page)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import faust
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.coordinator.page import STATUS_HTML

if TYPE_CHECKING:
    from services.coordinator.app import Coordinator


def wire(app: faust.App, coordinator: Coordinator) -> None:
    """The three views, all reading ``coordinator`` on the event loop its agents run on."""

    @app.page("/status")
    class StatusView(View):
        async def get(self, request: Request) -> Response:
            return self.json(coordinator.status())

    @app.page("/metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            body = generate_latest(coordinator.registry)
            return self.bytes(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @app.page("/")
    class IndexView(View):
        async def get(self, request: Request) -> Response:
            return self.html(STATUS_HTML.replace("{{title}}", html.escape(coordinator.spec.name)))
