"""What the GPU environments ask of a node's driver and nvcc (lazymem/cuda_env.py); the checks through
doctor and gpu-check are in tests/tasks/test_doctor.py and test_gpu_check.py."""

from __future__ import annotations

from lazymem.cuda_env import needs


def test_the_cuda_line_of_a_constraints_file_is_read_with_its_torch_pin(tmp_path):
    (tmp_path / "constraints").mkdir()
    (tmp_path / "constraints" / "gpu-rl.txt").write_text("torch==2.11.0\n# cuda: driver>=580.65 nvcc==13.*\n")
    (tmp_path / "constraints" / "gpu-serve.txt").write_text("torch==2.13.0\n")  # no cuda line: no need
    (need,) = needs(tmp_path)
    assert (need.env, need.torch, need.driver, need.nvcc) == (".venv-gpu-rl", "2.11.0", (580, 65), 13)


def test_the_shipped_rl_environment_needs_driver_580_and_nvcc_13():
    rl = {n.env: n for n in needs()}[".venv-gpu-rl"]
    assert rl.driver == (580,) and rl.nvcc == 13
