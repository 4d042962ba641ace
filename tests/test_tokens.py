"""Token counts (lazymem/tokens.py) in Qwen's BPE."""

from lazymem.tokens import count_tokens


def test_qwen_token_counts():
    assert count_tokens("") == 0
    assert count_tokens("Hello world") == 2  # "Hello", " world" in Qwen's BPE
    long = "The quick brown fox jumps over the lazy dog. " * 10
    assert 90 <= count_tokens(long) <= 110
    assert count_tokens("你好，世界") >= 2
