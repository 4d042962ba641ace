"""SIGINT / SIGTERM stop a run promptly: servers down, records kept, `resume=true` continues.

Inside :func:`handling` either signal runs every registered stop hook (the model servers register theirs
with :func:`on_signal`, so this module imports no stage) and raises :class:`Interrupted`, a
KeyboardInterrupt, so asyncio and every `except Exception` let it through. The signal is also remembered:
code at the points where a run would go on (a question starting, a record being written, a client about to
retry) calls :func:`check`, so the run stops even if some library swallowed the exception. Should the
process still be alive :data:`GRACE_S` seconds after the signal (a cleanup waiting on a thread that never
ends), a watchdog writes every thread's stack to stderr and exits with the same code: a stop never hangs,
and the stacks say where it would have.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: int | None = None
_hooks: list[Callable[[], None]] = []
# longer than any stop a run waits for (a server's SIGTERM then SIGKILL, a stage's stop_timeout_s)
GRACE_S = 90.0
_watchdog: threading.Thread | None = None


def on_signal(hook: Callable[[], None]) -> None:
    """Run `hook` (once registered, every time) when SIGINT or SIGTERM arrives inside :func:`handling`."""
    if hook not in _hooks:
        _hooks.append(hook)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def check() -> None:
    """Raise :class:`Interrupted` if a signal arrived since :func:`handling` began."""
    if _received is not None:
        raise Interrupted(_received)


def _on_signal(signum: int, frame) -> None:
    """Every hook runs even if one raises (a server that will not stop must not keep the others up); the
    run still ends as interrupted, with the shell's exit code, and the hook's error is logged."""
    global _received
    _received = signum
    _watch(signum)
    for hook in list(_hooks):
        try:
            hook()
        except Exception:  # noqa: BLE001 - logged; the remaining hooks and the interrupt go on
            log.exception("a stop hook failed while handling %s", signal.Signals(signum).name)
    raise Interrupted(signum)


def _watch(signum: int) -> None:
    """Start (once per process) the watchdog that ends a process still alive GRACE_S after the signal."""
    global _watchdog
    if _watchdog is not None:
        return

    def expire() -> None:
        time.sleep(GRACE_S)
        print(
            f"error: still running {GRACE_S:g}s after {signal.Signals(signum).name}; the threads' stacks:",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(128 + signum)

    _watchdog = threading.Thread(target=expire, name="lazymem-interrupt-watchdog", daemon=True)
    _watchdog.start()


@contextmanager
def handling() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the block (main thread only: elsewhere Python
    allows no handlers, and the process that owns the main thread decides)."""
    global _received
    _received = None
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
