# Stand-in for apache/kafka (the version of infra/kafka/pom.xml) where no image registry is
# reachable: the same broker jars the local launcher runs, fetched from Maven Central, on Debian's
# Java 17, with the paths of the official image that docker-compose.yml and
# infra/compose/kafka-sasl.sh use: /opt/kafka/bin/kafka-storage.sh,
# /opt/kafka/bin/kafka-broker-api-versions.sh, /etc/kafka/docker/run (kafka/run), a broker user,
# and /var/lib/kafka/data.
ARG BOOKWORM=hastream-standin/bookworm
FROM ${BOOKWORM}
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --shell /bin/bash appuser \
 && mkdir -p /opt/kafka/bin /opt/kafka/config /etc/kafka/docker /var/lib/kafka/data \
 && chown -R appuser /opt/kafka/config /var/lib/kafka
COPY libs/ /opt/kafka/libs/
COPY kafka/kafka-run-class.sh kafka/kafka-storage.sh kafka/kafka-broker-api-versions.sh /opt/kafka/bin/
COPY kafka/log4j2.yaml kafka/tools-log4j2.yaml /opt/kafka/config/
COPY kafka/run /etc/kafka/docker/run
USER appuser
EXPOSE 9092
VOLUME ["/var/lib/kafka/data"]
CMD ["/etc/kafka/docker/run"]
