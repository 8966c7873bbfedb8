# streamq — `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST := $(PY) -m pytest
REDIS7_PORT ?= 6479
REDIS8_PORT ?= 6482
# root installs Debian packages itself; anyone else through sudo
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup docs demo run build dist test test-fast test-contract test-batch test-pending test-terminate test-cleanup \
        test-errors test-auto-stop test-spark test-pyspark40 test-redis7 test-redis8 test-cluster test-soak test-soak-ordered bench lint fmt typecheck clean redis-up \
        demo-batch demo-start-position demo-auto-stop demo-stop-message demo-cleanup demo-pipeline demo-microservice \
        demo-dashboard browser-deps postgres-deps demo-service demo-cluster demo-exactly-once

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,docs,spark,metrics,dashboard]'
	touch $(STAMP)

demo run: setup
	$(PY) -m demos.main

demo-batch: setup
	$(PY) -m demos.batch

demo-start-position: setup
	$(PY) -m demos.start_position

demo-auto-stop: setup
	$(PY) -m demos.auto_stop

demo-stop-message: setup
	$(PY) -m demos.stop_message

demo-cleanup: setup
	$(PY) -m demos.cleanup

demo-pipeline: setup
	$(PY) -m demos.pipeline

demo-microservice: setup
	$(PY) -m demos.microservice

# The dashboard over live traffic (producer, consumer, failures) until Ctrl-C.
demo-dashboard: setup
	$(PY) -m demos.dashboard

# The dashboard's browser tests drive Debian's chromium through the playwright package:
# both are installed when missing; where that is impossible those tests skip, saying why.
# apt's and dpkg's output goes to .cache/apt-chromium.log (shown in part when it fails).
APT_LOG := .cache/apt-chromium.log
browser-deps: setup
	@command -v chromium >/dev/null 2>&1 || \
	  (echo "make: installing Debian's chromium with apt-get for the dashboard's browser tests" \
	    "(about 115 packages, once; log in $(APT_LOG))" && mkdir -p $(dir $(APT_LOG)) && \
	   { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq chromium; } >$(APT_LOG) 2>&1) || \
	  { tail -n 5 $(APT_LOG) 2>/dev/null; \
	    echo "make: could not install chromium: the dashboard's browser tests will skip"; }
	@$(PY) -c "import playwright" 2>/dev/null || $(PY) -m pip install --quiet playwright || \
	  echo "make: could not install playwright: the dashboard's browser tests will skip"

# The PostgreSQL effects tests (tests/effects), `make demo-exactly-once` and the soak's
# exactly-once mode start their own server from Debian's postgresql (initdb and pg_ctl in a
# temporary folder, no system service): installed when missing; where that is impossible
# those tests skip, saying why (and the demo and the soak fail, saying why). Log in .cache/.
PG_APT_LOG := .cache/apt-postgresql.log
postgres-deps: setup
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (echo "make: installing Debian's postgresql with apt-get for the PostgreSQL effects tests," \
	    "demo-exactly-once and test-soak (once; log in $(PG_APT_LOG))" && mkdir -p $(dir $(PG_APT_LOG)) && \
	   { $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq postgresql; } >$(PG_APT_LOG) 2>&1) || \
	  { tail -n 5 $(PG_APT_LOG) 2>/dev/null; \
	    echo "make: could not install postgresql: the PostgreSQL effects tests will skip" \
	      "(and demo-exactly-once and the soak's exactly-once mode fail)"; }

# `streamq run` with 2 workers, metrics and health; a worker SIGKILLed and back; SIGTERM drains
demo-service: setup
	$(PY) -m demos.service

# A topic of 6 partitions over an embedded cluster (3 masters, 1 replica each), two consumer
# processes, a master killed mid-run: per-key order kept, nothing lost (exit 1 otherwise).
demo-cluster: setup
	$(PY) -m demos.cluster

# A ledger (transfers -> balances in PostgreSQL and a Redis hash, and receipts) whose three
# consumer processes are SIGKILLed at random: every transfer applied exactly once in each
# (exit 1 otherwise). Its own PostgreSQL from Debian's postgresql, stopped when it ends.
demo-exactly-once: setup postgres-deps
	$(PY) -m demos.exactly_once

# The documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link fails.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# Three test processes (pytest-xdist) on a 2-core machine, each with its own embedded
# server and cluster: most tests wait on servers and subprocesses, not on the CPU (two
# processes kept the machine's CPU under half busy). The tests of the shared SparkSession
# keep to one of them. With $STREAMQ_REDIS_URL (and in the targets with an external
# server below) the suite runs in one process: tests that look at the whole server would
# see each other's keys.
XDIST := $(if $(STREAMQ_REDIS_URL),,-n 3 --dist loadgroup)

# --durations: the slowest tests named at the end of every run, where the suite's time goes
test: setup browser-deps postgres-deps docs
	$(PYTEST) -q $(XDIST) --durations=25

test-fast: setup
	$(PYTEST) -q $(XDIST) -m "not slow and not spark"

test-contract: setup
	$(PYTEST) -q $(XDIST) tests/consume/contract

test-batch: setup
	$(PYTEST) -q tests/consume/test_batching.py

test-pending: setup
	$(PYTEST) -q tests/consume/test_recovery.py

test-terminate: setup
	$(PYTEST) -q tests/topic/test_control.py -k terminate

test-cleanup: setup
	$(PYTEST) -q tests/topic/test_cleanup.py

# The tests ERROR_HANDLING.md's rows cite as their proof ("Proved by"), read from it.
test-errors: setup
	$(PYTEST) -q $(XDIST) $$($(PY) -m tests.helpers.error_rows)

# A consumer stopping by itself when its stream or group is deleted or its topic terminated,
# in every mode (the tests marked auto_stop).
test-auto-stop: setup
	$(PYTEST) -q -m auto_stop tests

test-spark: setup
	$(PYTEST) -q -m spark

# The long fault soak (6-10 min; not part of `make test`): producer and consumer processes
# under SIGKILL, SIGSTOP, CLIENT KILL, server crashes and a degraded network (fault proxies);
# exits non-zero on any loss. Then again on the shared embedded server of a private
# STREAMQ_HOME, its keeper SIGKILLed (there without the network faults: no URL to proxy).
# Then its exactly-once mode (tests/soak/exactly_once.py), with every fault, on our own server
# and on an embedded cluster (a master SIGKILLed): the ledger of demo-exactly-once, each
# transfer once in PostgreSQL (its own server, from Debian's postgresql), the Redis hash,
# the receipts and the topic (~2 min each).
# Knobs: SOAK_MESSAGES, SOAK_CONSUMERS, SOAK_DURATION, SOAK_SEED, ... (see --help).
test-soak: setup postgres-deps
	$(PY) -m tests.soak.soak --server own
	$(PY) -m tests.soak.soak --server shared
	$(PY) -m tests.soak.soak --mode exactly-once --server own --duration 75 --messages 15000 --rate 120
	$(PY) -m tests.soak.soak --mode exactly-once --server cluster --duration 75 --messages 15000 --rate 120

# The soak's ordered mode (tests/soak/ordered.py): keyed jobs on 4 partitions, ordered=True,
# per-key order checked under the faults; on our own server, then on an embedded cluster of
# 3 masters with a replica each, a master SIGKILLed, each node behind a fault proxy (~5 min
# in all).
test-soak-ordered: setup
	$(PY) -m tests.soak.soak --mode ordered --server own --duration 90 --messages 15000 --rate 120 --poison-rate 0
	$(PY) -m tests.soak.soak --mode ordered --server cluster --duration 90 --messages 15000 --rate 120 --poison-rate 0

# The Spark tests on the oldest supported pyspark (4.0), in a venv of their own.
test-pyspark40:
	test -x .venv-pyspark40/bin/python || $(PYTHON) -m venv .venv-pyspark40
	.venv-pyspark40/bin/python -m pip install --quiet "pyspark>=4.0,<4.1" pyarrow -e '.[dev]'
	.venv-pyspark40/bin/python -m pytest -q -p no:cacheprovider tests/spark

# The whole suite against another server binary ($(1)) on a private loopback port ($(2)).
define suite_on_server
	DIR=$$(mktemp -d); \
	$(1) --port $(2) --bind 127.0.0.1 --save '' --appendonly no \
	  --dir $$DIR --daemonize yes --pidfile $$DIR/pid --logfile $$DIR/log; \
	sleep 0.5; \
	STREAMQ_REDIS_URL=redis://127.0.0.1:$(2)/0 $(PYTEST) -q; rc=$$?; \
	kill $$(cat $$DIR/pid); sleep 0.5; rm -rf $$DIR; exit $$rc
endef

# The whole suite (Spark included) with $STREAMQ_REDIS_URL on an embedded Redis Cluster of
# three masters (tools/on_cluster.py gives the URL of one node; streamq finds the others).
# Tests of what is single-node by nature (ACL users per node, a non-cluster server) skip,
# saying why.
test-cluster: setup browser-deps postgres-deps
	$(PY) tools/on_cluster.py -- $(PYTEST) -q

# The whole suite against Debian's redis-server 7.0.
test-redis7: setup
	command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)
	$(call suite_on_server,redis-server,$(REDIS7_PORT))

# The whole suite against Redis >= 8.2 (server-side XDELEX ... ACKED in cleanup), built
# once from Debian experimental's source package into .cache/ (tools/build-redis8.sh).
test-redis8: setup
	tools/build-redis8.sh .cache/redis8
	$(call suite_on_server,.cache/redis8/redis-server,$(REDIS8_PORT))

# Run the embedded server in the foreground and print its URL.
redis-up: setup
	$(PY) -m streamq.cli server

bench: setup
	$(PY) -m bench.run
	$(PY) -m bench.cluster
	$(PY) -m bench.ordered

lint: setup
	$(PY) -m ruff check streamq tests bench demos handlers
	$(PY) -m ruff format --check streamq tests bench demos handlers

fmt: setup
	$(PY) -m ruff format streamq tests bench demos handlers
	$(PY) -m ruff check --fix streamq tests bench demos handlers

typecheck: setup
	$(PY) -m mypy

# The wheel and the sdist into dist/ (the wheel is built from the sdist, so both are checked).
build dist: setup
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
