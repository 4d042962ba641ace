"""task=evaluate: every configured method over the selected questions, through real model servers.

Writes records.jsonl (one line per method and question, appended as each finishes), summary.json
(per method) and results.md. Questions run one after another (the paper's latency protocol); the
windows of a question run concurrently. `resume=true` continues a run in the same directory.
"""

from __future__ import annotations

import asyncio
import json
import logging

from hydra.utils import instantiate
from omegaconf import OmegaConf
from tqdm import tqdm

from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.data import load_dataset
from lazymem.eval.judge import JudgePrompts, style_for
from lazymem.eval.metrics import summarize
from lazymem.eval.pipeline import Answerer, Judge, evaluate_question
from lazymem.eval.records import Records, read_records
from lazymem.eval.results import render_results
from lazymem.llm.roles import build_llms
from lazymem.methods.base import Context
from lazymem.preflight import require
from lazymem.prompts import load

log = logging.getLogger(__name__)


def build_methods(cfg) -> list:
    specs = cfg.get("methods") or {cfg.method.name: cfg.method}
    methods = [instantiate(spec) for spec in specs.values()]
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")
    return methods


def build_retriever(cfg, methods):
    needs = any(getattr(m, "needs_retrieval", False) for m in methods)
    return instantiate(cfg.retrieval) if needs else None


def run(cfg, run) -> dict:
    ds = load_dataset(cfg.data)
    run.meta.add_dataset(ds.source)
    methods = build_methods(cfg)
    require(cfg, methods, {})  # the data loader checks its own file
    retriever = build_retriever(cfg, methods)
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        summary = evaluate(cfg, ds, methods, retriever, llms, run.dir)
    print("\n" + render_results(summary))
    return summary


def evaluate(cfg, ds, methods, retriever, llms, out_dir) -> dict:
    """Every method over `ds`; writes records.jsonl, summary.json and results.md into out_dir."""
    prompts = cfg.prompts
    roles = sorted({m.processor for m in methods if hasattr(m, "processor")})
    policy = InvalidPolicy(**OmegaConf.to_container(cfg.construct.invalid))
    processors = {
        role: MemoryProcessor(llms[role], load(prompts.memory_system), load(prompts.memory_user), policy)
        for role in roles
    }
    ctx = Context(retriever, llms, processors, dataset_name=ds.name)
    answerer = Answerer(
        llms["answer"], load(prompts.answer_system), load(prompts.answer_compressed), load(prompts.answer_raw)
    )
    judge = Judge(
        llms["judge"],
        JudgePrompts(prompts.judge_longmemeval, prompts.judge_rules, prompts.judge_locomo),
        style_for(ds.name, cfg.judge.style),
    )
    records = Records(out_dir / "records.jsonl", resume=cfg.resume)
    latency = cfg.latency
    if (latency.warmup or latency.repeats > 1) and OmegaConf.select(cfg, "llm.cache"):
        log.warning(
            "latency.warmup/repeats with llm.cache=true: repeated calls are cache hits, set llm.cache=false"
        )
    asyncio.run(_loop(ds, methods, ctx, answerer, judge, records, latency.warmup, latency.repeats))
    written = read_records(records.path)
    summary = {
        "dataset": ds.source.get("name"),
        "methods": {m.name: summarize([r for r in written if r["method"] == m.name]) for m in methods},
        "llm": llms.stats(),
        "resume_dropped": records.dropped,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "results.md").write_text(render_results(summary) + "\n")
    return summary


async def _loop(ds, methods, ctx, answerer, judge, records: Records, warmup: int = 0, repeats: int = 1):
    """Questions strictly one after another (the paper's latency protocol, Appendix C.2).

    `warmup` question runs per method come first and are discarded; each question then runs `repeats`
    times: the first run's outputs are recorded, the stage latencies of every run in `latency_runs`.
    """
    for method in methods:
        todo = [q for q in ds.questions if not records.done(method.name, q.id)]
        for q in todo[:warmup]:
            await evaluate_question(q, ds.history(q), method, ctx, answerer, judge)
        bar = tqdm(todo, desc=f"{method.name:>14}", unit="q", dynamic_ncols=True)
        for q in bar:
            runs = [
                await evaluate_question(q, ds.history(q), method, ctx, answerer, judge)
                for _ in range(repeats)
            ]
            record = runs[0]
            if repeats > 1 and record["status"] == "ok":
                record["latency_runs"] = [r["latency_s"] for r in runs if r["status"] == "ok"]
            records.append(record)
            if record["status"] != "ok":
                log.warning("%s %s: %s", method.name, q.id, record["error"])
            bar.set_postfix_str(_postfix(record))


def _postfix(record: dict) -> str:
    if record["status"] != "ok":
        return "error"
    lat = record["latency_s"]
    return " ".join(f"{k}={v:.1f}s" for k, v in lat.items() if k != "total")
