"""task=perturbation: controlled memory perturbations (paper Appendix E.1, Table 12).

Per question: retrieve the local context (top-n expanded by w), build every perturbed memory
(lazymem/eval/perturbed_memories.py), answer each with the answer role and judge it with the judge role,
exactly as task=evaluate does. Writes records.jsonl (one line per memory; `resume=true` continues a run),
summary.json (eval/summary.py: Table 12's numbers under tables.perturbation), and Table 12 with the paper's
numbers beside ours as table12.md and table12_ours.csv (task=report renders it again from summary.json).
Questions without gold evidence have nothing to perturb and are skipped (counted in the summary).
"""

from __future__ import annotations

import asyncio
import logging

from hydra.utils import instantiate
from tqdm import tqdm

from lazymem.construct.processor import StageError
from lazymem.construct.windows import expanded_indices
from lazymem.data import load_dataset
from lazymem.data.schema import query_time
from lazymem.eval import perturbed_memories as perturb
from lazymem.eval.judge import Judge, contains_reference
from lazymem.eval.pipeline import Answerer
from lazymem.eval.records import Records, read_records
from lazymem.eval.summary import summary, write_summary
from lazymem.llm.llm_set import build_llms
from lazymem.preflight import require
from lazymem.prompts import load
from lazymem.report.ablation_tables import table12
from lazymem.report.tables import load_references, write_tables
from lazymem.tasks.contract import Task
from lazymem.tokens import count_tokens

log = logging.getLogger(__name__)


def run(cfg, run) -> dict:
    opts = cfg.perturbation
    ds = load_dataset(cfg.data)
    run.meta.add_dataset(ds.source)
    require(cfg, [], {})
    retriever = instantiate(cfg.retrieval)
    names = perturb.variant_names(list(opts.add))
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        prompts = cfg.prompts
        answerer = Answerer(
            llms["answer"],
            load(prompts.answer_system),
            load(prompts.answer_compressed),
            load(prompts.answer_raw),
        )
        judge = Judge.from_config(llms["judge"], cfg.data)
        records = Records(run.dir / "records.jsonl", resume=cfg.resume)
        skipped = asyncio.run(_loop(cfg, ds, retriever, answerer, judge, records))
        table = perturb.summarize(read_records(records.path), names, int(opts.resamples), int(opts.seed))
        found = table | {"dataset": ds.source.get("name"), "judge": judge.identity}
        found["questions_without_gold"] = skipped
        write_summary(run.dir, summary(cfg.task, llm=llms.stats(), tables={"perturbation": found}))
    md = write_tables([table12("ours", table, load_references())], run.dir, "table12.md", "Table 12")
    print("\n" + md)
    return {"questions": table["questions"], "errors": table["errors"]}


async def _loop(cfg, ds, retriever, answerer, judge, records: Records) -> int:
    """Questions one after another; the memories of one question concurrently (bounded by the roles)."""
    opts, skipped = cfg.perturbation, 0
    for q in tqdm(ds.questions, desc="perturbation", unit="q", dynamic_ncols=True):
        if not q.gold_idx:
            skipped += 1
            continue
        history = ds.history(q)
        retrieved = retriever.search(history, q.text).indices
        pool = expanded_indices(retrieved, len(history.messages), int(cfg.w))
        todo = [
            v
            for v in perturb.variants(
                q.gold_idx, pool, list(opts.add), int(opts.samples), f"{opts.seed}:{q.id}"
            )
            if not records.done(v.key, q.id)
        ]
        for record in await asyncio.gather(*(_one(q, history, v, answerer, judge) for v in todo)):
            records.append(record)
            if record["status"] != "ok":
                log.warning("%s %s: %s", record["method"], q.id, record["error"])
    return skipped


async def _one(question, history, variant: perturb.Variant, answerer: Answerer, judge: Judge) -> dict:
    memory = variant.memory(history)
    when = query_time(question, history)
    prompt = answerer.messages(question, history, memory)
    record = {
        "qid": question.id,
        "method": variant.key,
        "variant": variant.name,
        "sample": variant.sample,
        "type": question.type,
        "abstention": question.abstention,
        "question": question.text,
        "reference": question.answer,
        "query_time": when,
        "gold_idx": list(question.gold_idx),
        "shown": memory.shown,
        "memory": memory.text,
        "memory_tokens": count_tokens(memory.text),
        # the answer model's whole input (its system prompt and the user turn), as Table 12's Tok.
        "input_tokens": sum(count_tokens(m["content"]) for m in prompt),
    }
    try:
        answer, thinking, _ = await answerer(question, history, memory)
        correct, judge_raw, _ = await judge(question, answer)
    except StageError as e:
        return record | {"status": "error", "error": str(e)}
    return record | {
        "answer": answer,
        "answer_thinking": thinking,
        "correct": correct,
        "judge_raw": judge_raw,
        "contains_reference": contains_reference(question, answer),
        "status": "ok",
        "error": None,
    }


TASK = Task(run)
