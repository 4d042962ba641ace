"""task=build_rl: VERL parquet prompts for GRPO (paper Section 4.1, Appendix D.2, E.1, E.2).

train.parquet: every (query, window) of the train split, balanced 50/50 gold-bearing vs not to
`train.grpo.data.size`. val.parquet: the validation split built the same way, each gold-bearing window once
plus as many gold-free ones (`balance_val`; the paper's has 218 prompts). Each row carries its question's
referenced reasoning chain for the quality judge, written by llm.roles.teacher (`reasoning_chains`).
Also rl_stats.json. Each split comes from data.path or from its own file (`split_paths`).
"""

from __future__ import annotations

import asyncio
import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
from hydra.utils import instantiate

from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.data import load_dataset, split_data
from lazymem.data.schema import query_time
from lazymem.llm.llm_set import build_llms
from lazymem.preflight import data_problems, require_placement, role_problems
from lazymem.prompts import load
from lazymem.tasks.contract import Task
from lazymem.train.grpo import rl_data
from lazymem.train.grpo.reasoning_chain import reasoning_chains
from lazymem.train.sft_data import window_items

log = logging.getLogger(__name__)


def split_windows(cfg, split: str, retriever, processor, opts, run):
    """(dataset, every (query, window) item, query times) of one split."""
    ds = load_dataset(split_data(cfg.data, split, opts.split_paths[split]))
    run.meta.add_dataset(ds.source)
    items = window_items(
        ds, ds.questions, retriever, processor, int(opts.radius), int(opts.max_len), int(opts.stride)
    )
    times = {q.id: query_time(q, ds.history(q)) for q in ds.questions}
    return ds, items, times


def split_pool(cfg, split: str, retriever, processor, opts, run):
    """(every (query, window) item, query times) of one split."""
    return split_windows(cfg, split, retriever, processor, opts, run)[1:]


def val_set(pool, opts) -> tuple[list, dict | None]:
    """The validation prompts as val.parquet holds them, and the balancing counts (None: unbalanced)."""
    out, info = (list(pool), None) if not opts.balance_val else rl_data.pair_pool(pool, int(opts.seed))
    if opts.val_size is not None and len(out) > int(opts.val_size):
        out = rl_data.cap_pool(out, int(opts.val_size))
        info = {**(info or {}), "capped_to": len(out)}
    return out, info


def val_prompts(cfg, run) -> list:
    """The validation prompts (WindowItems) exactly as val.parquet holds them, without writing anything."""
    opts = cfg.train.grpo.data
    retriever = instantiate(cfg.retrieval)
    processor = MemoryProcessor(
        None, load(cfg.prompts.memory_system), load(cfg.prompts.memory_user), InvalidPolicy()
    )
    pool, _ = split_pool(cfg, "val", retriever, processor, opts, run)
    return val_set(pool, opts)[0]


def chains_for(cfg, ds, pool, llms) -> tuple[dict, dict]:
    """The referenced reasoning chain of every question with a prompt in `pool` (none when switched off)."""
    opts = cfg.train.grpo.data
    used = {it.question.id for it in pool}
    questions = [q for q in ds.questions if q.id in used]
    if not opts.reasoning_chains:
        return {}, {"questions": len(questions), "written": 0, "failed": 0, "off": True}
    system, user = load(opts.chain_prompts.system), load(opts.chain_prompts.user)
    return asyncio.run(reasoning_chains(llms["teacher"], ds, questions, system, user))


def problems(cfg) -> list[str]:
    """The data, the chain writer (the teacher) and the retrieval, checked before a chain starts
    (lazymem/chain/preflight.py)."""
    return data_problems(cfg) + role_problems(
        cfg, ["teacher"] if cfg.train.grpo.data.reasoning_chains else []
    )


def run(cfg, run) -> dict:
    opts = cfg.train.grpo.data
    require_placement(cfg, ["teacher"] if opts.reasoning_chains else [])
    retriever = instantiate(cfg.retrieval)
    # Only the prompt builder is used; no client, so no model server starts.
    processor = MemoryProcessor(
        None, load(cfg.prompts.memory_system), load(cfg.prompts.memory_user), InvalidPolicy()
    )
    stats = {}
    with build_llms(cfg.llm, run.dir / "servers") as llms:  # a server starts only if a chain is asked for
        for name in ("train", "val"):
            ds, pool, times = split_windows(cfg, name, retriever, processor, opts, run)
            pool, too_long = rl_data.fit_prompts(pool, int(cfg.train.grpo.max_prompt_length))
            stats[name] = {"pool": rl_data.pool_stats(pool), "too_long": too_long}
            if too_long:
                log.warning("%s: %d windows longer than max_prompt_length left out", name, too_long)
            if name == "train":
                pool, info = rl_data.balance_pool(pool, int(opts.size), int(opts.seed))
            else:
                pool, info = val_set(pool, opts)
            if info is not None:
                stats[name]["balanced"] = info
                if info.get("short_of_nongold"):
                    log.warning("%s: only %d non-gold windows for a balanced set", name, info["non_gold"])
                if info.get("no_gold_windows"):
                    log.warning("%s: no window holds gold evidence: the prompts cannot be balanced", name)
            chains, stats[name]["reasoning_chains"] = chains_for(cfg, ds, pool, llms)
            table = pa.Table.from_pylist(rl_data.rows(pool, name, times, chains))
            path = run.dir / f"{name}.parquet"
            pq.write_table(table, path)
            stats[name]["rows"] = table.num_rows
            stats[name]["path"] = str(path.resolve())
    (run.dir / "rl_stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    log.info("RL data: %s", json.dumps(stats))
    print(f"RL data: train {stats['train']['rows']} rows, val {stats['val']['rows']} rows -> {run.dir}")
    return stats


TASK = Task(run, problems=problems, training_files=("*.parquet",))
