"""task=build_sft: teacher-annotated SFT data and the LLaMA-Factory files (paper Section 3.3, D.2).

Writes dataset_info.json + lazymem_sft.json (sharegpt), sft.yaml, ds_z2_config.json, sft_stats.json and
annotations.jsonl (every kept window before balancing, for inspection). Run with +experiment=build_sft.
"""

from __future__ import annotations

import asyncio
import json
import logging

import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.data import load_dataset
from lazymem.llm.roles import build_llms
from lazymem.prompts import load
from lazymem.tokens import count_tokens
from lazymem.train import sft_data as sd
from lazymem.train.sft_config import DS_Z2, sft_yaml

log = logging.getLogger(__name__)


def write_json(path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def run(cfg, run) -> dict:
    sft = cfg.train.sft
    ds = load_dataset(cfg.data)
    run.meta.add_dataset(ds.source)
    questions = sd.stratified_sample(ds.questions, int(sft.n_questions), int(sft.seed))
    retriever = instantiate(cfg.retrieval)
    system, user = load(cfg.prompts.memory_system), load(cfg.prompts.memory_user)
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        teacher = llms["teacher"]
        processor = MemoryProcessor(teacher, system, user, InvalidPolicy())
        items = sd.window_items(
            ds, questions, retriever, processor, int(sft.radius), int(sft.max_len), int(sft.stride)
        )
        log.info("%d questions -> %d windows to annotate", len(questions), len(items))
        kept, discards, codes = asyncio.run(
            sd.annotate(teacher, items, processor.prompt_version, bool(sft.with_reasoning))
        )
    if sft.balance:
        balanced, info = sd.balance(kept, int(sft.seed))
    else:
        balanced, info = kept, {}
    out = run.dir
    with open(out / "annotations.jsonl", "w", encoding="utf-8") as f:
        for a in kept:
            f.write(json.dumps(sd.sharegpt_record(a), ensure_ascii=False) + "\n")
    write_json(out / f"{sd.DATASET_NAME}.json", [sd.sharegpt_record(a) for a in balanced])
    write_json(out / "dataset_info.json", sd.DATASET_INFO)
    write_json(out / "ds_z2_config.json", DS_Z2)
    options = OmegaConf.to_container(sft, resolve=True)
    options["output_dir"] = options.get("output_dir") or str((out / "sft_model").resolve())
    train_yaml = sft_yaml(options, out.resolve(), (out / "ds_z2_config.json").resolve(), sft.with_reasoning)
    (out / "sft.yaml").write_text(yaml.safe_dump(train_yaml, sort_keys=False), encoding="utf-8")
    result = sd.stats(items, kept, balanced, discards, codes, info, count_tokens)
    write_json(out / "sft_stats.json", result)
    log.info("SFT data: %s", json.dumps(result))
    if not balanced:
        log.warning("no SFT instance survived; see sft_stats.json for the discard reasons")
    print(f"SFT: {result['balanced']} instances -> {out}/sft.yaml  (llamafactory-cli train sft.yaml)")
    return result
