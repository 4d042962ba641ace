"""llama.cpp's server (lazymem/llm/llamacpp_server.py): ready only after a first completion, and a runtime
built for another CPU named as the cause when it dies on it. A stand-in Python plays the server."""

from __future__ import annotations

import sys
import textwrap

import pytest

from lazymem.llm.llamacpp_server import LlamaCppServer
from lazymem.llm.managed_server import ServerStartError

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
