"""task=build_rl: VERL parquet prompts for GRPO (paper Section 4.1, Appendix D.2).

train.parquet: every (query, window) of the train split, balanced 50/50 gold-bearing vs not to
`train.grpo.data.size`. val.parquet: every window of the val split, unbalanced by default (the
validation format rate drives the curriculum, so it should see the natural mix). Also rl_stats.json.
No LLM is needed: only retrieval and windowing.
"""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.data import load_dataset
from lazymem.methods.base import query_time
from lazymem.prompts import load
from lazymem.train import rl_data
from lazymem.train.sft_data import window_items

log = logging.getLogger(__name__)


def split_pool(cfg, split: str, retriever, processor, opts, run):
    data = OmegaConf.merge(cfg.data, {"split": split, "limit": None})
    ds = load_dataset(data)
    run.meta.add_dataset(ds.source)
    items = window_items(
        ds, ds.questions, retriever, processor, int(opts.radius), int(opts.max_len), int(opts.stride)
    )
    times = {q.id: query_time(q, ds.history(q)) for q in ds.questions}
    return items, times


def run(cfg, run) -> dict:
    opts = cfg.train.grpo.data
    retriever = instantiate(cfg.retrieval)
    # Only the prompt builder is used; no client, so no model server starts.
    processor = MemoryProcessor(
        None, load(cfg.prompts.memory_system), load(cfg.prompts.memory_user), InvalidPolicy()
    )
    stats = {}
    for split, name, balanced in (("train", "train", True), ("val", "val", bool(opts.balance_val))):
        pool, times = split_pool(cfg, split, retriever, processor, opts, run)
        stats[name] = {"pool": rl_data.pool_stats(pool)}
        if balanced:
            size = int(opts.size if name == "train" else opts.val_size)
            pool, info = rl_data.balance_pool(pool, size, int(opts.seed))
            stats[name]["balanced"] = info
            if info["short_of_nongold"]:
                log.warning("%s: only %d non-gold windows for %d requested", name, info["non_gold"], size)
        table = pa.Table.from_pylist(rl_data.rows(pool, name, times))
        path = run.dir / f"{name}.parquet"
        pq.write_table(table, path)
        stats[name]["rows"] = table.num_rows
        stats[name]["path"] = str(path.resolve())
    (run.dir / "rl_stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    log.info("RL data: %s", json.dumps(stats))
    print(f"RL data: train {stats['train']['rows']} rows, val {stats['val']['rows']} rows -> {run.dir}")
    return stats
