# The two commands a newcomer needs: `make demo` and `make test`.
# Each installs what it needs on first use: the venv with pinned packages, then the
# Kafka jars from Maven Central.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo demo-faults test test-all lint bench peers jars docker clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("hastream needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	@command -v java >/dev/null || { echo "error: Java 17 is needed for the Kafka broker (install a JDK 17)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: Maven is needed to fetch the Kafka jars (install maven)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

$(VENV)/.jars-kafka: $(STAMP) infra/kafka/pom.xml
	$(PY) -c 'from infra.kafka.cluster import ensure_kafka_jars; ensure_kafka_jars()'
	touch $@

jars: $(VENV)/.jars-kafka

demo: $(VENV)/.jars-kafka
	$(VENV)/bin/hastream demo

demo-faults: $(VENV)/.jars-kafka
	$(VENV)/bin/hastream demo --faults

lint: $(STAMP)
	$(VENV)/bin/ruff check services spark_jobs infra bench tests
	$(VENV)/bin/ruff format --check services spark_jobs infra bench tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo  # the layers of .importlinter (docs/architecture.md)
	$(PY) -m infra.sizes  # no module over 400 lines, no function over 80, in services/ and spark_jobs/

test: jars
	$(PY) -m pytest $(PYTEST_ARGS)

test-all: jars
	$(PY) -m pytest -m '' $(PYTEST_ARGS)

# A Docker engine with the compose v2 plugin, for the image and compose tests (tests/docker), which
# are skipped without one: docker.io and debootstrap from Debian's packages, the plugin built with Go
# (kept in ~/.docker/cli-plugins), dockerd started unless one answers. Needs root.
docker:
	infra/docker/engine.sh install
	infra/docker/engine.sh start

bench: $(VENV)/.jars-kafka
	$(PY) -m bench.throughput

# The benchmark's peer, Quix Streams, in a virtualenv of its own: it pins an older confluent-kafka.
PEERS := $(or $(HASTREAM_HOME),.hastream)/peers
peers:
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q 'quixstreams==3.28.1' 'fastavro==1.13.1'

clean:
	$(VENV)/bin/hastream down --kafka 2>/dev/null || true
	rm -rf $(VENV) .hastream .pytest_cache .hypothesis
