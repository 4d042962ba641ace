"""task=construction_eval: how well a memory model decides, window by window, on the RL validation prompts.

The prompts are the validation split's windows exactly as task=build_rl writes val.parquet (the ones GRPO
validates on; build_rl.val_prompts). The memory role answers each once, greedily, as at inference; the
strict format gate reads the raw reply. Per window: valid or not, gold kept, non-gold dropped (an invalid
reply kept nothing and dropped nothing), the action reward of Eq. 7 (0 when invalid, as training's phase 1).
Over the split: format rate, gold kept, non-gold dropped, construction F1 (KEEP as the prediction of gold),
mean reward, the share of the KEEP contents' words found in the message they keep, and seconds per
question, each with a bootstrap CI over questions. A failed call is counted and left out, never scored.
Writes replies.jsonl (one line per window), construction.json and construction.md; the rows of Table 3
(mini) in task=report come from construction.json.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict

from lazymem.construct.accuracy import action_reward, category_accuracy, copied_words
from lazymem.construct.decisions import check_decisions
from lazymem.eval.summary import summary, write_summary
from lazymem.llm.llm_set import build_llms, role_config
from lazymem.numeric import bootstrap_ci
from lazymem.preflight import require_placement
from lazymem.prompts import load
from lazymem.tasks.build_rl import val_prompts
from lazymem.tasks.contract import Task

log = logging.getLogger(__name__)

METRICS = ("format_ok", "gold_kept", "nongold_dropped", "f1", "reward", "kept_words_in_source", "seconds")
COUNTS = ("tp", "fp", "fn", "dropped", "nongold", "words_found", "words_kept")


def score(gold: list[bool], reply: str, eta: float, texts: list[str]) -> dict:
    """One window's counts and reward from the raw reply (strict gate, no salvage); `texts`: its messages."""
    gate = check_decisions(reply, len(gold))
    ops = [d.op for d in gate.decisions] if gate.ok else [""] * len(gold)
    found, words = copied_words(gate.decisions, texts) if gate.ok else (0, 0)
    a_gold, a_nongold = category_accuracy(gold, ops)
    pairs = list(zip(gold, ops, strict=True))
    return {
        "format_ok": float(gate.ok),
        "gate_error": gate.error,
        "tp": sum(g and op == "KEEP" for g, op in pairs),  # gold kept
        "fn": sum(g and op != "KEEP" for g, op in pairs),  # gold not kept (dropped, or no valid reply)
        "fp": sum(not g and op == "KEEP" for g, op in pairs),  # non-gold kept
        "dropped": sum(not g and op == "DROP" for g, op in pairs),  # non-gold dropped
        "nongold": sum(not g for g in gold),
        "words_found": found,  # words of the KEEP contents found in the message each keeps
        "words_kept": words,  # words of the KEEP contents
        "reward": action_reward(a_gold, a_nongold, eta) if gate.ok else 0.0,
    }


def per_question(rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """Each question's metrics over its windows (gold kept etc. pooled over its messages)."""
    by_q: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_q[r["question_id"]].append(r)
    out = {}
    for q, rs in by_q.items():
        tp, fp, fn, dropped, nongold, found, words = (sum(r[k] for r in rs) for k in COUNTS)
        out[q] = {
            "format_ok": sum(r["format_ok"] for r in rs) / len(rs),
            "gold_kept": tp / (tp + fn) if tp + fn else None,
            "nongold_dropped": dropped / nongold if nongold else None,
            "f1": 2 * tp / (2 * tp + fp + fn) if tp + fn else None,
            "reward": sum(r["reward"] for r in rs) / len(rs),
            "kept_words_in_source": found / words if words else None,
            "seconds": sum(r["seconds"] for r in rs),
        }
    return out


def aggregate(rows: list[dict]) -> dict:
    """Every metric's mean over questions with a bootstrap CI (questions without gold leave out the gold
    metrics), and the pooled counts."""
    questions = per_question(rows)
    out = {m: bootstrap_ci([v[m] for v in questions.values() if v[m] is not None]) for m in METRICS}
    out["counts"] = {k: sum(r[k] for r in rows) for k in COUNTS}
    out["windows"], out["questions"] = len(rows), len(questions)
    return out


async def answer(policy, items, version: str, decoding: dict) -> list:
    return await asyncio.gather(*(policy.chat(it.chat, prompt_version=version, **decoding) for it in items))


def run(cfg, run) -> dict:
    if not role_config(cfg.llm, "memory").get("model"):
        raise SystemExit("error: no memory model: pass llm.roles.memory.model=<a model directory or GGUF>")
    require_placement(cfg, ["memory"])
    opts = cfg.construction
    items = val_prompts(cfg, run)
    version = f"{load(cfg.prompts.memory_system).version}-{load(cfg.prompts.memory_user).version}"
    decoding = {"temperature": 0.0, "max_tokens": int(opts.max_tokens)}
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        policy = llms["memory"]
        asyncio.run(answer(policy, items[:1], version, decoding))  # the server's start is not timed
        t0 = time.perf_counter()
        replies = asyncio.run(answer(policy, items, version, decoding))
        wall = time.perf_counter() - t0
        stats = llms.stats()
    rows, errors = [], 0
    with open(run.dir / "replies.jsonl", "w", encoding="utf-8") as f:
        for it, reply in zip(items, replies, strict=True):
            line = {"question_id": it.question.id, "window": list(it.window.idx), "gold": list(it.gold)}
            line |= {"reply": reply.generated, "error": reply.error, "seconds": reply.latency_s}
            if reply.error:
                errors += 1
                log.warning("question %s window %s: %s", it.question.id, it.window.idx, reply.error)
            else:
                line |= score(list(it.gold), reply.generated, float(opts.eta), [m.text for m in it.messages])
                rows.append(line)
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    result = {"model": str(role_config(cfg.llm, "memory")["model"]), "stage": cfg.get("stage")}
    result |= aggregate(rows) | {"call_errors": errors, "wall_seconds": round(wall, 1)}
    (run.dir / "construction.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    md = render([result])
    (run.dir / "construction.md").write_text(md + "\n", encoding="utf-8")
    write_summary(run.dir, summary(cfg.task, llm=stats, tables={"construction": result}))
    print("\n" + md)
    return {m: result[m]["mean"] for m in METRICS} | {"call_errors": errors}


def cell(ci: dict) -> str:
    if ci["mean"] is None:
        return "-"
    return f"{ci['mean']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def render(results: list[dict]) -> str:
    """One row per evaluated model (its stage, else its path): each metric with its 95% CI."""
    head = "| stage | format ok | gold kept | non-gold dropped | F1 | reward | kept words in source | "
    head += "s / question | windows |"
    lines = [head, "|---|---|---|---|---|---|---|---|---:|"]
    for r in results:
        name = r.get("stage") or r["model"]
        cells = " | ".join(cell(r[m]) for m in METRICS)
        lines.append(f"| {name} | {cells} | {r['windows']} |")
    return "\n".join(lines)


TASK = Task(run)
