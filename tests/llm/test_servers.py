"""Managed servers: health checks, clear start errors, and no server left behind on any way out.

These use a stand-in server (a few lines of http.server); tests/e2e/test_llama_cpp.py starts real llama.cpp.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap

import pytest

from lazymem.llm.servers import (
    Endpoint,
    LlamaCppServer,
    ManagedServer,
    ServerDied,
    ServerStartError,
    VllmServer,
    kv_cache_report,
    visible_devices,
    vllm_distribution,
)

from helpers import ROOT
from helpers_llm import alive, group_members, spawn_parent, wait_until

FAKE = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    mode, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "crash":
        print("boom: cannot load model", flush=True)
        sys.exit(3)
    if mode == "mute":
        time.sleep(600)
    if mode == "child":  # a worker process, like vLLM's engine cores
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("CHILDPID", kid.pid, flush=True)

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": name}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


@pytest.fixture
def fake_cmd(tmp_path):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE)
    return lambda mode="ok": [sys.executable, str(script), mode, "{port}", "fake"]


def test_start_health_and_stop_kills_the_whole_group(fake_cmd, tmp_path):
    with ManagedServer(fake_cmd("child"), "fake", tmp_path / "logs") as s:
        assert s.healthy() and s.base_url.endswith(f":{s.port}/v1")
        pid = s.pid
        assert wait_until(lambda: "CHILDPID" in s.log_path.read_text())
        kid = int(s.log_path.read_text().split("CHILDPID")[1].split()[0])
        assert sorted(group_members(pid)) == sorted([pid, kid])
        assert s.log_path.read_text().startswith("$ ")  # the command line heads the log
    assert wait_until(lambda: not group_members(pid), 5)
    assert not alive(kid)


def test_exception_inside_the_block_still_stops(fake_cmd, tmp_path):
    with pytest.raises(RuntimeError, match="inside"), ManagedServer(fake_cmd(), "fake", tmp_path) as s:
        pid = s.pid
        raise RuntimeError("inside")
    assert wait_until(lambda: not alive(pid), 5)


def test_a_dead_server_is_restarted_once_then_reported_with_its_log(fake_cmd, tmp_path):
    with ManagedServer(fake_cmd(), "fake", tmp_path) as s:
        s.revive()  # alive: nothing to do
        first = s.pid
        s.proc.kill()
        s.proc.wait()
        s.revive()
        assert s.restarts == 1 and s.pid != first and s.healthy()
        port = s.port
        s.proc.kill()
        s.proc.wait()
        died = rf"died \(exit code -9\) after 1 restart\(s\); log {s.log_path}"
        with pytest.raises(ServerDied, match=died):
            s.revive()
        assert s.pid is None and s.port == port
        with pytest.raises(ServerDied):  # and stays dead for every later caller
            s.revive()


def test_a_server_stopped_on_purpose_stays_down(fake_cmd, tmp_path):
    s = ManagedServer(fake_cmd(), "fake", tmp_path).start()
    s.stop()
    s.revive()
    assert s.pid is None and s.restarts == 0


def test_crash_at_start_reports_exit_code_and_log_tail(fake_cmd, tmp_path):
    with pytest.raises(ServerStartError, match=r"exited with code 3[\s\S]*boom: cannot load model"):
        ManagedServer(fake_cmd("crash"), "fake", tmp_path).start()


def test_never_healthy_times_out_and_is_killed(fake_cmd, tmp_path):
    s = ManagedServer(fake_cmd("mute"), "fake", tmp_path, startup_timeout_s=1.5)
    with pytest.raises(ServerStartError, match="not healthy after 1.5s"):
        s.start()
    assert s.proc is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_parent_stops_the_server(fake_cmd, tmp_path, sig):
    parent, server_pid = spawn_parent(tmp_path, fake_cmd(), "fake", "sleep")
    assert alive(server_pid)
    parent.send_signal(sig)
    assert parent.wait(20) != 0
    assert wait_until(lambda: not alive(server_pid), 5)


def test_normal_exit_without_stop_is_handled_by_atexit(fake_cmd, tmp_path):
    parent, server_pid = spawn_parent(tmp_path, fake_cmd(), "fake", "exit")
    assert parent.wait(20) == 0
    assert wait_until(lambda: not alive(server_pid), 5)


def test_sigkilled_parent_leaves_no_orphan(fake_cmd, tmp_path):
    parent, server_pid = spawn_parent(tmp_path, fake_cmd(), "fake", "sleep")
    parent.kill()
    parent.wait(10)
    assert wait_until(lambda: not alive(server_pid), 5)


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


def test_endpoint_has_no_process():
    with Endpoint("https://api.example.com/v1/", "judge") as e:
        assert e.base_url == "https://api.example.com/v1" and e.served_name == "judge"


FAKE_LLAMA = textwrap.dedent(
    """\
    #!{python}
    # Stands in for `python` in LlamaCppServer's command: serves /v1/models, then dies of SIGSEGV on the
    # first completion, as a llama.cpp build with instructions this CPU lacks does.
    import json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    if sys.argv[1] == "-c":  # llama_build_info
        print("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 |")
        sys.exit(0)
    args = dict(zip(sys.argv[3::2], sys.argv[4::2]))

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({{"data": [{{"id": args["--model_alias"]}}]}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            os.kill(os.getpid(), signal.SIGSEGV)

    HTTPServer(("127.0.0.1", int(args["--port"])), H).serve_forever()
    """
)


def test_a_runtime_that_dies_on_its_first_completion_is_not_ready_and_says_why(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_LLAMA.format(python=sys.executable))
    fake.chmod(0o755)
    server = LlamaCppServer(tmp_path / "m.gguf", "smol", tmp_path / "logs", python=str(fake))
    with pytest.raises(ServerStartError) as err:
        server.start()
    message = str(err.value)
    assert "died (exit code -11, SIGSEGV) on its first completion" in message
    assert "this llama.cpp build does not run on this CPU" in message
    assert "its build: CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 |" in message
    assert "LLAMA_CPU=avx2 make setup" in message
    assert server.proc is None  # nothing left running


# What a vLLM server's log says of its KV cache, read into the run's records (lazymem.llm.servers:
# kv_cache_report, VllmServer.start), the GPUs a server gets under a scheduler's CUDA_VISIBLE_DEVICES, and the
# probe that tells vLLM's CUDA build from its CPU build.
#
# The logs (tests/fixtures/vllm/): one vllm-cpu 0.32.0 wrote on this machine serving a tiny Qwen3, and one
# written in vLLM 0.32's CUDA format (the worker's and the engine's lines, as its source words them) for
# Qwen3-32B over two GPUs: the parsed log a GPU run would give, since no CUDA run can happen here.
LOGS = ROOT / "tests" / "fixtures" / "vllm"
CUDA_LOG = LOGS / "vllm-cuda-0.32-tp2.log"
CPU_LOG = LOGS / "vllm-cpu-0.32.0.log"


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


def test_the_probe_tells_vllms_cpu_build_from_its_cuda_build(tmp_path):
    vllm_py = ROOT / ".venv-vllm" / "bin" / "python"
    if not vllm_py.exists():
        pytest.skip("needs .venv-vllm (make setup-vllm)")
    assert vllm_distribution(str(vllm_py)) == ("vllm-cpu", "0.32.0")
    assert vllm_distribution(sys.executable) is None  # lazymem's own environment has no vLLM
    # the CUDA build's distribution, as pip installs it
    site = tmp_path / "site"
    (site / "vllm-0.32.0.dist-info").mkdir(parents=True)
    metadata = "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n"
    (site / "vllm-0.32.0.dist-info" / "METADATA").write_text(metadata)
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    assert vllm_distribution(str(fake)) == ("vllm", "0.32.0")
