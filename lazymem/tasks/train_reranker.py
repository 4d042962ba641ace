"""task=train_reranker: fine-tune the bundled MiniLM as a cross-encoder on (question, message) pairs.

    python -m lazymem.run +experiment=train_reranker_cpu \
        data.path=../shared/data/longmemeval_oracle_train.json \
        reranker_train.val_path=../shared/data/longmemeval_oracle_val.json

    # LoCoMo is one file: hold out whole conversations for validation
    python -m lazymem.run +experiment=train_reranker_cpu \
        data=locomo data.path=../shared/data/locomo_dev8.json 'data.loader.conversations=[0,1,2,3,4,5]' \
        reranker_train.val_path=null \
        'reranker_train.val_data={loader: {conversations: [6,7]}}'

Positives are each question's gold messages; hard negatives are the best-ranked non-gold messages of the
job's retrieval for that question (the candidates the reranker will reorder). Training uses
sentence-transformers' CrossEncoderTrainer (binary cross-entropy), evaluates NDCG@10 over each
validation question's retrieval candidates after every epoch and keeps the best epoch: the checkpoint
under <run dir>/reranker is what retrieval/reranker=minilm_trained loads. Needs sentence-transformers'
training extras (`pip install "sentence-transformers[train]"`: datasets and accelerate).
"""

from __future__ import annotations

import json
import time

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lazymem.data import load_dataset
from lazymem.data.schema import Dataset
from lazymem.retrieval.base import check_template, render
from lazymem.retrieval.hybrid import fingerprint
from lazymem.retrieval.weights import offline_env, resolve_device, resolve_model
from lazymem.tasks.contract import Task


def run(cfg, run) -> dict:
    opts = cfg.get("reranker_train")
    if opts is None:
        raise SystemExit(
            "error: task=train_reranker needs its settings: run it with +experiment=train_reranker_cpu"
        )
    template = check_template(opts.template)
    train, val = split_datasets(cfg.data, opts)
    run.meta.add_dataset(train.source)
    retriever = instantiate(cfg.retrieval)
    pairs = training_pairs(train, retriever, int(opts.negatives), template)
    samples = rerank_samples(val, retriever, int(opts.candidates), template)
    if not pairs or not samples:
        raise SystemExit("error: no question with gold evidence to train or validate the reranker on")
    t0 = time.perf_counter()
    best = fit(pairs, samples, opts, run.dir)
    report = {
        "train_pairs": len(pairs),
        "positives": sum(label for _, _, label in pairs),
        "val_questions": len(samples),
        "train_s": round(time.perf_counter() - t0, 1),
        "best": best,
        "checkpoint": str(run.dir / "reranker"),
    }
    (run.dir / "reranker_report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return report


def split_datasets(data: DictConfig, opts: DictConfig) -> tuple[Dataset, Dataset]:
    """The training questions (`data`) and the validation ones: `val_path` (null = the same file) read
    with the same loader, changed by `val_data` (e.g. other LoCoMo conversations). Refuses validation
    histories that training also reads: a checkpoint picked on them would be picked on training data."""
    val_cfg = data.copy()
    val_cfg.path, val_cfg.split, val_cfg.limit = opts.get("val_path") or data.get("path"), None, None
    val_cfg = OmegaConf.merge(val_cfg, opts.get("val_data") or {})
    train, val = load_dataset(data), load_dataset(val_cfg)
    seen = {fingerprint(h) for h in train.histories.values()}
    shared = sorted(k for k, h in val.histories.items() if fingerprint(h) in seen)
    if shared:
        raise SystemExit(
            f"error: {len(shared)} validation histories are also training histories (e.g. {shared[:3]}): "
            "give reranker_train.val_path another file, or reranker_train.val_data other conversations, "
            "e.g. 'reranker_train.val_data={loader: {conversations: [6, 7]}}'"
        )
    return train, val


def training_pairs(ds, retriever, negatives: int, template: str) -> list[tuple[str, str, int]]:
    """(question, message text, 1 for gold / 0 for a hard negative) for every question with gold."""
    pairs = []
    for q in ds.questions:
        if not q.gold_idx:
            continue
        history = ds.history(q)
        gold = set(q.gold_idx)
        pairs += [(q.text, render(history.messages[i], template), 1) for i in q.gold_idx]
        ranked = retriever.search(history, q.text).indices
        hard = [i for i in ranked if i not in gold][:negatives]
        pairs += [(q.text, render(history.messages[i], template), 0) for i in hard]
    return pairs


def rerank_samples(ds, retriever, candidates: int, template: str) -> list[dict]:
    """CrossEncoderRerankingEvaluator samples: each question's gold and its top non-gold candidates."""
    samples = []
    for q in ds.questions:
        if not q.gold_idx:
            continue
        history = ds.history(q)
        gold = set(q.gold_idx)
        ranked = retriever.search(history, q.text, candidates).indices
        samples.append(
            {
                "query": q.text,
                "positive": [render(history.messages[i], template) for i in q.gold_idx],
                "negative": [render(history.messages[i], template) for i in ranked if i not in gold],
            }
        )
    return samples


def fit(pairs: list[tuple[str, str, int]], samples: list[dict], opts, out_dir) -> dict:
    """Train, keep the epoch with the best validation NDCG@10, save it to out_dir/reranker."""
    try:
        from datasets import Dataset
        from sentence_transformers.cross_encoder import (
            CrossEncoder,
            CrossEncoderTrainer,
            CrossEncoderTrainingArguments,
        )
        from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    except ImportError as err:
        raise SystemExit(
            f"error: training the reranker needs sentence-transformers' training extras ({err}): "
            'pip install "sentence-transformers[train]"'
        ) from None
    offline_env()
    path, _ = resolve_model(opts.base_model)
    model = CrossEncoder(
        path,
        num_labels=1,
        max_length=int(opts.max_length),
        device=resolve_device(opts.device),
        local_files_only=True,
    )
    train = Dataset.from_dict(
        {"query": [p[0] for p in pairs], "text": [p[1] for p in pairs], "label": [float(p[2]) for p in pairs]}
    )
    evaluator = CrossEncoderRerankingEvaluator(samples, at_k=10, name="val", batch_size=int(opts.batch_size))
    args = CrossEncoderTrainingArguments(
        output_dir=str(out_dir / "checkpoints"),
        num_train_epochs=int(opts.epochs),
        per_device_train_batch_size=int(opts.batch_size),
        learning_rate=float(opts.learning_rate),
        warmup_steps=0.1,
        seed=int(opts.seed),
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="eval_val_ndcg@10",
        report_to="none",
        use_cpu=resolve_device(opts.device) == "cpu",
        dataloader_num_workers=0,
    )
    before = evaluator(model)
    trainer = CrossEncoderTrainer(
        model=model,
        args=args,
        train_dataset=train.shuffle(seed=int(opts.seed)),
        loss=BinaryCrossEntropyLoss(model),
        evaluator=evaluator,
    )
    trainer.train()
    after = evaluator(model)
    model.save_pretrained(str(out_dir / "reranker"))
    return {"ndcg@10_before": before["val_ndcg@10"], "ndcg@10_after": after["val_ndcg@10"], **after}


TASK = Task(run)
