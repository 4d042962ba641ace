"""Training's GPUs: which visible GPUs LLaMA-Factory's SFT, VERL's GRPO and the reward judge's vLLM server
take (``placement.train``), and whether the judge's context fits its GPU."""

from __future__ import annotations

from urllib.parse import urlsplit

from omegaconf import OmegaConf

from lazymem.gpu.budget import MAX_UTIL
from lazymem.gpu.inventory import Gpu
from lazymem.gpu.tenants import judge_tenant
from lazymem.llm.llm_set import role_config


def training(cfg, inventory: list[Gpu]) -> tuple[dict[str, list[int]], list[str]]:
    """Training's GPUs by index among those visible, from ``placement.train`` (null: derived) — ``sft``
    (LLaMA-Factory's ``train.sft.nproc_per_node``), ``grpo`` (VERL's ``train.grpo.n_gpus_per_node``) and
    ``reward_judge`` (the GPU after VERL's, when the judge's server runs on this node; none when it is an
    endpoint elsewhere) — for the stages in ``cfg.train``, and what keeps them from fitting, with fixes."""
    keys = OmegaConf.to_container(cfg.placement.get("train") or {}, resolve=True)
    train, visible, found = cfg.get("train") or {}, len(inventory), []
    plan: dict[str, list[int]] = {}
    if "sft" in train:
        plan["sft"] = _indices(keys.get("sft"), int(train.sft.nproc_per_node))
    if "grpo" in train:
        n = int(train.grpo.n_gpus_per_node)
        plan["grpo"] = _indices(keys.get("grpo"), n)
        if len(plan["grpo"]) != n:
            found.append(
                f"placement.train.grpo = {keys.get('grpo')!r} names {len(plan['grpo'])} GPUs but VERL takes "
                f"train.grpo.n_gpus_per_node = {n}: make them agree"
            )
        judge_url = role_config(cfg.llm, "reward_judge").get("base_url")
        if _on_this_node(judge_url):
            plan["reward_judge"] = _indices(keys.get("reward_judge"), 1, max(plan["grpo"]) + 1)
            if set(plan["reward_judge"]) & set(plan["grpo"]):
                found.append(
                    f"placement.train.reward_judge = {plan['reward_judge']} is one of VERL's GPUs "
                    f"{plan['grpo']}: give the judge a GPU of its own"
                )
    for stage, gpus in plan.items():
        if missing := [i for i in gpus if i >= visible]:
            fix = f"run it on a node with {max(gpus) + 1} GPUs"
            if stage == "reward_judge":
                fix += ", or serve the judge on another node and pass llm.roles.reward_judge.base_url=..."
            found.append(
                f"{stage} takes GPUs {gpus} (placement.train.{stage}), {missing[0]} is not visible "
                f"({visible} visible): {fix}"
            )
    if "reward_judge" in plan and not found:
        judge, gpu = judge_tenant(cfg), inventory[plan["reward_judge"][0]]
        if judge.weights is not None and judge.need() > MAX_UTIL * gpu.total_gib:
            found.append(
                f"{judge.what} needs {judge.need():.1f} GiB with a {judge.tokens}-token context "
                f"(llm.roles.reward_judge.context_tokens) but GPU {gpu.index} has {gpu.total_gib:.1f}: serve "
                "it on a larger GPU or another node (llm.roles.reward_judge.base_url)"
            )
    return plan, found


def _on_this_node(base_url: str | None) -> bool:
    return urlsplit(base_url or "").hostname in ("127.0.0.1", "localhost", "::1")


def _indices(value, n: int, start: int = 0) -> list[int]:
    """GPU indices of a plan key ("0,1", [0, 1], 0); null: `n` of them from `start`."""
    if value is None:
        return list(range(start, start + n))
    return [int(v) for v in (str(value).split(",") if not isinstance(value, list) else value)]
