"""Phase 2's load on the quality-reward judge, bounded before training starts (issue 41, N25).

Why: in phase 2 the reward calls the judge (``llm.roles.reward_judge``) once per KEEP decision of every
rollout, up to train_batch_size x rollout_n x (a window's messages) calls a step. The judge's client bounds
the requests in flight per endpoint and event loop (the role's ``concurrency``: lazymem/llm/client.py
``endpoint_slots``), but the engine awaits the reward in several processes at once (VERL's reward loop
workers, ``train.grpo.reward_workers``; TRL: one), so one server gets up to processes x concurrency of them.
A vLLM server runs as many as its KV cache holds; the rest wait in its queue, and that wait counts against
the client's ``timeout_s``, whose clock starts once the client's own slot is taken: they time out, are retried
and end as judge errors, which stop the run past ``judge.max_error_rate``. A request the client's semaphore
holds back waits off that clock, so the fix is a concurrency the server holds.

What the server holds at once: min(max_num_seqs, its KV cache tokens / one call's tokens). The KV cache is
the GPU plan's (the judge's GPU, its share and the model's per-token KV size: lazymem/gpu/), known only when
the judge serves on this node. A call is counted as the judge's prompt template plus its reply cap
(``decoding.max_tokens``), without the window text it grades: no call is shorter once it reaches its cap, so
this is the most the server holds, and more in flight surely queue. Calls also carry the graded message, the
memory, the query, the answer and the reasoning chain; at the longest the server admits (``context_tokens``)
it holds far fewer, which the report gives too, and the per-step ``reward/judge_s/mean`` measures the real
wait. A number this machine cannot know (no GPU plan, a hosted endpoint) is said to be unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazymem.gpu.inventory import Gpu
from lazymem.gpu.model_memory import kv_gib
from lazymem.gpu.tenants import judge_tenant
from lazymem.llm.llm_set import role_config
from lazymem.tokens import chat_tokens
from lazymem.train.grpo.engine import Launch
from lazymem.train.grpo.quality_judge import JudgeItem, build_messages, load_template

ROLE = "llm.roles.reward_judge"
# vLLM's max_num_seqs when unset: 256, or 1024 on GPUs of 70 GiB or more other than A100s, for its OpenAI
# server (vllm 0.32 vllm/engine/arg_utils.py:2923-2952); the smaller is what the bound takes
VLLM_DEFAULT_SEQS = 256


@dataclass(frozen=True)
class JudgeLoad:
    """Phase 2's judge calls a step, requests in flight at once and what the judge's server holds."""

    batch: int  # train.grpo.train_batch_size
    rollouts: int  # train.grpo.rollout_n
    window: int  # the most messages a window holds: train.grpo.data.max_len (construct/windows.py cuts there)
    processes: int | None  # processes awaiting the reward at once (Launch.reward_loops); None: unknown
    processes_key: str | None  # the setting that sets them
    concurrency: int  # the role's requests in flight per event loop
    managed: bool  # a managed backend: every process starts a server of its own
    timeout_s: float
    kv_tokens: int | None  # the server's KV cache in tokens; None: unknown (see `where`)
    where: str  # where kv_tokens comes from, or why it is unknown
    template_tokens: int | None  # the judge's prompt without the window text
    reply_tokens: int | None  # decoding.max_tokens
    context_tokens: int | None  # the longest call the server admits
    max_num_seqs: int | None  # the role's vllm.max_num_seqs; None: vLLM's default

    @property
    def calls_per_step(self) -> int:
        return self.batch * self.rollouts * self.window

    @property
    def loops(self) -> int:
        """Event loops sending to one server (one a server when managed, at least one when unknown)."""
        return 1 if self.managed or self.processes is None else self.processes

    @property
    def in_flight(self) -> int:
        return min(self.loops * self.concurrency, self.calls_per_step)

    @property
    def call_tokens(self) -> int | None:
        if self.template_tokens is not None and self.reply_tokens:
            return self.template_tokens + self.reply_tokens
        return self.context_tokens

    @property
    def kv_calls(self) -> int | None:
        """Calls of `call_tokens` the KV cache holds."""
        if self.kv_tokens is None or not self.call_tokens:
            return None
        return self.kv_tokens // self.call_tokens

    @property
    def capacity(self) -> int | None:
        """The most calls the server holds at once; None: unknown."""
        seqs = self.max_num_seqs or (VLLM_DEFAULT_SEQS if self.kv_calls is not None else None)
        limits = [n for n in (self.kv_calls, seqs) if n is not None]
        return min(limits) if limits else None

    def _senders(self) -> str:
        if self.managed:
            return f"{ROLE}.concurrency {self.concurrency}, each reward process a server of its own"
        who = "reward processes (unknown: counted as 1)" if self.processes is None else "reward processes"
        return f"{self.loops} {who} x {ROLE}.concurrency {self.concurrency}"

    @property
    def lines(self) -> list[str]:
        """The report: calls a step, requests in flight and what the server holds."""
        out = [
            f"quality judge in phase 2: up to {self.calls_per_step} calls a training step (train_batch_size "
            f"{self.batch} x rollout_n {self.rollouts} x {self.window} messages a window, one call per "
            f"KEEP), {self.in_flight} requests in flight at once ({self._senders()}), timeout_s "
            f"{self.timeout_s:g} s"
        ]
        seqs = f"max_num_seqs {self.max_num_seqs or f'vLLM default, at least {VLLM_DEFAULT_SEQS}'}"
        if self.kv_calls is None:
            held = f"at most {self.capacity} ({seqs})" if self.capacity else "an unknown number"
            out.append(f"the judge's server holds {held} at once: its KV cache is unknown ({self.where})")
            return out
        longest = ""
        if self.context_tokens:
            ctx = self.context_tokens
            longest = f", {self.kv_tokens // ctx} of the longest it admits ({ctx}: context_tokens)"
        out.append(
            f"the judge's server holds at most {self.capacity} at once: a KV cache of {self.kv_tokens} "
            f"tokens ({self.where}) holds {self.kv_calls} calls of {self.call_tokens} tokens (the judge's "
            f"template {self.template_tokens} + decoding.max_tokens {self.reply_tokens}){longest}; {seqs}"
        )
        return out

    @property
    def problems(self) -> list[str]:
        """More requests in flight than the server holds at once, with the fix; [] when they fit or the
        server's capacity is unknown."""
        held = self.capacity
        if not held or self.in_flight <= held:
            return []
        if self.kv_calls is not None and self.kv_calls <= held:
            why = f"a KV cache of {self.kv_tokens} tokens, calls of {self.call_tokens} tokens at the least"
        else:
            why = f"{ROLE}.vllm.max_num_seqs {held}" if self.max_num_seqs else f"vLLM's max_num_seqs {held}"
        per = held // self.loops
        if per >= 1:
            fix = f"lower {ROLE}.concurrency to {per} ({per * self.loops} in flight)"
        elif self.processes_key:
            fix = f"lower {self.processes_key} to {held} and {ROLE}.concurrency to 1"
        else:
            fix = f"even {ROLE}.concurrency 1 sends {self.loops}: serve the judge on more GPUs"
        return [
            f"phase 2 sends the quality judge ({ROLE}) up to {self.in_flight} requests at once "
            f"({self._senders()}) but its server holds at most {held} ({why}): the rest wait in vLLM's "
            f"queue, on the clock of timeout_s {self.timeout_s:g} s, then retry and count as judge errors "
            f"(train.reward.judge.max_error_rate). {fix[0].upper()}{fix[1:]}, or give the judge's server "
            "room for more (a GPU with more memory, a smaller decoding.max_tokens)"
        ]


def judge_gpu(plan: Mapping[str, list[int]], inventory: Sequence[Gpu]) -> Gpu | None:
    """The judge's GPU in the training plan (gpu/training.py), when it is visible."""
    index = (plan.get("reward_judge") or [None])[0]
    return inventory[index] if index is not None and index < len(inventory) else None


def judge_load(cfg, launch: Launch, gpu: Gpu | None = None) -> JudgeLoad:
    """Phase 2's load on the judge for the job `cfg`, the engine's `launch` and the judge's `gpu` (None: not
    on this node's plan)."""
    grpo, rc = cfg.train.grpo, role_config(cfg.llm, "reward_judge")
    vllm, decoding = rc.get("vllm") or {}, rc.get("decoding") or {}
    managed = rc.get("backend") != "endpoint"
    if managed:
        kv, where = None, f"each reward process starts a {rc.get('backend')} server of its own"
    else:
        kv, where = _kv_tokens(cfg, rc, gpu)
    return JudgeLoad(
        batch=int(grpo.train_batch_size),
        rollouts=int(grpo.rollout_n),
        window=int(grpo.data.max_len),
        processes=launch.reward_loops,
        processes_key=launch.reward_loops_key,
        concurrency=int(rc["concurrency"]),
        managed=managed,
        timeout_s=float(rc["timeout_s"]),
        kv_tokens=kv,
        where=where,
        template_tokens=_template_tokens(cfg.train.reward.judge.get("template")),
        reply_tokens=decoding.get("max_tokens"),
        context_tokens=rc.get("context_tokens") or vllm.get("max_model_len"),
        max_num_seqs=vllm.get("max_num_seqs"),
    )


def _kv_tokens(cfg, rc: Mapping, gpu: Gpu | None) -> tuple[int | None, str]:
    """The judge's KV cache in tokens on `gpu` and where that comes from; None and why when unknown."""
    if gpu is None:
        return None, "the judge is not on this node's GPU plan: a server elsewhere or a hosted endpoint"
    judge = judge_tenant(cfg)
    per_token = kv_gib(str(rc.get("model")), 1, (rc.get("vllm") or {}).get("dtype"))
    if judge.weights is None or per_token is None:
        return None, f"the size of {rc.get('model')} cannot be read"
    budget = judge.kv_budget(gpu)
    share = f"{judge.util:g} x {gpu.total_gib:.1f} GiB"
    return max(0, int(budget / per_token)), f"{budget:.1f} GiB of GPU {gpu.index}'s {share}"


def _template_tokens(path) -> int | None:
    """Tokens of the judge's prompt with every field of the graded item empty; None when the template
    (train.reward.judge.template) cannot be read."""
    try:
        template = load_template(path)
    except (OSError, ValueError):
        return None
    empty = JudgeItem("", None, "", None, {"role": "user", "content": "", "timestamp": ""}, "")
    return chat_tokens(build_messages(empty, template))
