"""task=train_gate: fit the extractive gate (lazymem/methods/extractive_gate.py) on retrieval windows.

    python -m lazymem.run +experiment=train_gate_cpu                      # synthetic data (offline)
    python -m lazymem.run +experiment=train_gate_cpu data=longmemeval \
        data.path=../shared/data/longmemeval_oracle_train.json \
        gate.val_path=../shared/data/longmemeval_oracle_val.json

Each question's top-n retrieval is windowed as the method windows it; every window message is one
example, labelled by the benchmark's gold evidence. The logistic model is fit on the training questions
and its threshold chosen on the validation questions to maximise the mean action reward (eta = 0.915).
Validation is the data's `val` split, or the file `gate.val_path` when given (then all of `data` trains).
Writes gate.json (load it with methods.<name>.model=<run dir>/gate.json) and gate.md: gold kept, non-gold
dropped, action reward, memory tokens and ms per window of the gate beside keeping everything. With
`gate.model=<gate.json>` nothing is trained: that gate is scored on every question of `data` (e.g. the
bundled synthetic gate on LoCoMo windows).
"""

from __future__ import annotations

import json
import time

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig
from tqdm import tqdm

from lazymem.construct.render import render_raw
from lazymem.construct.windows import build_windows
from lazymem.data import load_dataset
from lazymem.methods.extractive_gate import (
    GateModel,
    best_threshold,
    encoder_identity,
    featurize,
    window_reward,
)
from lazymem.numeric import mean
from lazymem.tasks.contract import Task
from lazymem.tokens import count_tokens


def run(cfg, run) -> dict:
    gate = cfg.get("gate")
    if gate is None:
        raise SystemExit(
            "error: task=train_gate needs the gate settings: run it with +experiment=train_gate_cpu"
        )
    retriever = instantiate(cfg.retrieval)
    dense = retriever.dense(gate.dense)
    t0 = time.perf_counter()
    if gate.get("model"):
        model, val, train_info = GateModel.load(gate.model), load_dataset(cfg.data), {"model": gate.model}
        model.check_encoder(dense, f"gate.model {gate.model}")
        run.meta.add_dataset(val.source)
    else:
        train, val = _datasets(cfg.data, gate.val_path)
        run.meta.add_dataset(train.source)
        x_train, y_train = _examples(train, retriever, dense, gate, "train")
        model = GateModel.fit(np.vstack(x_train), np.concatenate(y_train), l2=float(gate.l2))
        x_val, y_val = _examples(val, retriever, dense, gate, "val")
        model.threshold = best_threshold([model.prob(x) for x in x_val], y_val)
        model.encoder = encoder_identity(dense)
        train_info = {"questions": len(train.questions), "messages": int(sum(len(y) for y in y_train))}
    report = {
        "gate": model.to_dict(),
        "train": train_info,
        "val": {"questions": sum(bool(q.gold_idx) for q in val.questions)},
        "validation": {
            "gate": _scores(model, val, retriever, dense, gate, model.threshold),
            "keep_all": _scores(model, val, retriever, dense, gate, 0.0),
        },
    }
    report["seconds"] = round(time.perf_counter() - t0, 1)  # retrieval, embedding, features, fit, scoring
    (run.dir / "gate.json").write_text(json.dumps(report["gate"], indent=1) + "\n")
    (run.dir / "gate_report.json").write_text(json.dumps(report, indent=1) + "\n")
    md = render(report)
    (run.dir / "gate.md").write_text(md + "\n")
    print(md)
    return report


def _datasets(data: DictConfig, val_path: str | None):
    if val_path:
        val = data.copy()
        val.path, val.split, val.limit = val_path, None, None
        return load_dataset(data), load_dataset(val)
    out = []
    for split in ("train", "val"):
        part = data.copy()
        part.split = split
        out.append(load_dataset(part))
    return out


def question_windows(ds, retriever, gate):
    """(question, history, retrieved, windows) for every question with gold evidence."""
    for q in ds.questions:
        if not q.gold_idx:
            continue
        history = ds.history(q)
        result = retriever.search(history, q.text, gate.n)
        windows = build_windows(result.indices, len(history.messages), gate.radius, gate.max_len, gate.stride)
        yield q, history, result.indices, windows


def _examples(ds, retriever, dense, gate, desc: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Feature rows and gold labels, one array pair per window."""
    xs, ys = [], []
    for q, history, retrieved, windows in tqdm(
        list(question_windows(ds, retriever, gate)), desc=desc, unit="q"
    ):
        gold = set(q.gold_idx)
        xs += featurize(q, history, retrieved, windows, dense)
        ys += [np.array([i in gold for i in w.idx]) for w in windows]
    if not ys:
        raise SystemExit(f"error: no {desc} question with gold evidence to learn the gate from")
    return xs, ys


def _scores(model: GateModel, ds, retriever, dense, gate, threshold: float) -> dict:
    """Construction quality of the gate at `threshold` (0 keeps everything) over validation questions."""
    gold_kept, nongold_dropped, rewards, tokens, ms = [], [], [], [], []
    for q, history, retrieved, windows in question_windows(ds, retriever, gate):
        gold, kept = set(q.gold_idx), set()
        t0 = time.perf_counter()
        features = featurize(q, history, retrieved, windows, dense)
        for w, x in zip(windows, features, strict=True):
            keep = model.prob(x) >= threshold
            kept |= {i for i, k in zip(w.idx, keep, strict=True) if k}
            rewards.append(window_reward([i in gold for i in w.idx], keep))
        ms.append(1000 * (time.perf_counter() - t0) / max(len(windows), 1))
        decided = {i for w in windows for i in w.idx}
        gold_kept += [i in kept for i in decided & gold]
        nongold_dropped += [i not in kept for i in decided - gold]
        tokens.append(count_tokens(render_raw([history.messages[i] for i in sorted(kept)])))
    return {
        "threshold": threshold,
        "gold_kept": mean(gold_kept),
        "nongold_dropped": mean(nongold_dropped),
        "action_reward": mean(rewards),
        "memory_tokens": mean(tokens),
        "ms_per_window": mean(ms),
    }


def render(report: dict) -> str:
    trained = report["train"].get("model") or f"trained on {report['train']['questions']} questions"
    lines = [
        f"## Extractive gate ({trained}), scored on {report['val']['questions']} questions with gold; "
        f"{report['seconds']} s",
        "",
        "| | threshold | gold kept | non-gold dropped | action reward | memory tokens | ms / window |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in report["validation"].items():
        lines.append(
            f"| {name} | {s['threshold']:.2f} | {s['gold_kept']:.3f} | {s['nongold_dropped']:.3f} | "
            f"{s['action_reward']:.3f} | {s['memory_tokens']:.0f} | {s['ms_per_window']:.1f} |"
        )
    return "\n".join(lines)


TASK = Task(run)
