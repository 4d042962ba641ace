# Sourced by scripts/setup_gpu_env.sh and scripts/check_gpu_pins.sh: what each GPU environment installs;
# its pins are constraints/gpu-NAME.txt. serve: the vLLM behind the vllm backend; rl: VERL with its own
# vLLM for rollouts (train_grpo), plus lazymem itself (its reward function and curriculum trainer).
declare -A GPU_ENVS=(
  [serve]="vllm==0.32.0"
  [rl]="verl[vllm]==0.9.1"
)
# Built from source after the rest, against the torch just installed (pip install --no-build-isolation: the
# sdist's setup.py imports torch and compiles with CUDA's nvcc; PyPI has no flash-attn wheel). VERL 0.9.1
# loads its actor and reference with attn_implementation flash_attention_2 (verl/workers/config/model.py:185)
# and verl[vllm] brings no flash-attn: this is the version of verl's own flash-attn-cu130torch211 extra,
# taken alone (verl's fsdp extra, which also brings it, pins trl 0.27 as well).
declare -A GPU_BUILDS=(
  [rl]="flash-attn==2.8.3"
)
# what those builds import before pip can build them (flash-attn's setup.py: packaging, wheel, torch)
GPU_BUILD_TOOLS="ninja packaging wheel setuptools"
