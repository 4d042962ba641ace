"""The two-phase reward curriculum: flips once at tau, never back, and survives a restart."""

from __future__ import annotations

import json
import logging

import pytest

from lazymem.train.grpo.curriculum import ENV_STATE, Curriculum, read_state, state_path


def test_starts_in_phase1_and_writes_its_state(tmp_path):
    path = tmp_path / "run" / "curriculum.json"
    cur = Curriculum(path)
    assert (cur.phase, cur.lam) == (1, 0.0)
    saved = json.loads(path.read_text())
    assert saved["phase"] == 1 and saved["lam"] == 0.0 and saved["tau"] == 0.99


def test_flips_exactly_at_the_threshold(tmp_path, caplog):
    cur = Curriculum(tmp_path / "c.json", tau=0.99, lam_phase1=0.0, lam_phase2=0.5)
    assert cur.observe_validation(0.5, step=0) == 1
    assert cur.observe_validation(0.9899, step=10) == 1 and cur.lam == 0.0
    with caplog.at_level(logging.INFO, logger="lazymem.train.grpo.curriculum"):
        assert cur.observe_validation(99 / 100, step=20) == 2  # equal to tau flips (>=)
    assert (cur.lam, cur.flipped_at_step) == (0.5, 20)
    assert "phase 1 -> 2 at step 20" in caplog.text
    assert read_state(tmp_path / "c.json")["phase"] == 2


def test_rate_equal_to_tau_up_to_float_noise_flips(tmp_path):
    cur = Curriculum(tmp_path / "c.json", tau=0.99)
    assert cur.observe_validation(0.99 - 1e-12, step=1) == 2


def test_never_flips_back(tmp_path):
    cur = Curriculum(tmp_path / "c.json")
    cur.observe_validation(1.0, step=5)
    for step, rate in ((10, 0.2), (20, 0.0), (30, 0.98)):
        assert cur.observe_validation(rate, step) == 2 and cur.lam == 0.5
    assert cur.flipped_at_step == 5 and cur.last == {"step": 30, "format_rate": 0.98}


def test_survives_a_restart(tmp_path):
    path = tmp_path / "c.json"
    Curriculum(path).observe_validation(0.995, step=40)
    resumed = Curriculum(path)  # a new process after a crash: same state file
    assert (resumed.phase, resumed.lam, resumed.flipped_at_step) == (2, 0.5, 40)
    assert resumed.observe_validation(0.1, step=50) == 2


def test_restart_before_the_flip_stays_in_phase1(tmp_path):
    path = tmp_path / "c.json"
    Curriculum(path).observe_validation(0.7, step=10)
    resumed = Curriculum(path)
    assert resumed.phase == 1 and resumed.last == {"step": 10, "format_rate": 0.7}


def test_read_state_sees_every_change(tmp_path):
    path = tmp_path / "c.json"
    assert read_state(path) is None
    cur = Curriculum(path)
    assert read_state(path)["lam"] == 0.0
    cur.observe_validation(0.99, step=1)
    assert read_state(path)["lam"] == 0.5


def test_bad_inputs_are_refused(tmp_path):
    cur = Curriculum(tmp_path / "c.json")
    for rate in (float("nan"), 1.5, -0.1):
        with pytest.raises(ValueError):
            cur.observe_validation(rate, step=1)
    with pytest.raises(ValueError):
        Curriculum(None, tau=0.0)
    with pytest.raises(ValueError):
        Curriculum(None, lam_phase2=1.5)
    (tmp_path / "bad.json").write_text(json.dumps({"phase": 3, "lam": 0.5}))
    with pytest.raises(ValueError, match="phase"):
        Curriculum(tmp_path / "bad.json")


def test_without_a_file_it_runs_in_memory():
    cur = Curriculum(None)
    assert cur.observe_validation(0.995, step=3) == 2 and cur.lam == 0.5


def test_state_path_from_env(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_STATE, raising=False)
    assert state_path(None) is None
    monkeypatch.setenv(ENV_STATE, str(tmp_path / "env.json"))
    assert state_path(None) == tmp_path / "env.json"
    assert state_path(tmp_path / "explicit.json") == tmp_path / "explicit.json"
