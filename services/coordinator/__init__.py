"""The coordinator service (faust-streaming): replica states from heartbeats, failure detection,
staggered reconciliation grants, and a status page.

``grants`` holds the decisions as plain code (unit-tested without Kafka); ``app`` wires them to
faust agents, changelog-backed tables, timers and web views; ``client`` reads its status.
"""
