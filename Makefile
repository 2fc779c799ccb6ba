# gymsandbox: the two commands are `make run` and `make test`; everything else is a step they use.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The tooling runs as modules from the repository root: hack/ and bench/ are packages.
CLUSTER := $(PY) -m hack.localcluster

.PHONY: help venv binaries node-prep cluster-up cluster-down lint unit integration node security scale chaos test run crds \
	bench bench-broker bench-nemo-gym \
	image kind-e2e

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

venv: $(STAMP) ## create the virtualenv and install the project with its dev tools

binaries: ## build the pinned control-plane binaries (cached under ~/.cache/gymsandbox)
	hack/build-binaries.sh >/dev/null

node-prep: venv binaries ## build what the real node and its tests use (packages, binaries, images; cached), if it can run here
	$(CLUSTER) node prepare

cluster-up: venv binaries ## start the local control plane and the real node (or reuse them); writes .cluster/kubeconfig
	$(CLUSTER) up

cluster-down: venv ## stop the real node and the control plane, put the host back as it was, remove .cluster/
	$(CLUSTER) down

LINTED := $(wildcard operator tests hack bench examples)

lint: venv ## ruff, mypy (strict) and the import rules between layers (pyproject.toml [tool.importlinter])
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy
	set -o pipefail; $(VENV)/bin/lint-imports --no-cache | sed -n '/^Contracts$$/,$$p'

crds: venv ## regenerate crds/, the chart's copy of them, its values.schema.json, docs/dashboard.json, docs/api.md and docs/troubleshooting.md
	$(VENV)/bin/gymsandbox crds --output-dir crds
	$(VENV)/bin/gymsandbox crds --output-dir charts/gymsandbox-operator/crds
	$(VENV)/bin/gymsandbox chart-schema
	$(VENV)/bin/gymsandbox dashboard
	$(VENV)/bin/gymsandbox docs --output-dir docs

unit: venv ## unit tests only (no cluster)
	$(VENV)/bin/pytest tests/unit

integration: venv binaries node-prep ## integration tests (KUBECONFIG's cluster, else a local one started and stopped)
	$(VENV)/bin/pytest -m integration tests/integration

node: venv binaries node-prep ## node tier: real containers on the real node (GYMSANDBOX_REAL_NODE=0 turns the node off)
	$(VENV)/bin/pytest tests/node

chaos: venv binaries node-prep ## chaos tier: stalls, kills and restarts of the control plane and the operator
	$(VENV)/bin/pytest tests/chaos

security: venv binaries node-prep ## security tier: the threat model's attacks (docs/security.md)
	$(VENV)/bin/pytest tests/security

scale: venv binaries node-prep ## scale tier: a thousand episodes over capped hosts (correctness; speed is make bench's)
	$(VENV)/bin/pytest tests/scale

test: venv binaries node-prep lint ## everything CI runs: lint, unit, integration, node, security, scale and (last) chaos
	$(VENV)/bin/pytest --durations=30 tests/unit tests/integration tests/node tests/security tests/scale tests/chaos

run: venv binaries ## the main job: the operator (and the sample GymHost) on KUBECONFIG's cluster, or a local one
	hack/run.sh

bench: venv binaries ## N episodes (default 200) over HOSTS hosts (1) vs a plain client: latency, writes, RSS
	$(PY) -m bench.episodes -n $(or $(N),200) --hosts $(or $(HOSTS),1)

image: ## build the container image with docker or podman (none here: CI lints the Dockerfile instead)
	hack/image.sh

kind-e2e: venv ## kind cluster + image + chart, then tests/e2e against it (needs docker and kind; not run in CI)
	hack/kind-e2e.sh

bench-broker: venv binaries ## 200 concurrent execs over 20 episodes: broker vs direct pods/exec, as ratios
	$(PY) -m bench.broker

bench-nemo-gym: venv binaries ## in a gVisor GymHost: NeMo Gym provider vs broker client per exec; start to first exec
	$(PY) -m bench.nemo_gym
