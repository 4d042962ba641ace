"""The two-phase reward curriculum (paper Section 3.3, "Reward curriculum"; Table 15).

Phase 1 trains with lambda = 0 (format gate + action reward only, no judge calls). When a validation
round's format-valid rate reaches tau (>= tau), training moves to phase 2 (lambda = 0.5) for the rest of
the run and never moves back. The phase lives in a small JSON state file so that a resumed run keeps
it, and so that reward workers in other processes can read the current lambda (:func:`read_state`).

Whoever sees validation results (a trainer hook, or an actor collecting validation scores) calls
:meth:`Curriculum.observe_validation`; the reward function only reads the file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV_STATE = "LAZYMEM_CURRICULUM_STATE"  # env var naming the state file when no path is passed
PHASES = (1, 2)


def state_path(explicit: str | os.PathLike | None = None) -> Path | None:
    """The state file: ``explicit`` if given, else ``$LAZYMEM_CURRICULUM_STATE``, else None."""
    value = explicit if explicit else os.environ.get(ENV_STATE)
    return Path(value) if value else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic replace: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


class Curriculum:
    """Phase state machine: 1 -> 2 once, at the first validation with format rate >= tau.

    ``eps`` absorbs float noise in a rate computed as a mean (99/100 may come out as 0.98999...), so a
    rate equal to tau flips; it is far below the 1/N step of any real validation set.
    """

    def __init__(
        self,
        state_path: str | os.PathLike | None,
        tau: float = 0.99,
        lam_phase1: float = 0.0,
        lam_phase2: float = 0.5,
        eps: float = 1e-9,
    ):
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        for name, lam in (("lam_phase1", lam_phase1), ("lam_phase2", lam_phase2)):
            if not 0.0 <= lam <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {lam}")
        self.path = Path(state_path) if state_path else None
        self.tau, self.lam_phase1, self.lam_phase2, self.eps = tau, lam_phase1, lam_phase2, eps
        self._phase = 1
        self.flipped_at_step: int | None = None
        self.last: dict[str, Any] | None = None  # the latest observation: {step, format_rate}
        if self.path is not None and self.path.exists():
            self._load()
        self._save()  # the reward reads lambda from the file, so it exists from the start

    @property
    def phase(self) -> int:
        return self._phase

    @property
    def lam(self) -> float:
        return self.lam_phase2 if self._phase == 2 else self.lam_phase1

    def observe_validation(self, format_rate: float, step: int) -> int:
        """Record one validation round's format-valid rate; returns the phase that now applies."""
        if not (isinstance(format_rate, (int, float)) and math.isfinite(format_rate)):
            raise ValueError(f"format_rate must be a finite number, got {format_rate!r}")
        if not 0.0 <= format_rate <= 1.0:
            raise ValueError(f"format_rate must be in [0, 1], got {format_rate}")
        self.last = {"step": int(step), "format_rate": float(format_rate)}
        if self._phase == 1 and format_rate >= self.tau - self.eps:
            self._phase, self.flipped_at_step = 2, int(step)
            log.info(
                "curriculum: phase 1 -> 2 at step %d (format rate %.4f >= tau %.4f); lambda %.3f -> %.3f",
                step,
                format_rate,
                self.tau,
                self.lam_phase1,
                self.lam_phase2,
            )
        else:
            log.info(
                "curriculum: step %d format rate %.4f (tau %.4f), phase %d, lambda %.3f",
                step,
                format_rate,
                self.tau,
                self._phase,
                self.lam,
            )
        self._save()
        return self._phase

    def state(self) -> dict[str, Any]:
        return {
            "phase": self._phase,
            "lam": self.lam,
            "tau": self.tau,
            "lam_phase1": self.lam_phase1,
            "lam_phase2": self.lam_phase2,
            "flipped_at_step": self.flipped_at_step,
            "last": self.last,
        }

    def _load(self) -> None:
        data = json.loads(self.path.read_text())
        phase = data.get("phase")
        if phase not in PHASES:
            raise ValueError(f"curriculum state {self.path}: phase {phase!r} not in {PHASES}")
        self._phase = phase
        self.flipped_at_step = data.get("flipped_at_step")
        self.last = data.get("last")
        stored = {k: data.get(k) for k in ("tau", "lam_phase1", "lam_phase2")}
        current = {"tau": self.tau, "lam_phase1": self.lam_phase1, "lam_phase2": self.lam_phase2}
        if stored != current:
            log.warning("curriculum state %s was written with %s; now using %s", self.path, stored, current)
        log.info("curriculum: resumed in phase %d (lambda %.3f) from %s", self._phase, self.lam, self.path)

    def _save(self) -> None:
        if self.path is not None:
            _write_json(self.path, self.state())


_READ_CACHE: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}
_READ_LOCK = threading.Lock()


def read_state(path: str | os.PathLike) -> dict[str, Any] | None:
    """The state file's content (None when absent), re-read only when its mtime or size changed."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # each save is a new inode (os.replace)
    with _READ_LOCK:
        hit = _READ_CACHE.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    data = json.loads(path.read_text())
    if data.get("phase") not in PHASES or not isinstance(data.get("lam"), (int, float)):
        raise ValueError(f"curriculum state {path} lacks a valid phase/lam: {data!r:.200}")
    with _READ_LOCK:
        _READ_CACHE[path] = (stamp, data)
    return data
