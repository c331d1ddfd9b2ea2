# Better Compute. The two commands: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help setup demo test lint pgtap pytest bench bench-capacity bench-worker bench-api bench-nodes clean

help:
	@echo "make demo   - start a private PostgreSQL under ./.bc/, migrate it, show what exists"
	@echo "make test   - lint, pgTAP suite, pytest (installs what is missing first)"
	@echo "make lint | make pgtap | make pytest - one stage"
	@echo "make bench  - benchmarks (not a test, ~9 min; one: make bench-capacity|worker|api|nodes):"
	@echo "             1,000-node fleet, reservations/s, capacity queries (~3 min);"
	@echo "             outbox events/s to webhooks, work items/s with 1 and 4 workers;"
	@echo "             reservations/s through the HTTP relay vs. in the database at 8 clients;"
	@echo "             5,000 simulated nodes on one gateway: heartbeat statements/s, spec-to-ack latency"
	@echo "make clean  - stop the demo cluster and remove ./.bc/"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/install-system-deps.sh
	bash scripts/install-system-deps.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

demo: setup
	bash scripts/demo.sh

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

bench: bench-capacity bench-worker bench-api bench-nodes

bench-capacity bench-worker bench-api bench-nodes: bench-%: setup
	$(PY) bench/$*.py

clean:
	-$(VENV)/bin/better-compute dev down
	rm -rf .bc
