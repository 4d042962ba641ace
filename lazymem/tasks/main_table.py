"""task=main_table: every configured method on every configured benchmark (paper Tables 1, 7, 8).

    python -m lazymem.run +experiment=main_table        # the paper's models on GPUs (vLLM)
    python -m lazymem.run +experiment=main_table_cpu    # the same table with the bundled CPU models

`benchmarks` maps a name to a data config (one set to null is left out). Model servers, retrieval indexes
and embeddings are shared by all benchmarks and methods of the job. Each benchmark gets a subdirectory with
its records.jsonl and results.md; at the top, summary.json holds every benchmark (eval/summary.py), and
results.md and one CSV per table hold Tables 1, 7 and 8 with the paper's numbers beside ours (the same
tables task=report builds, lazymem/report/tables.py). The latency protocol's passes run only on the
benchmarks `latency.benchmarks` names (Table 8 is LongMemEval only); the others get one pass.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from lazymem.data import load_dataset
from lazymem.eval.summary import summary, write_summary
from lazymem.llm.llm_set import build_llms
from lazymem.preflight import require
from lazymem.report.collect import load_run, rows
from lazymem.report.tables import build_tables, write_tables
from lazymem.tasks.contract import Task
from lazymem.tasks.evaluate import build_methods, build_retriever, evaluate, latency_passes


def run(cfg, run) -> dict:
    methods = build_methods(cfg)
    chosen = {name: data for name, data in cfg.benchmarks.items() if data is not None}
    require(cfg, methods, {name: OmegaConf.to_container(data, resolve=True) for name, data in chosen.items()})
    retriever = build_retriever(cfg, methods)
    benchmarks = {}
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        for name, data in chosen.items():
            ds = load_dataset(data)
            run.meta.add_dataset(ds.source)
            out = run.dir / name
            out.mkdir(exist_ok=True)
            track = run.tracker.on_record(name)
            passes = latency_passes(cfg, name)  # the timed passes only where a table reports latency
            benchmarks[name] = evaluate(cfg, ds, methods, retriever, llms, out, data, track, passes)
        result = summary(cfg.task, benchmarks, llms.stats())
    write_summary(run.dir, result)
    tables = build_tables(rows([load_run(run.dir)]))
    print("\n" + write_tables(tables, run.dir, "results.md", "Main table"))
    return result


TASK = Task(run)
