"""lazymem.interrupt: inside handling() SIGINT/SIGTERM run every registered stop hook and raise Interrupted
(a KeyboardInterrupt with the shell's exit code), check() keeps raising after it, and the previous
handlers come back after the block; in-process with raise_signal, and in a child process with os.kill."""

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from lazymem import interrupt

from helpers import ROOT


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Hooks and the remembered signal are module state: each test starts clean and leaves nothing behind.
    Signals raised in-process need the handler, which only the main thread can install (xdist workers run
    tests there); elsewhere a raised SIGTERM would end the test process itself."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("in-process signal tests need the main thread")
    monkeypatch.setattr(interrupt, "_hooks", [])
    monkeypatch.setattr(interrupt, "_received", None)
    monkeypatch.setattr(interrupt, "_watch", lambda signum: None)  # its os._exit would end pytest itself


@pytest.mark.parametrize(
    ("sig", "name", "code"), [(signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)]
)
def test_a_signal_inside_handling_runs_the_hooks_and_raises_interrupted(sig, name, code):
    calls = []
    interrupt.on_signal(lambda: calls.append("servers down"))
    interrupt.on_signal(lambda: calls.append("flushed"))
    with pytest.raises(interrupt.Interrupted) as err, interrupt.handling():
        signal.raise_signal(sig)
        calls.append("not reached")
    assert calls == ["servers down", "flushed"]  # in registration order, before the exception
    assert err.value.signum == sig and err.value.name == name and err.value.exit_code == code


def test_a_hook_that_raises_neither_skips_the_others_nor_loses_the_interrupt(caplog):
    calls = []

    def broken():
        raise RuntimeError("server would not stop")

    interrupt.on_signal(broken)
    interrupt.on_signal(lambda: calls.append("flushed"))
    with pytest.raises(interrupt.Interrupted) as err, interrupt.handling():
        signal.raise_signal(signal.SIGTERM)
    assert calls == ["flushed"] and err.value.exit_code == 143
    assert "a stop hook failed while handling SIGTERM" in caplog.text


def test_a_hook_registered_twice_runs_once_per_signal():
    calls = []

    def hook():
        calls.append(1)

    interrupt.on_signal(hook)
    interrupt.on_signal(hook)
    for _ in range(2):  # every signal runs it again
        with pytest.raises(interrupt.Interrupted), interrupt.handling():
            signal.raise_signal(signal.SIGTERM)
    assert calls == [1, 1]


def test_interrupted_passes_through_except_exception():
    assert issubclass(interrupt.Interrupted, KeyboardInterrupt)
    assert not issubclass(interrupt.Interrupted, Exception)
    swallowed = False
    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        try:
            signal.raise_signal(signal.SIGTERM)
        except Exception:
            swallowed = True
    assert not swallowed


def test_check_raises_after_a_signal_until_the_next_handling_block():
    interrupt.check()  # nothing received: no-op
    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        signal.raise_signal(signal.SIGINT)
    # a library that swallowed the exception does not keep the run going: the next check stops it
    with pytest.raises(interrupt.Interrupted) as err:
        interrupt.check()
    assert err.value.signum == signal.SIGINT
    with interrupt.handling():
        interrupt.check()  # a new block starts with no signal remembered


def test_handling_installs_its_handler_and_restores_the_previous_ones():
    before = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    with interrupt.handling():
        assert all(signal.getsignal(s) is interrupt._on_signal for s in interrupt.SIGNALS)
    assert {s: signal.getsignal(s) for s in interrupt.SIGNALS} == before
    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        signal.raise_signal(signal.SIGTERM)
    assert {s: signal.getsignal(s) for s in interrupt.SIGNALS} == before  # also after a signal


def test_handling_outside_the_main_thread_installs_nothing():
    seen, errors = [], []

    def worker():
        try:
            with interrupt.handling():
                seen.extend(signal.getsignal(s) for s in interrupt.SIGNALS)
        except Exception as e:  # signal.signal() outside the main thread would raise ValueError
            errors.append(e)

    before = [signal.getsignal(s) for s in interrupt.SIGNALS]
    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert errors == [] and seen == before


CHILD = textwrap.dedent(
    """
    import sys, time
    from lazymem import interrupt

    interrupt.on_signal(lambda: print("hook: servers down", flush=True))
    try:
        with interrupt.handling():
            print("ready", flush=True)
            time.sleep(30)
    except interrupt.Interrupted as e:
        print("interrupted by", e.name, flush=True)
        try:
            interrupt.check()
        except interrupt.Interrupted:
            print("check raises", flush=True)
        sys.exit(e.exit_code)
    print("slept to the end", flush=True)
    """
)


@pytest.mark.skipif(os.name != "posix", reason="os.kill with SIGINT/SIGTERM")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_process_killed_inside_handling_runs_its_hooks_and_exits_with_128_plus_the_signal(sig):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        os.kill(child.pid, sig)
        out, err = child.communicate(timeout=15)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out.splitlines() == ["hook: servers down", f"interrupted by {sig.name}", "check raises"], err
    assert child.returncode == 128 + sig


HANGS = textwrap.dedent(
    """
    import threading
    from lazymem import interrupt

    interrupt.GRACE_S = 1.0
    try:
        with interrupt.handling():
            print("ready", flush=True)
            threading.Event().wait(30)
    except interrupt.Interrupted:
        print("cleaning up", flush=True)
        threading.Event().wait(30)  # a cleanup that never ends
    """
)


@pytest.mark.skipif(os.name != "posix", reason="os.kill with SIGTERM")
def test_a_process_that_hangs_after_the_signal_prints_its_stacks_and_exits_with_128_plus_the_signal():
    child = subprocess.Popen(
        [sys.executable, "-c", HANGS], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        os.kill(child.pid, signal.SIGTERM)
        out, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out == "cleaning up\n" and child.returncode == 143, err
    assert "still running 1s after SIGTERM" in err and 'File "<string>", line 12' in err, err
