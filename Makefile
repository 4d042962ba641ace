# The README's two commands: `make run` (the main job on the embedded default) and `make test`.
# Each creates or updates .venv first (scripts/setup_env.sh; a no-op when nothing changed); the tests also
# need LLaMA-Factory's own environment .venv-sft (scripts/setup_sft_env.sh), for a real SFT run on CPU, and
# vLLM's .venv-vllm (scripts/setup_vllm_env.sh), for paper mode's serving path on CPU.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-sft setup-vllm run test test-fast lint doctor

setup:
	@bash scripts/setup_env.sh

setup-sft:
	@bash scripts/setup_sft_env.sh

# vLLM's own environment (its CPU build here): the server behind the vllm backend
setup-vllm:
	@bash scripts/setup_vllm_env.sh

run: setup
	$(PY) -m lazymem.run +experiment=quickstart $(ARGS)

# Two tiers: the unit tests on two workers (pytest-xdist; 2.0 instead of 3.5 minutes on 2 cores), then the
# end-to-end tests one at a time (a model server uses both cores). JUNIT=DIR writes DIR/{unit,e2e}.xml.
test: setup setup-sft setup-vllm
	$(PY) -m pytest -q -m "not slow" -n 2 $(ARGS) $(if $(JUNIT),--junitxml=$(JUNIT)/unit.xml)
	$(PY) -m pytest -q -m slow $(ARGS) $(if $(JUNIT),--junitxml=$(JUNIT)/e2e.xml)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" -n 2 $(ARGS)

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

# What this machine can run, with fixes; works without a working .venv (scripts/doctor.sh)
doctor:
	@bash scripts/doctor.sh $(ARGS)
