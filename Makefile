# pulsar-shared-state: every entry point does its own set-up.
#   make run    set up, start the embedded Pulsar broker, run the main job
#   make test   set up and run the whole suite against a real broker
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SOURCES := setup.py pyproject.toml pyspark_pulsar_state.py $(shell find state functions connectors deploy -name '*.py' -o -name '*.yaml' -o -name py.typed 2>/dev/null)

.PHONY: test-cluster test-loaded check-min-deps bench bench-cluster bench-spark-changelog test-faults bench-core bench-sink bench-spark deploy undeploy package run test test-unit test-integration lint format broker-start broker-stop clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# strict editable install: the package's files are linked, so mypy sees them too
$(STAMP): $(PY) $(SOURCES)
	$(PY) -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/pulsar-state -v demo --data-dir .pulsar/run

test: $(STAMP) lint
	$(PY) -m pytest

# long fault-injection runs (kill -9, fencing, broker restart, partition, auth);
# a short version of the same tests runs in `make test`
test-faults: $(STAMP)
	PULSAR_STATE_FAULTS=full PULSAR_STATE_FAULTS_REPORT=bench/results/faults.md $(PY) -m pytest tests/faults

# `make test` RUNS times in a row beside `stress-ng --cpu 2` (a loaded machine:
# what a timing that stands in for a guarantee fails on); each run's time printed
RUNS ?= 3
test-loaded: $(STAMP)
	@command -v stress-ng >/dev/null || { echo "test-loaded needs stress-ng (apt-get install stress-ng)"; exit 2; }
	@for i in $$(seq 1 $(RUNS)); do \
		stress-ng --cpu 2 --quiet & load=$$!; start=$$(date +%s); \
		$(MAKE) test; rc=$$?; kill $$load; wait $$load 2>/dev/null; \
		echo "loaded run $$i of $(RUNS): exit $$rc in $$(( $$(date +%s) - start )) s"; \
		[ $$rc -eq 0 ] || exit $$rc; \
	done

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

# a real two-broker cluster with token auth (pulsar-state cluster), started once on
# .pulsar/test-cluster (PULSAR_STATE_TEST_CLUSTER_DIR moves it); `make test` runs it last
test-cluster: $(STAMP)
	$(PY) -m pytest tests/cluster

# --- test-faults-cluster (issue #27: the fault report's cluster runs) ---
# the cluster tier's fault runs at full scale: a bookie killed (3 bookies), kill -9
# of the owning broker, bundle unloads moving the topic, a rolling restart of the
# brokers; their rows replace the section "On a local cluster" of
# bench/results/faults.md (make test-faults keeps that section, and this the rest)
.PHONY: test-faults-cluster
CLUSTER_FAULTS := test_bookie_loss test_failover_writes test_bundle_moves test_rolling_restart
test-faults-cluster: $(STAMP)
	PULSAR_STATE_FAULTS=full PULSAR_STATE_FAULTS_REPORT=bench/results/faults.md \
		$(PY) -m pytest $(CLUSTER_FAULTS:%=tests/cluster/%.py)
# --- end test-faults-cluster ---

# every floor of setup.py (pulsar-client, requests, click, ..., pyspark, pyarrow) in a throwaway venv
# under .cache/min-deps: install, import, register, and read a map of the broker at
# PULSAR_STATE_TEST_SERVICE_URL/PULSAR_STATE_TEST_ADMIN_URL (without them: import and register only)
check-min-deps: $(STAMP)
	$(PY) tests/min_deps.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy -p pulsar_state

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

broker-start: $(STAMP)
	$(VENV)/bin/pulsar-state broker start --data-dir .pulsar/run

broker-stop: $(STAMP)
	$(VENV)/bin/pulsar-state broker stop --data-dir .pulsar/run

clean:
	-$(VENV)/bin/pulsar-state broker stop --data-dir .pulsar/run
	-$(VENV)/bin/pulsar-state broker stop --data-dir .pulsar/test
	-$(VENV)/bin/pulsar-state cluster stop --data-dir .pulsar/test-cluster
	-$(VENV)/bin/pulsar-state cluster stop --data-dir .pulsar/test-cluster-bookies
	-$(VENV)/bin/pulsar-state cluster stop --data-dir .pulsar/bench-cluster
	rm -rf build .pulsar .pytest_cache .mypy_cache .ruff_cache *.egg-info

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]' --config-settings editable_mode=strict
	touch $(BENCH_STAMP)

# against etcd and ZooKeeper (installed from Debian's packages when missing),
# TableView and raw Pulsar, bookie fsync on and off: bench/results/peers.md;
# BENCH_ARGS="--rounds 5 ..."; BENCH_ARGS=--smoke: a tiny end-to-end check (.cache/bench/)
bench: $(BENCH_STAMP)
	$(PY) -m bench.peers $(BENCH_ARGS)

# the same put, read and contended-update workloads with the Pulsar systems on a local
# cluster (2 brokers, 2 bookies fsyncing their journals, no auth) started fresh on
# .pulsar/bench-cluster and stopped at the end, etcd and ZooKeeper in the same run:
# bench/results/peers_cluster.md; BENCH_ARGS as for bench (--smoke, --rounds, --via owner)
bench-cluster: $(BENCH_STAMP)
	$(PY) -m bench.peers_cluster $(BENCH_ARGS)

bench-core: $(STAMP)
	$(PY) -m bench.core

# the SQL sink runner's batched writes into PostgreSQL vs executemany and one record a
# transaction: bench/results/sink.md
bench-sink: $(STAMP)
	$(PY) -m bench.sink

bench-spark: $(STAMP)
	$(PY) -m bench.spark

# the changelog read in N position ranges vs one range, same topic, same run
bench-spark-changelog: $(STAMP)
	$(PY) -m bench.spark --mode changelog --keys 100000

# deploy the packaged functions onto a cluster: make deploy ADMIN_URL=http://host:8080
# (default: the embedded broker of `make broker-start`)
ADMIN_URL ?= $(shell $(VENV)/bin/pulsar-state broker status --data-dir .pulsar/run 2>/dev/null | sed -n 's/^admin_url=//p')

deploy: $(STAMP)
	@test -n "$(ADMIN_URL)" || (echo "no ADMIN_URL and no embedded broker: run make broker-start or pass ADMIN_URL=..." && exit 1)
	$(VENV)/bin/pulsar-state deploy --admin-url $(ADMIN_URL)

undeploy: $(STAMP)
	@test -n "$(ADMIN_URL)" || (echo "no ADMIN_URL and no embedded broker" && exit 1)
	$(VENV)/bin/pulsar-state undeploy --admin-url $(ADMIN_URL)

# the wheel, and a self-contained zip per function (--py of pulsar-admin functions create)
package: $(STAMP)
	$(PY) -I -m build --outdir dist .
	$(VENV)/bin/pulsar-state package --out dist/functions
