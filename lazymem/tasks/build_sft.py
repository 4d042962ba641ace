"""task=build_sft: teacher-annotated SFT data and the LLaMA-Factory files (paper Section 3.3, D.2).

Writes dataset_info.json + lazymem_sft.json (sharegpt), sft.yaml, ds_z2_config.json, sft_stats.json and
annotations.jsonl (every kept window before balancing, for inspection). sft_stats.json gives the targets'
length percentiles in tokens; a p95 above GRPO's response cap is a warning. With `val_questions`, the
validation split is annotated the same way into lazymem_sft_val.json, and sft.yaml has LLaMA-Factory keep
the epoch checkpoint with the lowest validation loss (App. D.1). Run with +experiment=build_sft.

The teacher is `train.sft.teacher` (lazymem/train/sft_teachers.py): the LLM role llm.roles.teacher (the
paper's), or with train.sft.teacher=gold the questions' evidence labels, which call no LLM: then no server
starts and the preflight asks for no teacher role.
"""

from __future__ import annotations

import asyncio
import json
import logging

import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.construct.processor import InvalidPolicy, MemoryProcessor
from lazymem.data import load_dataset, split_data
from lazymem.llm.llm_set import build_llms
from lazymem.preflight import data_problems, require_placement, role_problems, stop
from lazymem.prompts import load
from lazymem.tasks.contract import Task
from lazymem.tokens import count_tokens
from lazymem.train import sft_data as sd
from lazymem.train.sft_config import DS_Z2, sft_yaml

log = logging.getLogger(__name__)


def write_json(path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def annotated_split(cfg, split: str, n_questions: int, retriever, processor, teacher, llms, run):
    """Sample, window, annotate and balance one split: (statistics, balanced annotations, kept ones).
    `teacher`: an SftTeacher (lazymem/train/sft_teachers.py), calling its roles in `llms`."""
    sft = cfg.train.sft
    ds = load_dataset(split_data(cfg.data, split, sft.split_paths[split]))
    run.meta.add_dataset(ds.source)
    questions = sd.stratified_sample(ds.questions, n_questions, int(sft.seed))
    items = sd.window_items(
        ds, questions, retriever, processor, int(sft.radius), int(sft.max_len), int(sft.stride)
    )
    log.info("%s: %d questions -> %d windows to annotate", split, len(questions), len(items))
    kept, discards, codes = asyncio.run(
        teacher.annotate(items, processor.prompt_version, bool(sft.with_reasoning), llms)
    )
    balanced, info = sd.balance(kept, int(sft.seed)) if sft.balance else (kept, {})
    cap = int(sft.grpo_response_cap)
    return sd.stats(items, kept, balanced, discards, codes, info, count_tokens, cap), balanced, kept


def problems(cfg) -> list[str]:
    """The data, the teacher and the retrieval, checked before a chain starts (lazymem/chain/preflight.py).
    Only the LLM roles the teacher calls are checked (none for train.sft.teacher=gold)."""
    teacher = instantiate(cfg.train.sft.teacher)
    own = teacher.problems(bool(cfg.train.sft.with_reasoning))
    return data_problems(cfg) + own + role_problems(cfg, list(teacher.roles))


def run(cfg, run) -> dict:
    sft = cfg.train.sft
    teacher = instantiate(sft.teacher)
    stop(teacher.problems(bool(sft.with_reasoning)))
    require_placement(cfg, list(teacher.roles))
    retriever = instantiate(cfg.retrieval)
    system, user = load(cfg.prompts.memory_system), load(cfg.prompts.memory_user)
    with build_llms(cfg.llm, run.dir / "servers") as llms:  # servers start on a role's first use
        for role in teacher.roles:
            llms[role]  # the teacher's server starts now, before any retrieval work
        # the memory model's prompts for the windows; the processor itself calls no LLM here
        processor = MemoryProcessor(None, system, user, InvalidPolicy())
        args = (retriever, processor, teacher, llms, run)
        result, balanced, kept = annotated_split(cfg, "train", int(sft.n_questions), *args)
        val = annotated_split(cfg, "val", int(sft.val_questions), *args) if sft.val_questions else None
    out = run.dir
    with open(out / "annotations.jsonl", "w", encoding="utf-8") as f:
        for a in kept:
            f.write(json.dumps(sd.sharegpt_record(a), ensure_ascii=False) + "\n")
    write_json(out / f"{sd.DATASET_NAME}.json", [sd.sharegpt_record(a) for a in balanced])
    names = [sd.DATASET_NAME]
    if val is not None:
        result["val"] = val[0]
        if val[1]:
            write_json(out / f"{sd.VAL_DATASET_NAME}.json", [sd.sharegpt_record(a) for a in val[1]])
            names.append(sd.VAL_DATASET_NAME)
        else:
            log.warning("no validation instance survived: sft.yaml trains without checkpoint choice")
    write_json(out / "dataset_info.json", sd.dataset_info(*names))
    write_json(out / "ds_z2_config.json", DS_Z2)
    options = OmegaConf.to_container(sft, resolve=True)
    options["output_dir"] = options.get("output_dir") or str((out / "sft_model").resolve())
    eval_dataset = sd.VAL_DATASET_NAME if len(names) > 1 else None
    train_yaml = sft_yaml(
        options, out.resolve(), (out / "ds_z2_config.json").resolve(), sft.with_reasoning, eval_dataset
    )
    (out / "sft.yaml").write_text(yaml.safe_dump(train_yaml, sort_keys=False), encoding="utf-8")
    write_json(out / "sft_stats.json", result)
    log.info("SFT data: %s", json.dumps(result))
    if (why := sd.long_targets(result["target_tokens"])) is not None:
        log.warning(why)
    if not balanced:
        log.warning("no SFT instance survived; see sft_stats.json for the discard reasons")
    print(f"SFT: {result['balanced']} instances -> {out}/sft.yaml  (llamafactory-cli train sft.yaml)")
    return result


TASK = Task(run, problems=problems, training_files=("annotations.jsonl", "lazymem_sft*.json"))
