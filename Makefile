# The README's two commands: `make run` (the main job on the embedded default) and `make test`.
# Each creates or updates .venv first (scripts/setup_env.sh; a no-op when nothing changed).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup run test test-fast lint bench

setup:
	@bash scripts/setup_env.sh

run: setup
	$(PY) -m lazymem.run +experiment=quickstart $(ARGS)

test: setup
	$(PY) -m pytest -q $(ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
