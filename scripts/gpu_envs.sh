# Sourced by scripts/setup_gpu_env.sh and scripts/check_gpu_pins.sh: what each GPU environment installs;
# its pins are constraints/gpu-NAME.txt. serve: the vLLM behind the vllm backend; rl: VERL with its own
# vLLM for rollouts (train_grpo), plus lazymem itself (its reward function and curriculum trainer).
declare -A GPU_ENVS=(
  [serve]="vllm==0.32.0"
  [rl]="verl[vllm]==0.9.1"
)
