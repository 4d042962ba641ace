"""task=chain: run `chain.stages`, each an ordinary lazymem run in <chain run dir>/<stage>/, on Ray, with
chain.json recording every stage; resume=true in the same hydra.run.dir skips the unchanged stages
(lazymem/chain: stages, plan, fingerprint, record, schedule, driver)."""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from lazymem import tasks
from lazymem.chain.driver import run_chain
from lazymem.rundir import resolved_config
from lazymem.tasks.contract import Task


def run(cfg, run) -> dict:
    chain = OmegaConf.to_container(cfg.chain, resolve=True)
    # the chain's own tracking choice (logger=none, logger=wandb) reaches every stage, then chain.overrides
    chain["overrides"] = [f"logger={HydraConfig.get().runtime.choices.logger}", *chain["overrides"]]
    config = {k: v for k, v in resolved_config(cfg).items() if k != "resume"}
    return run_chain(chain, run.dir.absolute(), config, bool(cfg.resume), tasks.find)


# its stages keep their own question counts (and error budgets) in their own run dirs, and a resumed chain
# decides per stage what a changed config reruns (lazymem/chain/plan.py)
TASK = Task(run, counts_questions=False, resumes_itself=True)
