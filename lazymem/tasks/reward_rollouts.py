"""task=reward_rollouts: Table 11 end to end (paper Appendix E.1): rollouts of the SFT policy on the RL
validation prompts, then the reward-ordering diagnostic (lazymem/train/grpo/diagnostics.py) on them.

Prompts: the val split's windows exactly as task=build_rl builds val.parquet (retrieval, windowing, the
memory prompt; gold-bearing and gold-free windows paired when train.grpo.data.balance_val). Rollouts:
`rollouts.n` samples per prompt from the memory role (the SFT checkpoint), sample index 0..n-1, at the
rollout temperature and top_p of GRPO, decoded freely as in training (the gate judges the raw text).
Writes rollouts.jsonl (prompt_id, gold, response, sample: the diagnostic's input format; `resume=true`
keeps the prompts already sampled), reward_diagnostics.json, summary.json (tables.reward_diagnostics)
and Table 11 with the paper's numbers beside ours (table11.md, CSV).
"""

from __future__ import annotations

import asyncio
import json
import logging

from tqdm import tqdm

from lazymem.eval.records import read_records
from lazymem.eval.summary import summary, write_summary
from lazymem.llm.llm_set import build_llms, role_config
from lazymem.preflight import require_placement
from lazymem.prompts import load
from lazymem.report.ablation_tables import table11
from lazymem.report.tables import load_references, write_tables
from lazymem.tasks.build_rl import val_prompts
from lazymem.tasks.contract import Task
from lazymem.train.grpo.diagnostics import reward_ordering

log = logging.getLogger(__name__)


def prompts(cfg, run) -> list:
    """The RL validation prompts (WindowItems), as task=build_rl writes them to val.parquet."""
    pool = val_prompts(cfg, run)
    limit = cfg.rollouts.limit
    return pool if limit is None else pool[: int(limit)]


def run(cfg, run) -> dict:
    if not role_config(cfg.llm, "memory").get("model"):
        raise SystemExit("error: the SFT policy is not set: pass llm.roles.memory.model=/path/to/sft_model")
    require_placement(cfg, ["memory"])
    opts = cfg.rollouts
    items = prompts(cfg, run)
    path = run.dir / "rollouts.jsonl"
    # the runner refuses a used run directory unless resume=true; then the sampled prompts are kept
    done = {str(r["prompt_id"]) for r in read_records(path)} if path.exists() else set()
    decoding = {"temperature": opts.temperature, "top_p": opts.top_p, "max_tokens": opts.max_tokens}
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        policy = llms["memory"]
        version = f"{load(cfg.prompts.memory_system).version}-{load(cfg.prompts.memory_user).version}"
        asyncio.run(_sample(policy, items, done, int(opts.n), version, decoding, path))
        stats = llms.stats()
    # a failed call is no policy output: left out, and counted
    written = read_records(path)
    sampled = [r for r in written if not r.get("error")]
    result = {"rollouts": str(path.resolve()), "eta": float(cfg.diagnostics.eta)}
    result |= reward_ordering(sampled, eta=result["eta"]) | {"call_errors": len(written) - len(sampled)}
    (run.dir / "reward_diagnostics.json").write_text(json.dumps(result, indent=2) + "\n")
    write_summary(run.dir, summary(cfg.task, llm=stats, tables={"reward_diagnostics": result}))
    md = write_tables([table11("ours", result, load_references())], run.dir, "table11.md", "Table 11")
    print("\n" + md)
    return {k: v for k, v in result.items() if not isinstance(v, dict)}


async def _sample(policy, items, done: set, n: int, version: str, decoding: dict, path) -> None:
    """n samples per prompt, prompts one after another (the samples of a prompt concurrently)."""
    with open(path, "a") as f:
        for k, it in enumerate(tqdm(items, desc="rollouts", unit="prompt", dynamic_ncols=True)):
            if str(k) in done:
                continue
            replies = await asyncio.gather(
                *(policy.chat(it.chat, prompt_version=version, sample=s, **decoding) for s in range(n))
            )
            lines = []
            for s, reply in enumerate(replies):
                if reply.error:
                    log.warning("prompt %d sample %d: %s", k, s, reply.error)
                line = {
                    "prompt_id": str(k),
                    "question_id": it.question.id,
                    "window": [it.window.start, it.window.end],
                    "gold": list(it.gold),
                    "sample": s,
                    "response": reply.generated,  # thinking included: the gate reads it as VERL's would
                    "error": reply.error,
                }
                lines.append(json.dumps(line, ensure_ascii=False) + "\n")
            f.write("".join(lines))  # a prompt's samples in one write: resume never sees half of them
            f.flush()


TASK = Task(run)
