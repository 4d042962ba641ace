"""task=gguf_model through the CLI: the bundled SmolLM2 GGUF as a transformers directory that loads, renders
ChatML, tokenises as llama.cpp does and predicts what llama.cpp predicts from the same GGUF."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import urllib.request

import pytest

from lazymem.llm.models import SMOLLM2_SHA256, resolve_model
from lazymem.tasks.gguf_model import provenance

from helpers import run_cli

CHATML = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat color is the sky?<|im_end|>\n<|im_start|>assistant\n"
)
# texts whose ids must equal llama.cpp's: digits (SmolLM2 splits them one by one), runs of spaces and
# newlines, non-ASCII, an emoji, contractions, special tokens written out
TEXTS = [
    "In 2023, 1234567 people paid $3.14.",
    " Hello  world\n\n  x\ta\r\n",
    "naïve café — 東京 😀 don't I'M",
    "<|im_start|>user\nHi<|im_end|>\n",
]
needs_gguf = pytest.mark.skipif(
    importlib.util.find_spec("gguf") is None, reason="the gguf package is not installed (pip install gguf)"
)
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with _LOCAL.open(request, timeout=120) as r:
        return json.load(r)


def test_provenance_names_the_file_its_hash_and_versions(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    record = provenance(gguf, "float32")
    assert record["gguf"] == str(gguf) and record["size_bytes"] == 64 and record["dtype"] == "float32"
    assert record["sha256"] == hashlib.sha256(b"GGUF" + bytes(60)).hexdigest()
    assert record["versions"]["transformers"]


def test_a_missing_gguf_stops_the_run_naming_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    r = run_cli("+experiment=gguf_model_cpu", f"gguf_model.model={missing}", f"hydra.run.dir={tmp_path}/run")
    assert r.returncode != 0
    assert f"gguf_model.model: model path '{missing}' does not exist" in r.stderr
    assert not (tmp_path / "run" / "model").exists()


@pytest.fixture(scope="module")
def hf(smollm2_converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)  # two shared cores
    model_dir = smollm2_converted / "model"
    return AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir).eval()


@pytest.mark.slow
@pytest.mark.solo
@needs_gguf
def test_the_directory_loads_with_chatml_and_its_special_tokens(smollm2_converted, hf):
    tok, model = hf
    out = smollm2_converted / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (out / name).is_file(), name
    meta = json.loads((smollm2_converted / "meta.json").read_text())
    n = sum(p.numel() for p in model.parameters())
    assert meta["status"] == "ok" and n == 134_515_008  # SmolLM2-135M, tied embeddings
    assert str(model.dtype) == "torch.float32"
    chat = [{"role": "user", "content": "What color is the sky?"}]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == CHATML
    # the GGUF's eos (<|im_end|>, which ends every turn); pad apart from it; no token added to plain text
    assert (tok.eos_token, tok.bos_token, tok.pad_token) == ("<|im_end|>", "<|im_start|>", "<|endoftext|>")
    assert model.generation_config.eos_token_id == tok.eos_token_id == 2
    assert model.generation_config.pad_token_id == model.config.pad_token_id == tok.pad_token_id == 0
    assert tok("Hi")["input_ids"] == [26843]
    for text in TEXTS:
        assert tok.decode(tok(text)["input_ids"]) == text
    record = json.loads((out / "lazymem_provenance.json").read_text())
    assert record["gguf"] == str(resolve_model("bundled:smollm2-135m"))
    assert record["sha256"] == SMOLLM2_SHA256 and record["size_bytes"] == 98_362_432
    assert record["dtype"] == "float32" and record["versions"]["gguf"]


@pytest.mark.slow
@pytest.mark.solo
@needs_gguf
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")
def test_the_converted_model_predicts_what_llama_cpp_predicts(smollm2_converted, hf, tmp_path):
    """Same ids as llama.cpp's tokenizer; llama.cpp's greedy tokens are the converted model's choice or a
    near-tie for it. llama.cpp computes with the quantised blocks (and 8-bit activations), the converted
    model with their dequantised fp32 values, so where two tokens are within ~0.1 logit greedy decoding can
    part ("What is the capital of France?" parts on its first token); a wrong conversion (layout, norms,
    RoPE) misses by whole logits at every step."""
    import torch

    from lazymem.llm.llamacpp_server import LlamaCppServer

    tok, model = hf
    gguf = resolve_model("bundled:smollm2-135m")
    questions = ["What color is the sky?", "List three colors.", "What is the capital of France?"]
    with LlamaCppServer(gguf, "smollm2-135m", tmp_path, n_threads=1, startup_timeout_s=120) as server:
        root = server.base_url.removesuffix("/v1")
        for text in [*TEXTS, CHATML]:
            assert post(root + "/extras/tokenize", {"input": text})["tokens"] == tok(text)["input_ids"], text
        greedy = {}
        for q in questions:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
            )
            body = {"model": "smollm2-135m", "prompt": prompt, "max_tokens": 16, "temperature": 0.0}
            body["repeat_penalty"] = 1.0  # llama-cpp-python's default is 1.1
            text = post(server.base_url + "/completions", body)["choices"][0]["text"]
            greedy[q] = (prompt, post(root + "/extras/tokenize", {"input": text})["tokens"])
    # the converted model's own greedy continuation: the same 16 tokens where the margins are clear
    prompt, ids = greedy[questions[0]]
    inputs = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        own = model.generate(**inputs, max_new_tokens=16, do_sample=False)[0, inputs["input_ids"].shape[1] :]
    assert len(ids) == 16 and own.tolist()[:8] == ids[:8], (tok.decode(own), tok.decode(ids))
    # llama.cpp's continuations fed to the converted model: each token its top one or within a near-tie
    top, gaps = 0, []
    for prompt, ids in greedy.values():
        p = tok(prompt)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([p + ids])).logits[0, len(p) - 1 : -1]
        chosen = logits[torch.arange(len(ids)), torch.tensor(ids)]
        gaps += (logits.max(-1).values - chosen).tolist()
        top += int((logits.argmax(-1) == torch.tensor(ids)).sum())
    assert max(gaps) < 1.0, gaps
    assert top >= 0.85 * len(gaps), f"{top} of {len(gaps)} tokens are the converted model's top one"
