#!/usr/bin/env bash
# The broker stand-in's launcher for a Kafka main class, as the distribution's bin/kafka-run-class.sh
# is for the scripts beside it: the jars of /opt/kafka/libs, the log4j2 configuration of
# /opt/kafka/config (brokers log to the console, tools only their warnings), KAFKA_HEAP_OPTS and
# KAFKA_OPTS.
set -euo pipefail
main="$1"
shift
log4j=/opt/kafka/config/tools-log4j2.yaml
heap="${KAFKA_HEAP_OPTS:--Xmx256m}"
if [ "$main" = kafka.Kafka ]; then
  log4j=/opt/kafka/config/log4j2.yaml
  heap="${KAFKA_HEAP_OPTS:--Xmx512m -Xms64m}"
fi
# shellcheck disable=SC2086 # the *_OPTS variables hold several options each
exec java $heap -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
  "-Dlog4j2.configurationFile=$log4j" ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*' "$main" "$@"
