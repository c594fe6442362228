# syntax=docker/dockerfile:1
#
# The hastream image: the `hastream` CLI and every service it runs (node services, the Spark
# window stage). docker-compose.yml builds it for the demo deployment.
#
#   docker build -t hastream .
#   docker run --rm -e HASTREAM_BOOTSTRAP=kafka:9092 hastream node run examples/demo.yaml ingest --partition 0
#   docker run --rm --entrypoint python hastream -m spark_jobs.window_stage SPEC NODE --replica 0 --checkpoint DIR
#
# Debian bookworm rather than the newest slim base because it packages a Java 17 runtime: the
# Spark stage runs a JVM through pyspark. The Spark Kafka/Avro connector jars are fetched at
# build time by the project's own fetcher (spark_jobs/jars.py, from infra/spark/pom.xml) in a
# throw-away stage, so the image needs neither Maven nor network access at run time. The Kafka
# broker is not in this image: compose runs the official apache/kafka image.

ARG PYTHON_VERSION=3.11

# ---------------------------------------------------------------------------- base
FROM python:${PYTHON_VERSION}-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HASTREAM_HOME=/var/lib/hastream
# procps: Spark's launcher scripts call `ps`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app

# ---------------------------------------------------------------------------- spark-jars
# Only what the jar fetcher imports, so editing other code does not refetch the jars.
FROM base AS spark-jars
RUN apt-get update \
 && apt-get install -y --no-install-recommends maven \
 && rm -rf /var/lib/apt/lists/*
COPY services/__init__.py services/
COPY services/core/ services/core/
COPY spark_jobs/ spark_jobs/
COPY infra/__init__.py infra/
COPY infra/spark/ infra/spark/
RUN python -c "from spark_jobs.jars import ensure_spark_jars; print(len(ensure_spark_jars()), 'Spark connector jars')"

# ---------------------------------------------------------------------------- runtime
FROM base AS runtime
# Dependencies first (from pyproject.toml, pinned there), so code edits reuse this layer.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY --from=spark-jars /var/lib/hastream/jars/spark /var/lib/hastream/jars/spark
# Explicit paths instead of `COPY .`: the work tree holds a virtualenv and local broker data.
COPY schemas/ schemas/
COPY services/ services/
COPY spark_jobs/ spark_jobs/
COPY infra/ infra/
COPY bench/ bench/
COPY examples/ examples/
# Editable install: the code finds schemas/ relative to the repository root (/app).
RUN pip install --no-deps -e . \
 && useradd --system --home-dir /var/lib/hastream --shell /usr/sbin/nologin hastream \
 && chown -R hastream /var/lib/hastream

# The same variables the local launcher gives every service (services.deploy.local.service_env);
# HASTREAM_BOOTSTRAP comes from the deployment.
ENV PYTHONPATH=/app
USER hastream
ENTRYPOINT ["hastream"]
CMD ["--help"]
