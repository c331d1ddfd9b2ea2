# Better Compute. The two commands: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help setup demo demo-bare-metal demo-vps test lint pgtap pytest fuzz bench bench-capacity bench-worker bench-api bench-nodes bench-plans bench-notify bench-cli bench-scale bench-ha clean

help:
	@echo "make demo   - start a private PostgreSQL under ./.bc/, migrate it, show what exists"
	@echo "make demo-bare-metal - the bare-metal flow: a Redfish BMC, the site agent, a machine provisioned, reserved whole, released, rejoined"
	@echo "make demo-vps - the VPS flow: a 2-GPU VM on a bcd with libvirt's test driver (docs/vps.md)"
	@echo "make test   - lint, pgTAP suite, pytest (installs what is missing first)"
	@echo "make lint | make pgtap | make pytest - one stage"
	@echo "make fuzz   - schemathesis with fresh seeds against the HTTP API (FUZZ_RUNS=5, FUZZ_EXAMPLES=100)"
	@echo "make bench  - benchmarks (not a test, ~12 min; one: make bench-capacity|worker|api|nodes|plans|notify|cli):"
	@echo "             1,000-node fleet, reservations/s, capacity queries (~3 min);"
	@echo "             outbox events/s to webhooks, work items/s with 1 and 4 workers;"
	@echo "             reservations/s through the HTTP relay vs. in the database at 8 clients;"
	@echo "             5,000 simulated nodes on one gateway: heartbeat statements/s, spec-to-ack latency;"
	@echo "             a fleet growing from empty tables to 100k bookings: CPU per admission per quarter (plans);"
	@echo "             commits/s with fsync on at 1/2/8/16 clients, with a plain NOTIFY vs the gated wake-up (notify);"
	@echo "             better-compute --help start-up time (cli, target < 0.3 s)"
	@echo "make bench-scale - reservations/s at 8 clients through 1 API relay vs 2 (the ratio; docs/scale.md)"
	@echo "make bench-ha - failover figures: Patroni switchover and kill -9 of the primary under load (~2 min)"
	@echo "make clean  - stop the demo cluster and remove ./.bc/"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

demo: setup
	bash scripts/demo.sh

demo-bare-metal: setup
	bash scripts/demo-bare-metal.sh

demo-vps: setup
	bash scripts/demo-vps.sh

# Each stage fails on a failed test and on an empty run (pytest exits 5 when it collects nothing).
test: setup
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory pgtap
	@$(MAKE) --no-print-directory pytest

lint: setup
	$(PY) -m better_compute.lint sql migrations pgtap

pgtap: setup
	$(PY) scripts/run_pgtap.py

pytest: setup
	$(PY) -m pytest -q -p no:cacheprovider

# Fuzz the HTTP API with fresh seeds (not part of make test, which replays one fixed seed): FUZZ_RUNS
# runs of FUZZ_EXAMPLES examples per method; a failure prints its seed (BC_FUZZ_SEED=<seed> replays it).
FUZZ_RUNS ?= 5
FUZZ_EXAMPLES ?= 100
fuzz: setup
	for run in $$(seq $(FUZZ_RUNS)); do \
	  BC_FUZZ_SEED=random BC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -p no:cacheprovider tests/test_relay_http.py -k schemathesis || exit 1; \
	done

bench: bench-capacity bench-worker bench-api bench-nodes bench-plans bench-notify bench-cli

bench-capacity bench-worker bench-api bench-nodes bench-plans bench-notify bench-cli bench-scale bench-ha: bench-%: setup
	$(PY) bench/$*.py

clean:
	-$(VENV)/bin/better-compute dev down
	rm -rf .bc
