# The README's two commands: `make run` (the main job on the embedded default) and `make test`.
# Each creates or updates .venv first (scripts/setup_env.sh; a no-op when nothing changed); the tests also
# need LLaMA-Factory's own environment .venv-sft (scripts/setup_sft_env.sh), for a real SFT run on CPU.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-sft run test test-fast lint

setup:
	@bash scripts/setup_env.sh

setup-sft:
	@bash scripts/setup_sft_env.sh

run: setup
	$(PY) -m lazymem.run +experiment=quickstart $(ARGS)

test: setup setup-sft
	$(PY) -m pytest -q $(ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
