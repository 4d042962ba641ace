"""task=gguf_export: its checks before a run, the GGUF and its provenance file through the CLI (a tiny
SmolLM2-shaped model, tests/helpers_gguf.py), and the round trip on the bundled SmolLM2: GGUF -> transformers
(task=gguf_model) -> changed as training would change it -> GGUF (this task) -> llama.cpp, which then
predicts what the changed model predicts, not what the model it started from does."""

from __future__ import annotations

import importlib.util
import json
import shutil
import urllib.request

import pytest
from omegaconf import OmegaConf

from lazymem.llm.models import SMOLLM2_SHA256, resolve_model, sha256_file
from lazymem.tasks.gguf_export import problems

from helpers import run_cli
from helpers_gguf import tiny_base, tiny_llama

needs_gguf = pytest.mark.skipif(
    importlib.util.find_spec("gguf") is None, reason="the gguf package is not installed (pip install gguf)"
)
needs_llama_cpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"
)
QUESTIONS = ["What color is the sky?", "List three colors.", "What is the capital of France?"]
# The change, as training might make it: one attention output tripled (layer weights; the answers change but
# stay fluent, "1. Red\n2. Blue\n3. Green" for the list), and the embeddings of " blue" and " red" swapped
# (the tied token_embd, both ends: where the model said " blue" it now says " red", by whole logits, so that
# llama.cpp answering as the model before the change cannot pass for a near-tie).
SCALED = ("model.layers.20.self_attn.o_proj.weight", 3.0)
SWAPPED = (" blue", " red")
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with _LOCAL.open(request, timeout=120) as r:
        return json.load(r)


def cfg(**opts):
    return OmegaConf.create({"gguf_export": {"base": "bundled:smollm2-135m", "outtype": "q8_0", **opts}})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return tiny_llama(root / "model"), tiny_base(root / "base.gguf")


@needs_gguf
def test_problems_name_the_model_the_base_and_the_outtype(tiny, tmp_path):
    model, base = tiny
    assert problems(cfg(model=str(model), base=str(base))) == []
    assert problems(cfg(model=None)) == [
        "gguf_export.model: not set; pass gguf_export.model=<a model directory>"
    ]
    missing = tmp_path / "nowhere"
    found = problems(cfg(model=str(missing), base=str(tmp_path / "no.gguf"), outtype="q4_0"))
    assert found == [
        f"gguf_export.model: '{missing}' is not a model directory (no config.json)",
        f"gguf_export.base: model path '{tmp_path / 'no.gguf'}' does not exist",
        "gguf_export.outtype: 'q4_0' is not one of ['f32', 'f16', 'q8_0']",
    ]
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    shutil.copy(model / "config.json", weightless / "config.json")
    assert problems(cfg(model=str(weightless), base=str(base))) == [
        f"gguf_export.model: '{weightless}' has no model.safetensors"
    ]
    # the tiny model on the bundled SmolLM2: every hyper-parameter that differs, named
    (found,) = problems(cfg(model=str(model)))
    assert found.startswith(f"gguf_export.model '{model}': the model does not match the base GGUF: ")
    assert "num_hidden_layers 2 (the base GGUF has 30)" in found
    assert "vocab_size 2048 (the base GGUF has 49152)" in found


@needs_gguf
def test_the_cli_writes_the_gguf_and_its_provenance(tiny, tmp_path):
    import gguf

    model, base = tiny
    run_dir = tmp_path / "run"
    r = run_cli(
        "+experiment=gguf_export_cpu",
        f"gguf_export.model={model}",
        f"gguf_export.base={base}",
        f"hydra.run.dir={run_dir}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = run_dir / "model.gguf"
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "ok"
    record = json.loads((run_dir / "model.gguf.json").read_text())
    assert record["gguf"] == str(out) and record["size_bytes"] == out.stat().st_size
    assert record["outtype"] == "q8_0" and record["tensors"] == {"Q8_0": 15, "F32": 5}
    assert record["model"] == str(model) and record["model_made_from"] is None
    weights = model / "model.safetensors"
    assert record["weights"] == {
        "model.safetensors": {"sha256": sha256_file(weights), "size_bytes": weights.stat().st_size}
    }
    assert record["base"] == str(base) and record["base_sha256"] == sha256_file(base)
    assert record["base_size_bytes"] == base.stat().st_size and record["chat_template_matches_base"]
    assert record["versions"]["gguf"] and record["versions"]["torch"]
    source = json.loads(gguf.GGUFReader(out).get_field("lazymem.source").contents())
    assert source["base_sha256"] == record["base_sha256"] and source["outtype"] == "q8_0"


def test_a_missing_model_stops_the_run_naming_the_path(tmp_path):
    missing = tmp_path / "nowhere"
    r = run_cli(
        "+experiment=gguf_export_cpu", f"gguf_export.model={missing}", f"hydra.run.dir={tmp_path}/run"
    )
    assert r.returncode != 0
    assert f"gguf_export.model: '{missing}' is not a model directory (no config.json)" in r.stderr
    assert not (tmp_path / "run" / "model.gguf").exists()


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory, smollm2_converted):
    """(the bundled SmolLM2 as a transformers directory, the same with CHANGED applied)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)  # two shared cores
    root = tmp_path_factory.mktemp("smollm2")
    base = smollm2_converted / "model"
    tok, model = AutoTokenizer.from_pretrained(base), AutoModelForCausalLM.from_pretrained(base)
    name, scale = SCALED
    (a,), (b,) = (tok(word)["input_ids"] for word in SWAPPED)
    with torch.no_grad():
        model.get_parameter(name).mul_(scale)
        embeddings = model.get_input_embeddings().weight
        embeddings[[a, b]] = embeddings[[b, a]]
    assert model.get_output_embeddings().weight.data_ptr() == embeddings.data_ptr()  # tied: both ends
    model.save_pretrained(root / "changed")
    tok.save_pretrained(root / "changed")
    return base, root / "changed"


def exported(model_dir, run_dir, outtype: str):
    r = run_cli(
        "+experiment=gguf_export_cpu",
        f"gguf_export.model={model_dir}",
        f"gguf_export.outtype={outtype}",
        f"hydra.run.dir={run_dir}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir / "model.gguf"


def greedy_llama_cpp(gguf, tok, prompts, tmp_path, max_tokens: int) -> list[list[int]]:
    """llama.cpp's greedy continuation of each prompt, as token ids, through the serving path."""
    from lazymem.llm.llamacpp_server import LlamaCppServer

    out = []
    with LlamaCppServer(gguf, "exported", tmp_path, n_threads=1, startup_timeout_s=120) as server:
        root = server.base_url.removesuffix("/v1")
        for prompt in prompts:
            body = {"model": "exported", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
            body["repeat_penalty"] = 1.0  # llama-cpp-python's default is 1.1
            text = post(server.base_url + "/completions", body)["choices"][0]["text"]
            ids = post(root + "/extras/tokenize", {"input": text})["tokens"]
            out.append(ids if text else [tok.eos_token_id])  # an empty text: it stopped at once
    return out


def scored(model, tok, prompt: str, ids: list[int]):
    """Per token of `ids` after `prompt`: the model's top logit minus the token's, and whether it is top."""
    import torch

    p = tok(prompt)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([p + ids])).logits[0, len(p) - 1 : len(p) - 1 + len(ids)]
    chosen = logits[torch.arange(len(ids)), torch.tensor(ids)]
    return (logits.max(-1).values - chosen).tolist(), (logits.argmax(-1) == torch.tensor(ids)).tolist()


def own_greedy(model, tok, prompt: str, n: int) -> list[int]:
    import torch

    inputs = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, do_sample=False)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


@pytest.mark.slow
@pytest.mark.solo
@needs_gguf
@needs_llama_cpp
def test_llama_cpp_serves_the_changed_weights_not_the_base(smollm2, tmp_path):
    """The changed model exported in q8_0 (the default): llama.cpp's greedy tokens are the changed model's
    top choice or a near-tie for it (test_gguf_model's thresholds: q8_0 blocks and 8-bit activations part
    from fp32 only where two tokens are within ~0.1 logit), and they are not the base model's answers."""
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir, changed_dir = smollm2
    tok = AutoTokenizer.from_pretrained(changed_dir)
    changed = AutoModelForCausalLM.from_pretrained(changed_dir).eval()
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    out = exported(changed_dir, tmp_path / "export", "q8_0")
    # the metadata is the bundled GGUF's: tokenizer, merges, template, special ids
    want = {k: f.contents() for k, f in gguf.GGUFReader(resolve_model("bundled:smollm2-135m")).fields.items()}
    got = {k: f.contents() for k, f in gguf.GGUFReader(out).fields.items()}
    differ = {k for k in want.keys() | got.keys() if not k.startswith("GGUF.") and want.get(k) != got.get(k)}
    assert differ == {"general.file_type", "lazymem.source"}
    record = json.loads((tmp_path / "export" / "model.gguf.json").read_text())
    assert record["base_sha256"] == SMOLLM2_SHA256 and record["chat_template_matches_base"]
    assert record["model_made_from"] is None  # save_pretrained, as a trainer's, leaves gguf_model's out

    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in QUESTIONS
    ]
    served = greedy_llama_cpp(out, tok, prompts, tmp_path, 16)
    gaps, top, base_gaps = [], 0, []
    for prompt, ids in zip(prompts, served, strict=True):
        g, t = scored(changed, tok, prompt, ids)
        gaps, top, base_gaps = gaps + g, top + sum(t), base_gaps + scored(base, tok, prompt, ids)[0]
        assert own_greedy(changed, tok, prompt, 16) != own_greedy(base, tok, prompt, 16)  # the change shows
    assert max(gaps) < 1.0, gaps
    assert top >= 0.85 * len(gaps), f"{top} of {len(gaps)} tokens are the changed model's top one"
    # the sky: blue before the change, red after it in transformers and in llama.cpp, by whole logits
    (blue,), (red,) = (tok(word)["input_ids"] for word in SWAPPED)
    before, after = own_greedy(base, tok, prompts[0], 16), own_greedy(changed, tok, prompts[0], 16)
    assert blue in before and red not in before and red in after and blue not in after
    assert red in served[0] and blue not in served[0], tok.decode(served[0])
    assert max(base_gaps) > 2.0, base_gaps  # llama.cpp's tokens are not the first model's choice


@pytest.mark.slow
@pytest.mark.solo
@needs_gguf
@needs_llama_cpp
def test_an_f32_export_of_the_converted_model_predicts_its_top_tokens(smollm2, tmp_path):
    """No change, f32: llama.cpp computes in f32 what transformers computes, so its first token is the
    transformers model's top one on every prompt (chat and plain text), and its continuation the same."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir, _ = smollm2
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    out = exported(base_dir, tmp_path / "export", "f32")
    record = json.loads((tmp_path / "export" / "model.gguf.json").read_text())
    assert record["model_made_from"] == record["base_sha256"] == SMOLLM2_SHA256  # gguf_model's own record
    chats = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in QUESTIONS
    ]
    prompts = [*chats, "The capital of Germany is", "def fibonacci(n):\n   ", "1, 2, 3, 4,"]
    served = greedy_llama_cpp(out, tok, prompts, tmp_path, 8)
    for prompt, ids in zip(prompts, served, strict=True):
        assert ids[:1] == own_greedy(model, tok, prompt, 1), prompt
        gaps, _ = scored(model, tok, prompt, ids)
        assert max(gaps) < 0.1, (prompt, gaps)
