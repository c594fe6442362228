"""The coordinator's web server: faust's aiohttp driver, serving our pages on a free port when
the default one is taken, and on the launcher's metrics port too."""

from __future__ import annotations

import logging
from typing import Callable, ClassVar, cast

import faust
from aiohttp.web import TCPSite
from faust.web.drivers.aiohttp import Web as AiohttpWeb

from services.core import metrics

log = logging.getLogger("hastream.coordinator")


class Web(AiohttpWeb):
    """faust's aiohttp web driver without its production index, so ``/`` is our status page,
    and able to fall back to a free port when the default one is taken."""

    production_blueprints: ClassVar[list] = []

    async def start_server(self) -> None:
        await self._runner.setup()
        app = cast(WebApp, self.app)
        try:
            await TCPSite(self._runner, app.conf.web_bind, app.conf.web_port).start()
        except OSError as e:
            if not app.web_port_fallback:
                raise
            await TCPSite(self._runner, app.conf.web_bind, 0).start()
            log.warning("port %d is taken (%s): serving on a free port", app.conf.web_port, e.strerror)
        port = int(self._runner.addresses[-1][1])
        log.info("status page on http://localhost:%d/ (JSON: /status, Prometheus: /metrics)", port)
        if app.metrics_port is not None:
            await self._serve_metrics(app.metrics_port)
        if app.on_web_bound is not None:
            app.on_web_bound(port)

    async def _serve_metrics(self, port: int) -> None:
        """The same views on the metrics port the launcher gave (loopback unless told otherwise)."""
        try:
            await TCPSite(self._runner, metrics.env_host(), port).start()
        except OSError as e:
            log.warning("metrics port %d is taken (%s): /metrics only on the status page's port", port, e.strerror)
            return
        log.info("metrics on http://%s:%d/metrics", metrics.env_host(), port)


class WebApp(faust.App):
    """A faust app served by ``Web``; the coordinator sets how it may bind and whom to tell."""

    web_port_fallback = False  # True: the port was not asked for, any free one will do
    on_web_bound: Callable[[int], None] | None = None
    metrics_port: int | None = None  # a second port serving the views, for Prometheus

    def _new_web(self) -> AiohttpWeb:
        return Web(self)
