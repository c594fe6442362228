# The hastream image: the `hastream` CLI and every service it runs (node services, Spark nodes
# included). docker-compose.yml builds it for the demo deployment.
#
#   docker build -t hastream .
#   docker run --rm -e HASTREAM_BOOTSTRAP=kafka:9092 hastream node run examples/demo.yaml ingest --partition 0
#
# Debian bookworm rather than the newest slim base because it packages a Java 17 runtime: the
# window of a Spark node runs a JVM through pyspark. The Kafka broker is not in this image:
# compose runs the official apache/kafka image.

# PYTHON_IMAGE: the base, for a registry mirror or a stand-in built where no registry is
# reachable (infra/docker/standins.py); docker-compose.yml passes HASTREAM_PYTHON_IMAGE.
ARG PYTHON_VERSION=3.11
ARG PYTHON_IMAGE=python:${PYTHON_VERSION}-slim-bookworm

# ---------------------------------------------------------------------------- base
FROM ${PYTHON_IMAGE} AS base
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

# ---------------------------------------------------------------------------- runtime
FROM base AS runtime
# Dependencies first (from pyproject.toml, pinned there), so code edits reuse this layer.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# Explicit paths instead of `COPY .`: the work tree holds a virtualenv and local broker data.
COPY schemas/ schemas/
COPY services/ services/
COPY spark_jobs/ spark_jobs/
COPY infra/ infra/
COPY bench/ bench/
COPY examples/ examples/
# Editable install: the code finds schemas/ relative to the repository root (/app).
RUN pip install --no-deps -e . \
 && useradd --system --create-home --home-dir /var/lib/hastream --shell /usr/sbin/nologin hastream \
 && chown -R hastream /var/lib/hastream

# The same variables the local launcher gives every service (services.deploy.local.service_env);
# HASTREAM_BOOTSTRAP comes from the deployment.
ENV PYTHONPATH=/app
USER hastream
ENTRYPOINT ["hastream"]
CMD ["--help"]
