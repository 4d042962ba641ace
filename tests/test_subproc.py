"""Trainer subprocesses: output streamed to the console and a log, exit status, no orphans on interrupt."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from lazymem.subproc import stream


def test_stream_copies_output_to_console_and_log(tmp_path, capsys):
    code = (
        "import sys; print('one'); sys.stdout.write('50%\\r100%\\n')\n"
        "print('err', file=sys.stderr); sys.exit(3)"
    )
    rc = stream([sys.executable, "-c", code], tmp_path / "child.log")
    assert rc == 3
    out = capsys.readouterr().out.splitlines()
    assert out == ["one", "50%", "100%", "err"]
    log = (tmp_path / "child.log").read_text()
    assert log.startswith(f"$ {sys.executable} -c ") and log.splitlines()[-4:] == out


def test_interrupt_kills_the_child_and_its_children(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    code = (
        "import os, subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}')\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )

    def interrupt(line):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.stdout, "write", interrupt)
    with pytest.raises(KeyboardInterrupt):
        stream([sys.executable, "-c", code], tmp_path / "child.log")
    for pid in map(int, pids.read_text().split()):
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":  # exited, waiting to be reaped
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"process {pid} outlived the interrupted stream")
