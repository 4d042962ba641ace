"""task=evaluate: every configured method over the selected questions, through real model servers.

Writes records.jsonl (one line per method and question, appended as each finishes), summary.json
(eval/summary.py: per method, under the benchmark's name) and results.md. Questions run one after another
(the paper's latency protocol); the windows of a question run concurrently. `resume=true` continues a
run in the same directory.
"""

from __future__ import annotations

import asyncio
import logging

from hydra.utils import instantiate
from omegaconf import OmegaConf
from tqdm import tqdm

from lazymem.data import load_dataset
from lazymem.eval.judge import Judge
from lazymem.eval.latency import LatencyRuns
from lazymem.eval.metrics import summarize
from lazymem.eval.pipeline import Answerer, evaluate_question
from lazymem.eval.records import Records, read_records
from lazymem.eval.results import render_results
from lazymem.eval.summary import BenchmarkSummary, summary, write_summary
from lazymem.llm.llm_set import build_llms
from lazymem.methods.base import Context, Method
from lazymem.preflight import data_problems, require
from lazymem.preflight import problems as preflight_problems
from lazymem.prompts import load
from lazymem.tasks.contract import Task

log = logging.getLogger(__name__)


def build_methods(cfg) -> list[Method]:
    specs = cfg.get("methods") or {cfg.method.name: cfg.method}
    methods = [instantiate(spec) for spec in specs.values()]
    for key, method in zip(specs, methods, strict=True):
        if not isinstance(method, Method):
            raise TypeError(
                f"method {key!r} ({type(method).__name__}) lacks what lazymem.methods.base.Method declares: "
                "name, roles, needs_retrieval and async build(question, history, ctx)"
            )
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")
    return methods


def problems(cfg) -> list[str]:
    """What preflight would stop this job on (models, keys, environments, GPUs) and its data file, checked
    before a chain starts (lazymem/chain/preflight.py)."""
    return data_problems(cfg) + preflight_problems(cfg, build_methods(cfg), {})


def build_retriever(cfg, methods: list[Method]):
    return instantiate(cfg.retrieval) if any(m.needs_retrieval for m in methods) else None


def run(cfg, run) -> dict:
    ds = load_dataset(cfg.data)
    run.meta.add_dataset(ds.source)
    methods = build_methods(cfg)
    require(cfg, methods, {})  # the data loader checks its own file
    retriever = build_retriever(cfg, methods)
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        bench = evaluate(cfg, ds, methods, retriever, llms, run.dir, on_record=run.tracker.on_record(ds.name))
        result = summary(cfg.task, {ds.name: bench}, llms.stats())
    write_summary(run.dir, result)
    print("\n" + render_results(bench, result["llm"]))
    return result


def latency_passes(cfg, benchmark: str) -> tuple[int, int]:
    """(warm-up passes, timed passes) for one benchmark: the latency protocol's `latency.warmup` and
    `latency.repeats` where a table reports its latency, else one pass (the evaluation itself).
    `latency.benchmarks` names those benchmarks (main_table: Table 8 is LongMemEval only); unset, all."""
    timed = OmegaConf.select(cfg, "latency.benchmarks")
    if timed is not None and benchmark not in timed:
        return 0, 1
    return int(cfg.latency.warmup), int(cfg.latency.repeats)


def evaluate(
    cfg, ds, methods, retriever, llms, out_dir, data=None, on_record=None, passes=None
) -> BenchmarkSummary:
    """Every method over `ds`; writes records.jsonl and results.md into out_dir, returns the summary of
    this benchmark (the task writes summary.json).

    `data` is the benchmark's data config (default cfg.data): it names the judge and the metrics.
    `on_record(record)` is called with each evaluated question's record as soon as it is written.
    `passes` = (warm-up, timed) passes of the latency protocol (default: `latency_passes` of `ds.name`).
    """
    prompts = cfg.prompts
    ctx = Context(retriever, llms, dataset_name=ds.name)
    answerer = Answerer(
        llms["answer"], load(prompts.answer_system), load(prompts.answer_compressed), load(prompts.answer_raw)
    )
    judge = Judge.from_config(llms["judge"], cfg.data if data is None else data)
    records = Records(out_dir / "records.jsonl", resume=cfg.resume)
    timed = LatencyRuns(out_dir / "latency_runs.jsonl")
    warmup, repeats = latency_passes(cfg, ds.name) if passes is None else passes
    if (warmup or repeats > 1) and OmegaConf.select(cfg, "llm.cache"):
        log.warning(
            "latency.warmup/repeats with llm.cache=true: repeated calls are cache hits, set llm.cache=false"
        )
    asyncio.run(_loop(ds, methods, ctx, answerer, judge, records, timed, warmup, repeats, on_record))
    written = read_records(records.path)
    for r in written:
        later = timed.of(r["method"], r["qid"])
        if later and r["status"] == "ok":
            r["latency_runs"] = [r["latency_s"], *later]
    bench: BenchmarkSummary = {
        "dataset": ds.source.get("name"),
        "judge": judge.identity,
        "methods": {m.name: summarize([r for r in written if r["method"] == m.name]) for m in methods},
        "resume_dropped": records.dropped,
    }
    (out_dir / "results.md").write_text(render_results(bench, llms.stats()) + "\n")
    return bench


async def _loop(
    ds,
    methods,
    ctx,
    answerer,
    judge,
    records: Records,
    timed: LatencyRuns,
    warmup=0,
    repeats=1,
    on_record=None,
):
    """The paper's latency protocol (Appendix C.2), per method: `warmup` full passes over the questions are
    discarded, then `repeats` timed passes. Questions run strictly one after another.

    The first timed pass is the evaluation: its records (answer, judge label) go to records.jsonl. Later
    passes only re-time each question (no judge call) into latency_runs.jsonl. Before every pass after the
    first, the job's per-question retrieval results are forgotten (`ctx.new_pass`), so no stage is served
    from an earlier pass; the LLM cache must be off for timings (warned above).
    """
    for method in methods:
        questions = ds.questions
        left = {
            (p, q.id)
            for p in range(repeats)
            for q in questions
            if not (records.done(method.name, q.id) if p == 0 else timed.done(method.name, q.id, p))
        }
        if not left:
            continue
        for p in range(warmup):
            ctx.new_pass()
            for q in tqdm(questions, desc=f"{method.name:>14} warm-up {p + 1}/{warmup}", unit="q"):
                await evaluate_question(q, ds.history(q), method, ctx, answerer, None)
        for p in range(repeats):
            if warmup or p:
                ctx.new_pass()
            todo = [q for q in questions if (p, q.id) in left]
            label = f"{method.name:>14}" + (f" pass {p + 1}/{repeats}" if repeats > 1 else "")
            bar = tqdm(todo, desc=label, unit="q", dynamic_ncols=True)
            for q in bar:
                scorer = judge if p == 0 else None  # later passes only re-time the question
                record = await evaluate_question(q, ds.history(q), method, ctx, answerer, scorer)
                if p == 0:
                    records.append(record)
                    if on_record is not None:
                        on_record(record)
                elif record["status"] == "ok":
                    timed.append(method.name, q.id, p, record["latency_s"])
                if record["status"] not in ("ok", "not_applicable"):
                    log.warning("%s %s: %s", method.name, q.id, record["error"])
                bar.set_postfix_str(_postfix(record))


def _postfix(record: dict) -> str:
    if record["status"] != "ok":
        return "error"
    lat = record["latency_s"]
    return " ".join(f"{k}={v:.1f}s" for k, v in lat.items() if k != "total")


TASK = Task(run, problems=problems)
