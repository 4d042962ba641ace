"""Write a tiny, randomly initialised Qwen3 model and a small byte-level BPE tokenizer to a directory.

For smoke-testing the SFT environment end to end on a CPU (`task=train_sft` with
`+train.sft.overrides.model_name_or_path=<dir>`) and for serving through vLLM on a CPU (`--hidden 256` or
more: vLLM's CPU attention needs a head dimension of at least 64): it has Qwen3's architecture, chat special
tokens and a chat template, but its weights and vocabulary are meaningless. Run it with the SFT environment's
Python:

    .venv-sft/bin/python scripts/tiny_qwen3.py /tmp/tiny-qwen3
"""

from __future__ import annotations

import argparse
import string

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# A chat template of our own with Qwen3's turn markers and thinking tags, so an OpenAI-compatible server
# (vLLM) can format chats for the tiny model: each message as <|im_start|>role ... <|im_end|>, then the
# assistant's turn; with enable_thinking=false an empty think block is prefilled, as Qwen3's own does.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    tok = tokenizer(args.vocab)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=args.hidden // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    print(f"tiny Qwen3: {sum(p.numel() for p in model.parameters())} parameters -> {args.out}")


if __name__ == "__main__":
    main()
