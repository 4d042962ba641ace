"""A VERL 0.9.1 trainer that moves the reward curriculum (grpo/curriculum.py) after each validation round.

The reward never sees the training step, so the phase flip happens where validation results are: the
trainer's ``_validate``. Its result holds the mean of our reward's ``format_ok`` per data source, as
``val-aux/<data_source>/format_ok/mean@<N>``; that rate goes to :meth:`Curriculum.observe_validation`,
which writes the phase to the state file the reward reads lambda from. Each round is also appended to
the checkpoint directory's validation log, from which the checkpoint is chosen (grpo/checkpoints.py).

The quality judge's error-rate bound (grpo/reward_metrics.py) is applied here: the reward's components
and the judge's error rate are logged at every training step (``reward/*``: VERL 0.9.1's v1 trainer logs a
reward's extra keys for validation only) and in every validation round, and a rate above
``judge.max_error_rate`` of the reward kwargs stops the run: a validation round's, and a training step's
before the policy learns from it.

VERL looks the trainer class up by ``trainer.v1.trainer_mode`` inside its TaskRunner, a Ray actor
(verl/trainer/main_ppo.py), so the class must be registered in Ray's workers: Ray's
``worker_process_setup_hook`` runs :func:`setup_worker` there. Curriculum settings come from the reward
kwargs (``reward.custom_reward_function.reward_kwargs``), the same values the reward gets.

Importing this module loads neither VERL nor torch: the hook runs in every Ray worker before Ray sets
CUDA_VISIBLE_DEVICES, and importing VERL initialises CUDA (verl.utils.device calls
torch.cuda.is_available() on import). So the class is built and registered when VERL's own code imports
its v1 trainer package.
"""

from __future__ import annotations

import importlib.abc
import logging
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lazymem.train.grpo.checkpoints import append_training, append_validation
from lazymem.train.grpo.curriculum import Curriculum, state_path
from lazymem.train.grpo.reward_metrics import StepJudge, check_judge, judge_error_rate, step_metrics

log = logging.getLogger(__name__)

TRAINER_NAME = "lazymem_curriculum"  # our trainer.v1.trainer_mode
BASE_MODE = "sync"  # VERL 0.9.1's default trainer_mode; its class is our base class
HOOK = f"{__name__}.setup_worker"  # the value for Ray's worker_process_setup_hook
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"
FORMAT_VAR = "format_ok"  # the reward's 1.0 / 0.0 format-valid flag (lazymem.train.grpo.reward)
VERL_V1 = "verl.trainer.ppo.v1"  # the package holding VERL's trainer registry and its "sync" trainer

# VERL's _val_metrics_update names: val-{core,aux}/<data_source>/<var>/<metric>; data sources may hold "/"
_VAL_MEAN = re.compile(r"^val-(?:core|aux)/(?P<source>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")


def format_rate(metrics: Mapping[str, Any], var: str = FORMAT_VAR) -> float | None:
    """The validation mean of ``var`` (by default the format-valid rate) in VERL's validation metrics;
    None when no ``<var>/mean@N`` is there.

    Per data source VERL averages per-prompt means, under ``mean@N`` with N = the prompt's rollouts; a
    prompt that lost rollouts lands in a key with a smaller N. We take the largest N per source (VERL's own
    choice for its val-core metrics) and the plain mean over sources, whose sizes the dict does not hold
    (our rows have one source, ``lazymem``).
    """
    best: dict[str, tuple[int, float]] = {}
    for key, val in metrics.items():
        m = _VAL_MEAN.match(key)
        if m is None or m["var"] != var:
            continue
        try:
            rate = float(val)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(rate):
            continue
        n = int(m["n"])
        if m["source"] not in best or n > best[m["source"]][0]:
            best[m["source"]] = (n, rate)
    if not best:
        return None
    return math.fsum(rate for _, rate in best.values()) / len(best)


def validation_means(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Every reward variable's validation mean (:func:`format_rate` per variable), by variable name."""
    names = {m["var"] for m in map(_VAL_MEAN.match, metrics) if m is not None}
    means = {var: format_rate(metrics, var) for var in sorted(names)}
    return {var: v for var, v in means.items() if v is not None}


def judge_config(config: Any):
    """The JudgeConfig of the reward kwargs (its defaults when absent)."""
    from lazymem.train.grpo.quality_judge import JudgeConfig  # not at import: this module stays light

    cfg = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    return JudgeConfig.from_mapping(OmegaConf.select(cfg, f"{REWARD_KWARGS}.judge", default=None))


def max_judge_error_rate(config: Any) -> float:
    """``judge.max_error_rate`` of the reward kwargs (JudgeConfig's default when absent)."""
    return judge_config(config).max_error_rate


def step_judge(config: Any) -> StepJudge:
    """The bound on training steps the reward kwargs' judge settings give."""
    judge = judge_config(config)
    return StepJudge(judge.max_error_rate, judge.min_step_calls)


def curriculum_from_config(config: Any) -> Curriculum:
    """The Curriculum the reward kwargs describe (state file, tau, lam_phase1, lam_phase2).

    The state file falls back to ``$LAZYMEM_CURRICULUM_STATE`` as in the reward; without either the phase
    could not reach the reward workers, so that is an error. Absent tau / lambdas take Curriculum's defaults.
    """
    cfg = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    kw = OmegaConf.select(cfg, REWARD_KWARGS, default=None) or {}
    path = state_path(kw.get("curriculum_state"))
    if path is None:
        raise ValueError(
            f"the curriculum trainer needs a state file: set {REWARD_KWARGS}.curriculum_state "
            "or $LAZYMEM_CURRICULUM_STATE"
        )
    settings = {k: float(kw[k]) for k in ("tau", "lam_phase1", "lam_phase2") if kw.get(k) is not None}
    return Curriculum(path, **settings)


def observe(cur: Curriculum, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
    """Feed one validation round to the curriculum; returns the ``curriculum/*`` metrics to log."""
    if cur.flipped_at_step is not None and cur.flipped_at_step > step:
        log.warning(
            "curriculum state %s says phase 2 since step %d, but this run is at step %d: "
            "a state file of another run, or a resume from an older checkpoint?",
            cur.path,
            cur.flipped_at_step,
            step,
        )
    out: dict[str, float] = {}
    rate = format_rate(metrics)
    if rate is None:
        log.warning(
            "curriculum: no %s/mean@N in the validation metrics at step %d; phase %d kept",
            FORMAT_VAR,
            step,
            cur.phase,
        )
    else:
        cur.observe_validation(rate, step=step)
        out["curriculum/format_rate"] = rate
    out["curriculum/phase"] = float(cur.phase)
    out["curriculum/lambda"] = float(cur.lam)
    return out


class CurriculumValidation:
    """Mixin for a VERL PPOTrainer: every validation round also moves and logs the curriculum."""

    base_mode = BASE_MODE

    def __init__(self, config: DictConfig):
        # VERL's PPOTrainer branches on trainer_mode == "sync" (replay buffer, checkpoints, weight sync);
        # our name only made main_ppo pick this class, so the base class and everything after see its mode
        config.trainer.v1.trainer_mode = self.base_mode
        super().__init__(config)
        self._curriculum = curriculum_from_config(config)  # writes the state file, logs a resumed phase

    def _validate(self) -> dict[str, Any]:
        metrics = super()._validate()
        cur = self.__dict__.get("_curriculum")
        if cur is None:
            cur = self._curriculum = curriculum_from_config(self.config)
        scored = {"step": self.global_steps, "lam": cur.lam, "phase": cur.phase}  # before the round moves it
        means = validation_means(metrics)
        rate = judge_error_rate(means)
        judged = {} if rate is None else {"val-aux/judge_error_rate": rate}
        record = {**scored, **means, **metrics, **judged}
        append_validation(self.config.trainer.default_local_dir, record)  # for the checkpoint choice
        out = {**metrics, **observe(cur, metrics, self.global_steps), **judged}
        check_judge(rate, max_judge_error_rate(self.config), self.global_steps)
        return out

    def _update_actor(self, batch, metrics):
        """Judge the rollouts' judge errors (:class:`StepJudge`) before the actor learns from them.

        In VERL 0.9.1 fit's step ends with this update (verl/trainer/ppo/v1/trainer_base.py:477, 608-610) and
        only then saves the step's checkpoint (481-485), so a stop here leaves neither an update nor a
        checkpoint of the step. Each of the step's ``parameter_sync_step`` mini-batches (549-552) comes here
        once; with the default 1 (line 130), the whole step."""
        check = self.__dict__.get("_step_judge")
        if check is None:
            check = self._step_judge = step_judge(self.config)
        check.add(reward_infos(batch), self.global_steps)
        return super()._update_actor(batch, metrics)

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        """VERL's step metrics, plus the reward's (:func:`step_metrics`), which also go to the checkpoint
        directory's training log (a VERL step is one batch)."""
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        infos = reward_infos(batch)
        metrics.update(step_metrics(infos))
        append_training(self.config.trainer.default_local_dir, global_steps, global_steps, infos)


def reward_infos(batch: Any) -> list[Mapping[str, Any]]:
    """The reward dicts of a training batch's rollouts (padding left out), from VERL's TransferQueue.

    With a reward function and no reward model, VERL 0.9.1's agent loop keeps the dict in the rollout's
    ``extra_fields["reward_extra_info"]`` (verl/experimental/agent_loop/agent_loop.py:1028) and puts
    ``extra_fields`` into the TransferQueue (verl/trainer/ppo/v1/agent_loop_tq.py:194-226); this reads it
    back as VERL's _compute_metrics does (verl/trainer/ppo/v1/trainer_base.py:1904-1909)."""
    import transfer_queue as tq  # VERL's; only VERL's TaskRunner calls this

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    fields = data.pop("extra_fields").tolist()
    return [
        field.get("reward_extra_info", {})
        for field, tag in zip(fields, batch.tags, strict=True)
        if isinstance(field, dict) and not tag.get("is_padding", False)
    ]


_TRAINER: type | None = None


def trainer_class() -> type:
    """Our trainer: the mixin over VERL's ``sync`` trainer, registered as TRAINER_NAME (once)."""
    global _TRAINER
    if _TRAINER is None:
        from verl.trainer.ppo.v1 import get_trainer_cls, register_trainer

        class LazymemCurriculumTrainer(CurriculumValidation, get_trainer_cls(BASE_MODE)):
            """VERL's sync trainer, plus the reward curriculum after each validation round."""

        LazymemCurriculumTrainer.__qualname__ = LazymemCurriculumTrainer.__name__
        _TRAINER = register_trainer(TRAINER_NAME)(LazymemCurriculumTrainer)
    return _TRAINER


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """One-shot import hook: once VERL's v1 trainer package has run, register our trainer."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != VERL_V1:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:  # the finders that would have found it without us
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            exec_module = spec.loader.exec_module

            def exec_then_register(module):
                exec_module(module)
                trainer_class()

            spec.loader.exec_module = exec_then_register  # this spec's own loader instance
        return spec


def setup_worker() -> None:
    """Ray's worker_process_setup_hook: make TRAINER_NAME known wherever VERL loads its trainers."""
    if VERL_V1 in sys.modules:
        trainer_class()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
