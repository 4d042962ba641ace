"""The curriculum trainer (lazymem/train/grpo/verl/trainer.py): format rate out of VERL's validation metrics,
the phase flip at tau from `_validate`, a restart keeping phase 2, the judge's error rate per step and its
bound at validation, and registration where VERL looks it up."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from lazymem.report.curves import batch_rewards
from lazymem.train.grpo.checkpoints import TRAIN_LOG, read_validations
from lazymem.train.grpo.curriculum import ENV_STATE, read_state
from lazymem.train.grpo.diagnostics import load_jsonl
from lazymem.train.grpo.reward import RewardOptions
from lazymem.train.grpo.reward_metrics import JudgeErrorRateExceeded
from lazymem.train.grpo.verl.trainer import (
    BASE_MODE,
    TRAINER_NAME,
    CurriculumValidation,
    curriculum_from_config,
    format_rate,
    setup_worker,
    trainer_class,
)

from helpers import ROOT
from helpers_train import compose_verl, grpo_cfg, reward_cfg, rollout


def val_metrics(rate: float, n: int = 4, source: str = "lazymem") -> dict[str, float]:
    """Keys as VERL's _val_metrics_update writes them for one data source with n rollouts per prompt."""
    return {
        f"val-core/{source}/reward/mean@{n}": 0.4,
        f"val-aux/{source}/format_ok/mean@{n}": rate,
        f"val-aux/{source}/format_ok/std@{n}": 0.1,
        f"val-aux/{source}/format_ok/best@{n}/mean": 1.0,
        f"val-aux/{source}/format_ok/worst@{n}/mean": 0.0,
        f"val-aux/{source}/a_gold/mean@{n}": 0.2,
    }


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (val_metrics(0.75), 0.75),
        (val_metrics(0.5, n=1), 0.5),
        ({"val-core/lazymem/format_ok/mean@8": 0.25}, 0.25),
        # a prompt that lost rollouts adds a smaller N: the full-N key counts
        ({**val_metrics(0.9, n=4), "val-aux/lazymem/format_ok/mean@3": 0.1}, 0.9),
        # several sources, one with a slash in its name: the plain mean over sources
        ({**val_metrics(0.6), **val_metrics(1.0, n=2, source="openai/gsm8k")}, 0.8),
        ({**val_metrics(0.7), "val-aux/other/format_ok/mean@2": float("nan")}, 0.7),
        ({**val_metrics(0.7), "val-aux/other/format_ok/mean@2": np.float64(0.3)}, 0.5),
    ],
)
def test_format_rate_from_validation_keys(metrics, expected):
    assert format_rate(metrics) == pytest.approx(expected)


@pytest.mark.parametrize(
    "metrics",
    [
        {},
        {"val-core/lazymem/reward/mean@4": 0.9, "val-aux/lazymem/a_gold/mean@4": 1.0},
        {"val-aux/lazymem/format_ok/std@4": 0.1, "val-aux/lazymem/format_ok/best@4/mean": 1.0},
        {"val-aux/lazymem/not_format_ok/mean@4": 1.0, "train/format_ok/mean@4": 1.0},
        {"val-aux/lazymem/format_ok/mean@4": "n/a"},
    ],
)
def test_format_rate_absent(metrics):
    assert format_rate(metrics) is None


@pytest.mark.slow
def test_format_rate_reads_verls_own_validation_metrics():
    pytest.importorskip("verl")
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    flags = [1.0, 0.0, 1.0, 1.0, 1.0, 1.0]  # 3 prompts x 2 rollouts
    metrics = PPOTrainer._val_metrics_update(
        None,  # unused by the method
        ["lazymem"] * 6,
        ["p1", "p1", "p2", "p2", "p3", "p3"],
        {"reward": [0.5] * 6, "format_ok": flags, "gate_error": ["x", None, None, None, None, None]},
        [],
    )
    assert metrics["val-aux/lazymem/format_ok/mean@2"] == pytest.approx(5 / 6)
    assert format_rate(metrics) == pytest.approx(5 / 6)


def config_for(path, **kwargs) -> OmegaConf:
    kw = {"curriculum_state": str(path), "tau": 0.99, "lam_phase1": 0.0, "lam_phase2": 0.5, **kwargs}
    return OmegaConf.create(
        {
            "trainer": {"v1": {"trainer_mode": TRAINER_NAME}, "default_local_dir": str(Path(path).parent)},
            "reward": {"custom_reward_function": {"reward_kwargs": {"eta": 0.915, **kw}}},
        }
    )


def test_curriculum_from_reward_kwargs(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_STATE, raising=False)
    cur = curriculum_from_config(config_for(tmp_path / "s.json", tau=0.9, lam_phase2=0.25))
    assert (cur.path, cur.tau, cur.lam_phase1, cur.lam_phase2) == (tmp_path / "s.json", 0.9, 0.0, 0.25)
    assert read_state(tmp_path / "s.json")["phase"] == 1  # written at once: the reward can read it
    plain = {
        "reward": {"custom_reward_function": {"reward_kwargs": {"curriculum_state": str(tmp_path / "p")}}}
    }
    assert curriculum_from_config(plain).tau == 0.99  # absent settings: Curriculum's defaults
    monkeypatch.setenv(ENV_STATE, str(tmp_path / "env.json"))
    assert curriculum_from_config({"reward": {}}).path == tmp_path / "env.json"  # the reward's fallback too
    monkeypatch.delenv(ENV_STATE)
    with pytest.raises(ValueError, match="state file"):
        curriculum_from_config({"reward": {"custom_reward_function": {"reward_kwargs": {"eta": 0.9}}}})


@pytest.fixture(params=["stand-in", pytest.param("verl", marks=pytest.mark.slow)])
def trainer(request, monkeypatch):
    """The trainer class, its root base's __init__/_validate replaced: `parent.metrics` is what the parent
    _validate returns, `parent.init_modes` the trainer_mode each parent __init__ saw."""
    if request.param == "verl":
        pytest.importorskip("verl")
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        cls, root = trainer_class(), PPOTrainer
    else:

        class Root:  # stands in for PPOTrainer
            def __init__(self, config):
                raise AssertionError("replaced below")

            def _validate(self):
                raise AssertionError("replaced below")

            def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
                raise AssertionError("replaced below")

            def _update_actor(self, batch, metrics):
                raise AssertionError("replaced below")

        cls, root = type("StandIn", (CurriculumValidation, Root), {}), Root
    parent = SimpleNamespace(metrics={}, init_modes=[], updated=[])

    def init(self, config):
        parent.init_modes.append(config.trainer.v1.trainer_mode)
        self.config = config

    def compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        metrics["critic/score/mean"] = 0.5  # one of VERL's own step metrics

    monkeypatch.setattr(root, "__init__", init)
    monkeypatch.setattr(root, "_validate", lambda self: dict(parent.metrics))
    monkeypatch.setattr(root, "_compute_metrics", compute_metrics)
    monkeypatch.setattr(
        root, "_update_actor", lambda self, batch, metrics: parent.updated.append(batch) or batch
    )
    return SimpleNamespace(cls=cls, parent=parent)


def bare(cls, config, step: int):
    """An instance without __init__, as far as _validate needs one."""
    t = object.__new__(cls)
    t.config, t.global_steps = config, step
    return t


def test_validate_flips_at_tau_and_logs_the_phase(trainer, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_STATE, raising=False)
    path = tmp_path / "state.json"
    t = bare(trainer.cls, config_for(path), step=0)
    rate_at_tau = float(np.mean([1.0] * 99 + [0.0]))  # 99 of 100 valid, as VERL averages it
    for step, rate, phase in ((0, 0.5, 1), (10, 0.98, 1), (20, rate_at_tau, 2), (30, 0.3, 2)):
        t.global_steps = step
        trainer.parent.metrics = val_metrics(rate)
        out = t._validate()
        assert {k: out[k] for k in trainer.parent.metrics} == trainer.parent.metrics  # VERL's kept
        assert out["curriculum/format_rate"] == pytest.approx(rate)
        assert (out["curriculum/phase"], out["curriculum/lambda"]) == (phase, 0.5 if phase == 2 else 0.0)
    state = read_state(path)
    assert (state["phase"], state["flipped_at_step"], state["last"]["step"]) == (2, 20, 30)
    # the reward reads lambda from the same file
    assert RewardOptions.from_kwargs({"curriculum_state": str(path)}).lam_phase() == (0.5, 2)


def test_each_validation_round_is_logged_with_the_lambda_it_was_scored_under(trainer, tmp_path):
    t = bare(trainer.cls, config_for(tmp_path / "state.json"), step=0)
    for step, rate in ((10, 0.5), (20, 1.0), (30, 1.0)):
        t.global_steps = step
        trainer.parent.metrics = val_metrics(rate)
        t._validate()
    rounds = read_validations(tmp_path)
    assert sorted(rounds) == [10, 20, 30]
    # step 20 flipped the phase, but its own round was scored with phase 1's lambda
    assert [(rounds[s]["lam"], rounds[s]["phase"]) for s in (10, 20, 30)] == [(0.0, 1), (0.0, 1), (0.5, 2)]
    assert rounds[20]["format_ok"] == 1.0 and rounds[10]["a_gold"] == 0.2 and rounds[30]["reward"] == 0.4
    assert rounds[10]["val-aux/lazymem/format_ok/std@4"] == 0.1  # VERL's own keys too


def test_restart_keeps_phase_2(trainer, tmp_path):
    path = tmp_path / "state.json"
    trainer.parent.metrics = val_metrics(1.0)
    assert bare(trainer.cls, config_for(path), step=40)._validate()["curriculum/phase"] == 2
    resumed = bare(trainer.cls, config_for(path), step=50)  # a new process on the same state file
    trainer.parent.metrics = val_metrics(0.1)
    out = resumed._validate()
    assert (out["curriculum/phase"], out["curriculum/lambda"]) == (2, 0.5)
    assert read_state(path)["flipped_at_step"] == 40


def test_missing_metric_leaves_the_phase(trainer, tmp_path, caplog):
    path = tmp_path / "state.json"
    t = bare(trainer.cls, config_for(path), step=10)
    trainer.parent.metrics = val_metrics(0.5)
    t._validate()
    trainer.parent.metrics = {"val-core/lazymem/reward/mean@4": 1.0}
    t.global_steps = 20
    with caplog.at_level(logging.WARNING, logger="lazymem.train.grpo.verl.trainer"):
        out = t._validate()
    assert "no format_ok/mean@N" in caplog.text
    assert "curriculum/format_rate" not in out and out["curriculum/phase"] == 1
    assert out["val-core/lazymem/reward/mean@4"] == 1.0
    assert read_state(path)["last"] == {"step": 10, "format_rate": 0.5}


def test_state_from_a_later_step_is_flagged(trainer, tmp_path, caplog):
    path = tmp_path / "state.json"
    trainer.parent.metrics = val_metrics(1.0)
    bare(trainer.cls, config_for(path), step=60)._validate()
    with caplog.at_level(logging.WARNING, logger="lazymem.train.grpo.verl.trainer"):
        bare(trainer.cls, config_for(path), step=0)._validate()
    assert "phase 2 since step 60, but this run is at step 0" in caplog.text


def test_init_hands_the_base_its_own_mode(trainer, tmp_path):
    """VERL's PPOTrainer branches on trainer_mode == "sync"; our mode name must not reach it."""
    config = config_for(tmp_path / "state.json")
    t = trainer.cls(config)
    assert trainer.parent.init_modes == [BASE_MODE] and config.trainer.v1.trainer_mode == BASE_MODE
    assert t._curriculum.phase == 1 and read_state(tmp_path / "state.json")["phase"] == 1


@pytest.mark.slow
def test_setup_worker_registers_with_verl():
    """In this process (VERL's v1 package already imported): registered at once."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    setup_worker()
    cls = get_trainer_cls(TRAINER_NAME)
    assert cls is trainer_class() and issubclass(cls, CurriculumValidation)
    assert issubclass(cls, PPOTrainerSync) and get_trainer_cls(BASE_MODE) is PPOTrainerSync


PROBE = """
import json, sys
from lazymem.train.grpo.verl.trainer import TRAINER_NAME, setup_worker
setup_worker()
loaded = sorted(m for m in ("torch", "verl", "ray") if m in sys.modules)
from verl.trainer.ppo.v1 import get_trainer_cls
print(json.dumps({"loaded": loaded, "mro": [c.__name__ for c in get_trainer_cls(TRAINER_NAME).__mro__]}))
"""


@pytest.mark.slow
def test_setup_worker_in_a_fresh_process_is_light_and_registers_on_verls_import():
    """As in a Ray worker: the hook loads no torch/VERL (CUDA stays untouched until Ray sets the devices),
    and VERL's own import of its trainer package brings the registration."""
    pytest.importorskip("verl")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    assert out["mro"][:4] == [
        "LazymemCurriculumTrainer",
        "CurriculumValidation",
        "PPOTrainerSync",
        "PPOTrainer",
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_verls_task_runner_finds_the_trainer(tmp_path):
    """VERL's run_ppo with our overrides: ray.init gets the setup hook, and inside the TaskRunner actor
    (a stand-in doing what TaskRunnerV1.run does first) get_trainer_cls(trainer_mode) is our class."""
    pytest.importorskip("verl")
    ray = pytest.importorskip("ray")
    from verl.trainer.main_ppo import run_ppo

    from lazymem.train.grpo.verl.overrides import overrides

    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process; run_ppo would not pass its runtime_env")
    extra = ["ray_kwargs.ray_init.num_cpus=2", "+ray_kwargs.ray_init.include_dashboard=false"]
    config = compose_verl(overrides(grpo_cfg(tmp_path), reward_cfg(tmp_path)) + extra)
    result = tmp_path / "probe.json"

    class TaskRunnerProbe:
        def run(self, config):
            import sys as worker_sys

            loaded_before = sorted(m for m in ("torch", "verl.trainer.ppo.v1") if m in worker_sys.modules)
            from verl.trainer.ppo.v1 import get_trainer_cls

            cls = get_trainer_cls(config.trainer.v1.trainer_mode)
            names = [c.__name__ for c in cls.__mro__]
            result.write_text(json.dumps({"loaded_before": loaded_before, "mro": names}))

    try:
        run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(TaskRunnerProbe))
    finally:
        ray.shutdown()
    out = json.loads(result.read_text())
    assert out["mro"][:3] == ["LazymemCurriculumTrainer", "CurriculumValidation", "PPOTrainerSync"]
    assert out["loaded_before"] == []


def judge_metrics(calls: float, errors: float, n: int = 4) -> dict[str, float]:
    """Validation metrics with the reward's judge counts, as VERL names their per-prompt means."""
    return {
        **val_metrics(1.0, n),
        f"val-aux/lazymem/judge_calls/mean@{n}": calls,
        f"val-aux/lazymem/judge_errors/mean@{n}": errors,
    }


def test_each_training_step_logs_the_reward(trainer, failing_judge, monkeypatch, tmp_path):
    """Unit, through the trainer's _compute_metrics: the rollouts' reward dicts are read where VERL's agent
    loop leaves them (TransferQueue, extra_fields.reward_extra_info; the store is a stand-in), padding left
    out, and logged beside VERL's own step metrics and in the checkpoint directory's training log, which
    task=report's learning curves read (a VERL step is one batch)."""
    fields = [
        {"reward_extra_info": rollout(["a", "fail b"]), "min_global_steps": 3},
        {"reward_extra_info": rollout(["c", "d", "e"]), "min_global_steps": 3},
        {"reward_extra_info": rollout(["fail f"]), "min_global_steps": 3},  # padding: a repeated sample
    ]
    stored = np.empty(len(fields), dtype=object)
    stored[:] = fields
    asked = []

    def kv_batch_get(keys, partition_id, select_fields=None):
        asked.append((keys, partition_id, select_fields))
        return {"extra_fields": stored}

    monkeypatch.setitem(sys.modules, "transfer_queue", SimpleNamespace(kv_batch_get=kv_batch_get))
    batch = SimpleNamespace(keys=["u_0_0", "u_1_0", "u_0_0p"], partition_id="train", tags=[{}, {}, {}])
    batch.tags[2]["is_padding"] = True
    metrics: dict = {}
    bare(trainer.cls, config_for(tmp_path / "state.json"), step=3)._compute_metrics(batch, metrics, {}, 3, 0)
    assert asked == [(batch.keys, "train", ["extra_fields"])]
    assert metrics["critic/score/mean"] == 0.5  # VERL's
    assert metrics["reward/judge_error_rate"] == pytest.approx(1 / 5)
    assert metrics["reward/judge_errors/mean"] == pytest.approx(0.5)
    (row,) = load_jsonl(tmp_path / TRAIN_LOG)
    assert (row["step"], row["batch"]) == (3, 3) and row["judge_errors"] == pytest.approx(0.5)
    assert batch_rewards(tmp_path) == [(3, row["score"])]


def test_validation_stops_when_the_judge_fails_too_often(trainer, tmp_path, monkeypatch):
    """Unit, through the trainer's _validate with validation metrics named as VERL names them: the judge's
    error rate is logged; past judge.max_error_rate (default 5%) the run stops with a named error, after the
    round is recorded; phase 1 (no judge calls) has no rate."""
    monkeypatch.delenv(ENV_STATE, raising=False)
    t = bare(trainer.cls, config_for(tmp_path / "state.json"), step=0)
    trainer.parent.metrics = judge_metrics(calls=0.0, errors=0.0)
    assert "val-aux/judge_error_rate" not in t._validate()
    t.global_steps = 10
    trainer.parent.metrics = judge_metrics(calls=4.0, errors=0.2)  # 5%: at the bound, not past it
    assert t._validate()["val-aux/judge_error_rate"] == pytest.approx(0.05)
    t.global_steps = 20
    trainer.parent.metrics = judge_metrics(calls=4.0, errors=0.4)
    with pytest.raises(JudgeErrorRateExceeded, match=r"step 20: .* 10\.0% of its calls, above .* = 5\.0%"):
        t._validate()
    assert read_validations(tmp_path)[20]["val-aux/judge_error_rate"] == pytest.approx(0.1)
    looser = bare(trainer.cls, config_for(tmp_path / "state.json", judge={"max_error_rate": 0.2}), step=30)
    assert looser._validate()["val-aux/judge_error_rate"] == pytest.approx(0.1)


@pytest.mark.slow
def test_judge_bound_on_verls_own_validation_metrics(trainer, tmp_path, failing_judge):
    """Our real reward's dicts for 2 prompts x 4 rollouts, turned into validation metrics by VERL's own
    _val_metrics_update, then our _validate: 2 failed calls of 11 stop the run."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    dicts = [rollout(["a"]), rollout(["fail b"]), rollout([]), rollout(["c"])]
    dicts += [rollout(["d", "e"]), rollout(["f", "fail g"]), rollout(["h", "i"]), rollout(["j", "k"])]
    infos = {"reward": [d["score"] for d in dicts], **{k: [d[k] for d in dicts] for k in dicts[0]}}
    metrics = PPOTrainer._val_metrics_update(None, ["lazymem"] * 8, ["p1"] * 4 + ["p2"] * 4, infos, [])
    trainer.parent.metrics = metrics
    with pytest.raises(JudgeErrorRateExceeded, match=r"18\.2% of its calls"):
        bare(trainer.cls, config_for(tmp_path / "state.json"), step=10)._validate()


def stored_batch(monkeypatch, infos: list[dict]) -> SimpleNamespace:
    """A training batch whose rollouts' reward dicts sit where VERL's agent loop leaves them (a stand-in
    TransferQueue)."""
    stored = np.empty(len(infos), dtype=object)
    stored[:] = [{"reward_extra_info": info} for info in infos]
    store = SimpleNamespace(
        kv_batch_get=lambda keys, partition_id, select_fields=None: {"extra_fields": stored}
    )
    monkeypatch.setitem(sys.modules, "transfer_queue", store)
    return SimpleNamespace(
        keys=[f"u_{i}" for i in range(len(infos))], partition_id="train", tags=[{}] * len(infos)
    )


def test_a_training_step_past_the_judge_bound_stops_before_the_actor_learns(
    trainer, tmp_path, failing_judge, monkeypatch
):
    """Unit, through the trainer's _update_actor: a step's judge error rate past judge.max_error_rate stops
    the run before VERL's actor update (and so before its checkpoint); steps with fewer than
    judge.min_step_calls calls are summed with the next ones; phase 1 (no calls) is not judged."""
    judge = {"max_error_rate": 0.2, "min_step_calls": 4}
    t = bare(trainer.cls, config_for(tmp_path / "state.json", judge=judge), step=1)
    phase1 = stored_batch(monkeypatch, [rollout(["fail a"], lam=0.0)])  # no judge call
    assert t._update_actor(phase1, {}) is phase1
    t.global_steps = 2
    t._update_actor(stored_batch(monkeypatch, [rollout(["b", "c"]), rollout(["d", "e", "f"])]), {})  # 0 of 5
    t.global_steps = 3
    t._update_actor(stored_batch(monkeypatch, [rollout(["a", "fail b"])]), {})  # 1 of 2: too few to judge
    t.global_steps = 4
    with pytest.raises(
        JudgeErrorRateExceeded, match=r"training steps 3-4: .* 25\.0% of its 4 calls, above .* = 20\.0%"
    ):
        t._update_actor(stored_batch(monkeypatch, [rollout(["c", "d"])]), {})
    assert len(trainer.parent.updated) == 3  # steps 1-3 learnt; step 4 did not
    t.global_steps = 5  # a step that reaches the minimum alone is judged alone
    with pytest.raises(JudgeErrorRateExceeded, match=r"training step 5: .* 40\.0% of its 5 calls"):
        t._update_actor(
            stored_batch(monkeypatch, [rollout(["fail a", "b"]), rollout(["c", "fail d", "e"])]), {}
        )
    default = bare(trainer.cls, config_for(tmp_path / "state.json"), step=6)  # 5% over at least 200 calls
    default._update_actor(stored_batch(monkeypatch, [rollout(["fail a", "b"])] * 99), {})
    default.global_steps = 7
    with pytest.raises(JudgeErrorRateExceeded, match=r"training steps 6-7: .* 50\.0% of its 200 calls"):
        default._update_actor(stored_batch(monkeypatch, [rollout(["fail a", "b"])]), {})
