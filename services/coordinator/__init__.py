"""The coordinator service (faust-streaming): replica states from heartbeats, failure detection,
staggered reconciliation grants, HA takeovers, log trims, and a status page.

The decisions are plain code (unit-tested without Kafka): ``services.dpc.consistency``,
``takeover``, ``trims``. ``app`` configures the faust app, its tables and its run; ``wiring``
wires each protocol to faust agents, timers and web views, one module per protocol; ``web`` is
the web server, ``address`` where it listens; ``client`` reads its status.
"""
