# The README's two commands: `make run` (the main job on the embedded default) and `make test`.
# Each creates or updates .venv first (scripts/setup_env.sh; a no-op when nothing changed); the tests also
# need LLaMA-Factory's own environment .venv-sft (scripts/setup_sft_env.sh), for a real SFT run on CPU, and
# vLLM's .venv-vllm (scripts/setup_vllm_env.sh), for paper mode's serving path on CPU.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup setup-sft setup-vllm run chain-mini rehearsal test test-fast lint docs doctor

setup:
	@bash scripts/setup_env.sh

setup-sft:
	@bash scripts/setup_sft_env.sh

# vLLM's own environment (its CPU build here): the server behind the vllm backend
setup-vllm:
	@bash scripts/setup_vllm_env.sh

run: setup
	$(PY) -m lazymem.run +experiment=quickstart $(ARGS)

# The training chain on SmolLM2-135M on this CPU, split to Table 3 (mini) (docs/training.md, "chain_mini";
# LongMemEval-oracle train/val from ../shared/data, or LAZYMEM_ORACLE_TRAIN and LAZYMEM_ORACLE_VAL)
chain-mini: setup setup-sft
	$(PY) -m lazymem.run +experiment=chain_mini $(ARGS)

# Paper mode rehearsed on this CPU through real vLLM (+experiment=rehearsal_cpu, docs/rehearsal.md): tiny
# random models written once under the model cache, then main_table's paper mode on them (a few minutes)
TINY := $(or $(LAZYMEM_MODEL_CACHE),$(or $(LAZYMEM_CACHE),.cache)/models)/tiny

$(TINY)/qwen3/config.json: | setup
	$(PY) scripts/tiny_qwen3.py $(TINY)/qwen3 --hidden 256 --vocab 600

$(TINY)/embedding/config.json: | setup
	$(PY) scripts/tiny_qwen3.py $(TINY)/embedding --hidden 256 --vocab 600 --embedding

$(TINY)/reranker/config.json: | setup
	$(PY) scripts/tiny_reranker.py $(TINY)/reranker

rehearsal: setup setup-vllm $(TINY)/qwen3/config.json $(TINY)/embedding/config.json $(TINY)/reranker/config.json
	$(PY) -m lazymem.run +experiment=rehearsal_cpu $(ARGS)

# Two runs: every test that keeps to one core (the unit tier and the slow tests without a model server) on
# two pytest-xdist workers, a file per worker; then the `solo` ones (a model server or a training run uses
# both cores) one at a time. JUNIT=DIR writes DIR/{shared,solo}.xml.
test: setup setup-sft setup-vllm
	$(PY) -m pytest -q -m "not solo" -n 2 --dist loadfile $(ARGS) $(if $(JUNIT),--junitxml=$(JUNIT)/shared.xml)
	$(PY) -m pytest -q -m solo $(ARGS) $(if $(JUNIT),--junitxml=$(JUNIT)/solo.xml)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" -n 2 $(ARGS)

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

# The documentation site (mkdocs.yml, docs/) into site/, from its own small environment .venv-docs
# (scripts/setup_docs_env.sh); --strict fails on any warning (broken links and
# anchors, pages missing from the nav, docstrings the API reference cannot read)
docs:
	@bash scripts/setup_docs_env.sh
	.venv-docs/bin/mkdocs build --strict -d site

# What this machine can run, with fixes; works without a working .venv (scripts/doctor.sh)
doctor:
	@bash scripts/doctor.sh $(ARGS)

# A researcher's first minutes on a GPU node (docs/gpu-placement.md): the environments, one judge call, each
# vLLM server's KV cache and two questions through every role of main_table, within about 15 minutes;
# gpu_check.json and a table with a fix per failure. ARGS: the data path, another plan (placement=gpu4)
.PHONY: gpu-check
gpu-check: setup
	$(PY) -m lazymem.run +experiment=gpu_check $(ARGS)
