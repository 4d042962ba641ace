"""SFT data for the memory model (paper Section 3.3, Appendix D.2): teacher-annotated (query, window) pairs.

Questions are sampled per type, retrieved and windowed exactly as at inference, and each window is sent to
the teacher with the memory model's own prompt (or, with train.sft.teacher=gold, answered from the
question's evidence labels: lazymem/train/sft_teachers.py). A window is discarded when the call fails, the
reply fails the format gate (the same `check_decisions` the RL reward uses), or the teacher drops a gold
message. The kept windows are balanced: every window with a KEEP plus as many seeded-sampled all-DROP
windows.

GRPO caps a rollout at ``max_response_length`` tokens (Table 10: 3,072), and a rollout cut there fails the
format gate. A policy taught targets longer than the cap writes such rollouts, and the curriculum's format
rate then never reaches tau. So build_sft reports its target lengths (:func:`target_lengths`) and GRPO
refuses to start when too many of its SFT targets pass the cap (:func:`check_response_cap`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from lazymem.construct.decisions import Decision, check_decisions, decision_schema
from lazymem.construct.windows import Window, build_windows
from lazymem.data.schema import Dataset, Question, query_time
from lazymem.llm.client import json_schema_format
from lazymem.tokens import count_tokens as qwen_tokens

log = logging.getLogger(__name__)

# Gate codes that mean "no JSON value could be read"; every other code except wrong_count is a schema
# violation (paper D.2 names the three discard reasons separately).
UNPARSABLE = frozenset({"empty", "not_json", "truncated", "trailing_text"})
REASONS = ("call_error", "unparsable", "schema", "wrong_count", "dropped_gold")


def stratified_sample(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    """`n` questions, per type in proportion to the type's share (largest remainder), seeded."""
    by_type: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_type[q.type].append(q)
    total = len(questions)
    if n >= total:
        return list(questions)
    quotas = {t: n * len(qs) / total for t, qs in by_type.items()}
    counts = {t: int(v) for t, v in quotas.items()}
    # Hand the leftover seats to the largest fractional parts; ties broken by type name for determinism.
    order = sorted(by_type, key=lambda t: (-(quotas[t] - counts[t]), t))
    for t in order[: n - sum(counts.values())]:
        counts[t] += 1
    rng = random.Random(seed)
    chosen = set()
    for t in sorted(by_type):
        chosen.update(q.id for q in rng.sample(by_type[t], counts[t]))
    return [q for q in questions if q.id in chosen]


@dataclass(frozen=True)
class WindowItem:
    """One (query, window) prompt with its gold flags (gold = the question's own evidence)."""

    question: Question
    window: Window
    chat: list[dict[str, str]]
    gold: tuple[bool, ...]
    messages: tuple  # the window's Message objects, window order

    @property
    def n(self) -> int:
        return len(self.window)


def window_items(ds: Dataset, questions, retriever, processor, radius: int, max_len: int, stride: int):
    """Every window of every question, retrieved and windowed as LazyMem does at inference."""
    items = []
    for q in questions:
        history = ds.history(q)
        indices = retriever.search(history, q.text).indices
        gold = set(q.gold_idx)
        when = query_time(q, history)
        for w in build_windows(indices, len(history.messages), radius, max_len, stride):
            chat = processor.prompt(q.text, when, w, history.messages)
            msgs = tuple(history.messages[i] for i in w.idx)
            items.append(WindowItem(q, w, chat, tuple(i in gold for i in w.idx), msgs))
    return items


@dataclass(frozen=True)
class Annotation:
    item: WindowItem
    decisions: list[Decision]
    reasoning: str  # "" when the teacher gave none or reasoning is switched off

    @property
    def has_keep(self) -> bool:
        return any(d.op == "KEEP" for d in self.decisions)


def discard_reason(gate_error: str | None, decisions, gold) -> str | None:
    """Which discard reason applies (None: keep the window)."""
    if gate_error is not None:
        if gate_error == "wrong_count":
            return "wrong_count"
        return "unparsable" if gate_error in UNPARSABLE else "schema"
    if any(g and d.op != "KEEP" for g, d in zip(gold, decisions, strict=True)):
        return "dropped_gold"
    return None


def gated(item: WindowItem, generated: str, reasoning: str, with_reasoning: bool):
    """One teacher reply through the format gate and the gold check, whoever wrote it (an LLM, or the
    evidence labels: lazymem/train/sft_teachers.py): (Annotation or None, discard reason or None, gate
    error code or None)."""
    gate = check_decisions(generated, item.n)
    reason = discard_reason(gate.error, gate.decisions, item.gold)
    if reason:
        return None, reason, gate.error
    return Annotation(item, gate.decisions, reasoning.strip() if with_reasoning else ""), None, None


async def annotate_one(teacher, item: WindowItem, prompt_version: str, with_reasoning: bool):
    """(Annotation or None, discard reason or None, gate error code or None)."""
    fmt = json_schema_format(decision_schema(item.n), name="window_decisions")
    reply = await teacher.chat(item.chat, prompt_version=prompt_version, response_format=fmt)
    if reply.error:
        return None, "call_error", None
    return gated(item, reply.generated, reply.reasoning or "", with_reasoning)


async def annotate(teacher, items, prompt_version: str, with_reasoning: bool):
    """Annotations of the windows that pass, and the discard counts (by reason and by gate code)."""
    results = await asyncio.gather(
        *(annotate_one(teacher, it, prompt_version, with_reasoning) for it in items)
    )
    return tally(results)


def tally(results):
    """(kept annotations, discards by reason, discards by gate code) of `gated` results."""
    kept = [a for a, _, _ in results if a is not None]
    reasons = Counter({r: 0 for r in REASONS})
    reasons.update(r for _, r, _ in results if r)
    codes = Counter(c for _, _, c in results if c)
    return kept, dict(reasons), dict(codes)


def balance(annotations: list[Annotation], seed: int) -> tuple[list[Annotation], dict]:
    """Every window with a KEEP plus an equal number of sampled all-DROP windows (fewer if short)."""
    keep = [a for a in annotations if a.has_keep]
    drop = [a for a in annotations if not a.has_keep]
    rng = random.Random(seed)
    picked = rng.sample(drop, min(len(keep), len(drop)))
    out = keep + picked
    rng.shuffle(out)
    info = {"with_keep": len(keep), "all_drop": len(drop), "all_drop_sampled": len(picked)}
    info["short_of_drop"] = len(keep) > len(drop)
    return out, info


def decisions_json(decisions: Sequence[Decision]) -> str:
    items = [{"op": d.op, "compressed_content": d.content, "reason": d.reason} for d in decisions]
    return json.dumps(items, ensure_ascii=False)


def target_text(a: Annotation) -> str:
    """The assistant target. With reasoning: Qwen3's own layout `<think>\\nR\\n</think>\\n\\n` + JSON."""
    body = decisions_json(a.decisions)
    return f"<think>\n{a.reasoning}\n</think>\n\n{body}" if a.reasoning else body


def sharegpt_record(a: Annotation) -> dict:
    messages = [{"role": m["role"], "content": m["content"]} for m in a.item.chat]
    messages.append({"role": "assistant", "content": target_text(a)})
    return {"messages": messages, "question_id": a.item.question.id, "window": list(a.item.window.idx)}


DATASET_NAME = "lazymem_sft"
VAL_DATASET_NAME = "lazymem_sft_val"  # the validation split's instances, for checkpoint choice (App. D.1)


def dataset_info(*names: str) -> dict:
    """LLaMA-Factory's dataset_info.json for the sharegpt files `<name>.json`."""
    tags = {
        "role_tag": "role",
        "content_tag": "content",
        "user_tag": "user",
        "assistant_tag": "assistant",
        "system_tag": "system",
    }
    fmt = {"formatting": "sharegpt", "columns": {"messages": "messages"}, "tags": tags}
    return {n: {"file_name": f"{n}.json", **fmt} for n in names}


DATASET_INFO = dataset_info(DATASET_NAME)


PERCENTILES = (50, 90, 95, 99)


def target_lengths(tokens: Sequence[int], cap: int) -> dict:
    """Percentiles (nearest rank: each is a real target's length) and maximum of target lengths in tokens,
    and how many pass GRPO's response cap ``cap``."""
    ranked, n = sorted(tokens), len(tokens)
    over = sum(1 for t in ranked if t > cap)
    out: dict = {f"p{p}": ranked[math.ceil(p * n / 100) - 1] if n else None for p in PERCENTILES}
    out.update(max=ranked[-1] if n else None, cap=cap, over_cap=over, over_cap_share=over / n if n else 0.0)
    return out


def long_targets(lengths: dict) -> str | None:
    """A warning when the targets' p95 passes the response cap (:func:`target_lengths`), else None."""
    if lengths["p95"] is None or lengths["p95"] <= lengths["cap"]:
        return None
    return (
        f"SFT targets: p95 {lengths['p95']} tokens, above GRPO's response cap of {lengths['cap']} "
        f"({lengths['over_cap_share']:.1%} of the targets pass it); GRPO refuses an SFT model when more "
        "than train.grpo.max_sft_over_cap of its targets do. Shorten the targets (teacher reasoning budget, "
        "train.sft.with_reasoning=false) or raise train.grpo.max_response_length"
    )


class ResponseCapError(ValueError):
    """Too many SFT targets are longer than GRPO's response cap."""


def sft_run_config(model: str | Path) -> dict | None:
    """The llamafactory.yaml a task=train_sft model was trained with: its run directory is the model's
    parent, or grandparent for an epoch checkpoint. None for a model made elsewhere."""
    for run_dir in Path(model).resolve().parents[:2]:
        config = run_dir / "llamafactory.yaml"
        if config.is_file():
            return yaml.safe_load(config.read_text(encoding="utf-8"))
    return None


def sft_dataset_of(model: str | Path) -> Path | None:
    """The SFT training file a task=train_sft model was trained on (llamafactory.yaml's dataset_dir and
    dataset name it). None for a model made elsewhere, or when that file is gone."""
    train = sft_run_config(model)
    if train is None:
        return None
    info = Path(train["dataset_dir"]) / "dataset_info.json"
    if not info.is_file():
        return None
    data = info.parent / json.loads(info.read_text(encoding="utf-8"))[train["dataset"]]["file_name"]
    return data if data.is_file() else None


def sft_thinking(model: str | Path) -> bool | None:
    """Whether the SFT model was trained on prompts with the thinking switch on (LLaMA-Factory's
    `enable_thinking`, set from build_sft's with_reasoning); None when unknown."""
    train = sft_run_config(model)
    return None if train is None or "enable_thinking" not in train else bool(train["enable_thinking"])


def check_response_cap(
    model: str | Path, cap: int, max_share: float, count_tokens: Callable[[str], int] = qwen_tokens
) -> dict | None:
    """Refuse GRPO (ResponseCapError) when more than ``max_share`` of the SFT targets that ``model`` was
    trained on pass the response cap; else their length summary (None: the data is unknown). Lengths are
    Qwen BPE counts of the target text (lazymem.tokens)."""
    data = sft_dataset_of(model)
    if data is None:
        log.warning("SFT target lengths not checked: no SFT data of a train_sft run found for %s", model)
        return None
    records = json.loads(data.read_text(encoding="utf-8"))
    lengths = target_lengths([count_tokens(r["messages"][-1]["content"]) for r in records], cap)
    if lengths["over_cap_share"] > max_share:
        raise ResponseCapError(
            f"{lengths['over_cap_share']:.1%} of the SFT targets in {data} are longer than GRPO's response "
            f"cap of {cap} tokens (train.grpo.max_response_length; their p95 is {lengths['p95']}, their max "
            f"{lengths['max']}), more than train.grpo.max_sft_over_cap = {max_share:.1%}. The SFT model "
            "writes such replies, GRPO cuts them at the cap, the cut ones fail the format gate, and the "
            "curriculum never reaches tau. Fix: raise train.grpo.max_response_length above the targets' p99, "
            "or rebuild the SFT data with shorter targets (a smaller teacher reasoning budget, or "
            "train.sft.with_reasoning=false) and train SFT again"
        )
    return lengths


def stats(
    items, annotations, balanced, discards, codes, balance_info, count_tokens, response_cap: int
) -> dict:
    """sft_stats.json: how many windows, the raw KEEP/DROP shares, discards, the balanced set's size, and
    its target lengths against GRPO's response cap."""
    ops = Counter(d.op for a in annotations for d in a.decisions)
    n_ops = sum(ops.values())
    records = [sharegpt_record(a) for a in balanced]
    inputs = [sum(count_tokens(m["content"]) for m in r["messages"][:-1]) for r in records]
    targets = [count_tokens(r["messages"][-1]["content"]) for r in records]
    return {
        "questions": len({it.question.id for it in items}),
        "windows": len(items),
        "annotated_valid": len(annotations),
        "keep_share": ops["KEEP"] / n_ops if n_ops else None,
        "drop_share": ops["DROP"] / n_ops if n_ops else None,
        "discarded": discards,
        "discarded_total": sum(discards.values()),
        "gate_codes": codes,
        **balance_info,
        "balanced": len(balanced),
        "with_reasoning": sum(1 for a in balanced if a.reasoning),
        "mean_input_tokens": sum(inputs) / len(inputs) if inputs else None,
        "mean_target_tokens": sum(targets) / len(targets) if targets else None,
        "target_tokens": target_lengths(targets, response_cap),
    }
