#!/usr/bin/env bash
# The kafka service of docker-compose.sasl.yml: the apache/kafka image's broker with SASL/SCRAM.
# SCRAM logins live in the metadata log, so the admin's must be written when the storage is
# formatted, before the broker first starts (the image formats without it); the local launcher
# does the same (infra/kafka/cluster.py). Then the image's own start-up runs as usual.
set -euo pipefail
kafka_home="${KAFKA_HOME:-/opt/kafka}"                 # where the image has Kafka
image_run="${KAFKA_IMAGE_RUN:-/etc/kafka/docker/run}"  # the image's own start-up
: "${HASTREAM_PASSWORD_ADMIN:?run './hastream logins examples/demo.yaml' first: it writes .env}"
data="${KAFKA_LOG_DIRS:?}"
if [ ! -e "$data/meta.properties" ]; then
  format="${TMPDIR:-/tmp}/format.properties"
  cat > "$format" <<PROPS
process.roles=${KAFKA_PROCESS_ROLES}
node.id=${KAFKA_NODE_ID}
controller.quorum.voters=${KAFKA_CONTROLLER_QUORUM_VOTERS}
controller.listener.names=${KAFKA_CONTROLLER_LISTENER_NAMES}
listeners=${KAFKA_LISTENERS}
listener.security.protocol.map=${KAFKA_LISTENER_SECURITY_PROTOCOL_MAP}
inter.broker.listener.name=${KAFKA_INTER_BROKER_LISTENER_NAME}
log.dirs=${data}
PROPS
  "$kafka_home/bin/kafka-storage.sh" format --cluster-id "${CLUSTER_ID}" --config "$format" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=${HASTREAM_PASSWORD_ADMIN}]"
fi
# The admin's client settings, for the healthcheck.
cat > "${TMPDIR:-/tmp}/admin.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="${HASTREAM_PASSWORD_ADMIN}";
PROPS
exec "$image_run"
