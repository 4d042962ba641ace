"""The tiny random Qwen3 (lazymem/train/tiny_qwen3.py): Qwen3's architecture and chat markers, a tokenizer
that round-trips any printable text, and the embedding variant's pooling files."""

import json

from transformers import AutoModelForCausalLM, AutoTokenizer

from lazymem.train.tiny_qwen3 import write


def test_the_tiny_model_loads_and_its_tokenizer_round_trips(tmp_path):
    n = write(tmp_path / "m", hidden=64, vocab=300, seed=1)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"))
    assert sum(p.numel() for p in model.parameters()) == n
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    text = '[{"op": "KEEP", "compressed_content": "Ümlaut & ~", "reason": ""}]'
    assert tok.decode(tok(text)["input_ids"]) == text
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # the same seed writes the same weights
    write(tmp_path / "again", hidden=64, vocab=300, seed=1)
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == (
        tmp_path / "again" / "model.safetensors"
    ).read_bytes()


def test_the_embedding_variant_pools_the_last_token(tmp_path):
    write(tmp_path / "e", hidden=64, vocab=300, embedding=True)
    pooling = json.loads((tmp_path / "e" / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_lasttoken"] and pooling["word_embedding_dimension"] == 64
