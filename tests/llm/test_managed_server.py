"""Managed servers (lazymem/llm/managed_server.py): health checks, clear start errors, and no server left
behind on any way out.

These use a stand-in server (a few lines of http.server); tests/e2e/test_llama_cpp.py starts real llama.cpp.
"""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest

from lazymem.llm.managed_server import ManagedServer, ServerDied, ServerStartError

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
