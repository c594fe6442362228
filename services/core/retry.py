"""Retries of Kafka calls through a broker's transient errors (starting, failing over, briefly unreachable).

Which errors are transient is decided once here, and every admin, connection and commit call
that may meet one is wrapped in ``retry_transient`` (tenacity, with backoff), so a broker's
restart delays a service instead of failing it.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from tenacity import RetryCallState, retry, retry_if_exception, stop_after_delay, wait_exponential

# The Kafka clients' logger, by the name it had when the clients and their retries were one
# module: a program that quiets the clients' warnings (bench.broker_failover) quiets these too.
log = logging.getLogger("services.core.kafka")

# Errors of a broker that is starting, failing over or briefly unreachable: the call is
# made again with backoff. Codes starting with _ are librdkafka's own (a connection torn
# down when a broker dies is _DESTROY_BROKER, for instance); the others come from brokers.
TRANSIENT = {
    KafkaError._DESTROY_BROKER,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
    KafkaError._NODE_UPDATE,
    KafkaError._WAIT_CACHE,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_CONTROLLER,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR,
}


def _retriable(e: BaseException) -> bool:
    """Whether ``e`` is a transient broker error worth the same call again (a fatal one never is:
    the client that raised it can do nothing more)."""
    if not (isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError)):
        return False
    err: KafkaError = e.args[0]
    return not err.fatal() and (err.retriable() or err.code() in TRANSIENT)


def _log_retry(state: RetryCallState) -> None:
    """The first retry of a call is logged; later ones only at debug level (one line, not one per try)."""
    exc = state.outcome.exception() if state.outcome is not None else None
    level = logging.WARNING if state.attempt_number == 1 else logging.DEBUG
    log.log(level, "transient Kafka error, retrying %s for up to 60 s: %s", getattr(state.fn, "__name__", "call"), exc)


# Retry a call while a broker is starting, failing over or unreachable, for up to 60 s; a
# service that still fails then exits, and its supervisor (the launcher, compose) restarts it.
retry_transient = retry(
    retry=retry_if_exception(_retriable),
    wait=wait_exponential(multiplier=0.1, max=2),
    stop=stop_after_delay(60),
    before_sleep=_log_retry,
    reraise=True,
)
