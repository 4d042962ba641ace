"""Write a tiny, randomly initialised Qwen3 model and a small byte-level BPE tokenizer to a directory.

For smoke-testing the SFT environment end to end on a CPU (`task=train_sft` with
`+train.sft.overrides.model_name_or_path=<dir>`) and for serving through vLLM on a CPU (`--hidden 256` or
more: vLLM's CPU attention needs a head dimension of at least 64): it has Qwen3's architecture, chat special
tokens and a chat template, but its weights and vocabulary are meaningless. With ``--embedding`` it is a
stand-in for Qwen3-Embedding-8B instead: the bare Qwen3 model with sentence-transformers' last-token pooling
and normalisation, as that model ships (the paper's dense retriever, rehearsed by +experiment=rehearsal_cpu).
Run it with the Python of .venv or the SFT environment (scripts/tiny_qwen3.py is the same), or as the
first stage of +experiment=chain_cpu (task=tiny_model):

    .venv/bin/python scripts/tiny_qwen3.py /tmp/tiny-qwen3
"""

from __future__ import annotations

import argparse
import json
import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, Qwen3Model

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# A chat template of our own with Qwen3's turn markers and thinking tags, so an OpenAI-compatible server
# (vLLM) can format chats for the tiny model: each message as <|im_start|>role ... <|im_end|>, then the
# assistant's turn; with enable_thinking=false an empty think block is prefilled, as Qwen3's own does. With
# enable_thinking=true the think block is opened for it: a real Qwen3 opens it itself, random weights never
# would, and vLLM's thinking budget (thinking_token_budget) counts only inside an open block.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% elif enable_thinking is defined %}<think>\n{% endif %}"
    "{% endif %}"
)


def tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [string.printable, '[{"op": "KEEP", "compressed_content": "", "reason": ""}]'] * 4
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def sentence_transformers_files(out: Path, hidden: int) -> None:
    """The module list of an embedding model that pools the last token and normalises (Qwen3-Embedding)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    pooling = {"word_embedding_dimension": hidden, "pooling_mode_lasttoken": True, "include_prompt": True}
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))
    (out / "2_Normalize").mkdir(exist_ok=True)


def write(
    out: str | Path,
    hidden: int = 32,
    layers: int = 2,
    vocab: int = 400,
    seed: int = 0,
    embedding: bool = False,
) -> int:
    """Writes the model and its tokenizer to `out`; returns its number of parameters."""
    torch.manual_seed(seed)
    tok = tokenizer(vocab)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen3Model(config) if embedding else Qwen3ForCausalLM(config)
    model.save_pretrained(str(out))
    if embedding:
        tok.padding_side = "left"  # last-token pooling reads the final position of every row
        sentence_transformers_files(Path(out), hidden)
    tok.save_pretrained(str(out))
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedding", action="store_true", help="an embedding model (Qwen3-Embedding's shape)")
    args = ap.parse_args()
    n = write(args.out, args.hidden, args.layers, args.vocab, args.seed, args.embedding)
    print(f"tiny Qwen3: {n} parameters -> {args.out}")


if __name__ == "__main__":
    main()
