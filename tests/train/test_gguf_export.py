"""lazymem/train/gguf_export.py on a tiny SmolLM2-shaped model (tests/helpers_gguf.py): the base's metadata
copied as it is, the weights back exactly as transformers' GGUF reader reads them, llama.cpp's logits equal
to transformers' (and far from them without the q/k permutation), the outtypes, and the refusals."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest

from lazymem.train import gguf_export as ge
from lazymem.train.gguf_export import check_config, export, permute_qk

from helpers_gguf import TINY, tiny_base, tiny_llama

gguf = pytest.importorskip("gguf")
needs_llama_cpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"
)
# "<|im_start|>The sky is a beautiful shade of blue." in the tiny vocabulary
IDS = [1, 504, 1011, 105, 314, 253, 325, 1648, 342, 336, 443, 903, 282, 754, 546, 30]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model dir, base GGUF) of the tiny shape."""
    root = tmp_path_factory.mktemp("tiny")
    return tiny_llama(root / "model"), tiny_base(root / "base.gguf")


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """outtype -> (path, export's result) for every outtype."""
    model, base = tiny
    root = tmp_path_factory.mktemp("exported")
    return {t: (root / f"{t}.gguf", export(model, base, root / f"{t}.gguf", t)) for t in ge.OUTTYPES}


@pytest.fixture(scope="module")
def hf_logits(tiny):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny[0]).eval()
    with torch.no_grad():
        return model(torch.tensor([IDS])).logits[0].numpy()


def llama_cpp_logits(path) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(str(path), n_ctx=64, n_threads=1, logits_all=True, verbose=False)
    try:
        llm.eval(IDS)
        return np.array(llm.scores[: len(IDS)])
    finally:
        llm.close()


def test_permute_qk_is_the_inverse_of_transformers_gguf_reader():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    reader = LlamaTensorProcessor(config={"num_attention_heads": 9, "num_key_value_heads": 3})
    rng = np.random.default_rng(0)
    for rows, kv in ((576, 9), (192, 3)):
        w = rng.standard_normal((rows, 576)).astype(np.float32)
        permuted = permute_qk(w, 9, kv)
        assert not np.array_equal(permuted, w)
        assert np.array_equal(reader._reverse_permute_weights(permuted, 9, kv), w)


def test_the_base_metadata_is_copied_as_it_is(tiny, exported):
    base, base_sha = ge.base_metadata(gguf.GGUFReader(tiny[1])), ge.sha256_file(tiny[1])
    for outtype, (path, _) in exported.items():
        got = ge.base_metadata(gguf.GGUFReader(path))
        changed = {k for k in base.keys() | got.keys() if base.get(k) != got.get(k)}
        assert changed == {"general.file_type", ge.SOURCE_KEY}, outtype
        assert got["general.file_type"] == {"f32": 0, "f16": 1, "q8_0": 7}[outtype]
        source = json.loads(got[ge.SOURCE_KEY])
        assert source == {"model": str(tiny[0].resolve()), "base_sha256": base_sha, "outtype": outtype}
    # the tokenizer: SmolLM2's (cut) vocabulary, merges, special ids and ChatML template, all there
    assert got["tokenizer.chat_template"].startswith("{% for message in messages %}")
    assert len(got["tokenizer.ggml.tokens"]) == TINY["vocab_size"]
    assert len(got["tokenizer.ggml.merges"]) > 1000
    assert [got[f"tokenizer.ggml.{k}_token_id"] for k in ("bos", "eos", "unknown", "padding")] == [1, 2, 0, 2]


def test_the_tensors_keep_the_base_names_and_order_norms_f32(tiny, exported):
    base = [t.name for t in gguf.GGUFReader(tiny[1]).tensors]
    kinds = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}
    for outtype, (path, result) in exported.items():
        tensors = gguf.GGUFReader(path).tensors
        assert [t.name for t in tensors] == base and "output.weight" not in base  # tied, as SmolLM2
        for t in tensors:
            assert t.tensor_type.name == ("F32" if len(t.shape) == 1 else kinds[outtype]), (outtype, t.name)
        assert result["outtype"] == outtype and result["bytes"] == path.stat().st_size
        assert result["base_sha256"] == ge.sha256_file(tiny[1]) and result["chat_template_matches_base"]
    sizes = {t: p.stat().st_size for t, (p, _) in exported.items()}
    assert sizes["q8_0"] < sizes["f16"] < sizes["f32"]


def test_transformers_reads_the_f32_export_back_exactly(tiny, exported):
    import torch
    from transformers import AutoModelForCausalLM

    path = exported["f32"][0]
    back = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    want = AutoModelForCausalLM.from_pretrained(tiny[0]).state_dict()
    got = back.state_dict()
    assert got.keys() == want.keys()
    assert [k for k in want if not torch.equal(got[k], want[k])] == []


@needs_llama_cpp
def test_llama_cpp_computes_the_models_logits(exported, hf_logits):
    """f32: llama.cpp's logits within 0.05 of transformers' (they reach ~9) and the same top token at every
    position; q8_0 and f16 close. Position 0 and RoPE: a q/k layout error shows from position 1 on."""
    scale = np.abs(hf_logits).max()
    assert scale > 5  # sharp enough that a wrong layout cannot pass by chance
    for outtype, tolerance, agree in (("f32", 0.05, 1.0), ("f16", 0.2, 0.9), ("q8_0", 1.0, 0.8)):
        got = llama_cpp_logits(exported[outtype][0])
        assert np.abs(got - hf_logits).max() < tolerance, outtype
        assert (got.argmax(-1) == hf_logits.argmax(-1)).mean() >= agree, outtype


@needs_llama_cpp
def test_without_the_qk_permutation_llama_cpp_computes_something_else(tiny, hf_logits, tmp_path, monkeypatch):
    """The check above can fail: q/k written in transformers' row order miss by whole logits."""
    monkeypatch.setattr(ge, "permute_qk", lambda w, n_head, n_head_kv=None: w)
    export(tiny[0], tiny[1], tmp_path / "unpermuted.gguf", "f32")
    got = llama_cpp_logits(tmp_path / "unpermuted.gguf")
    assert np.abs(got[0] - hf_logits[0]).max() < 0.05  # position 0: RoPE rotates nothing
    assert np.abs(got - hf_logits).max() > 2.0


def test_a_model_of_another_shape_is_refused_naming_the_mismatch(tiny, tmp_path):
    config = json.loads((tiny[0] / "config.json").read_text())
    reader = gguf.GGUFReader(tiny[1])
    assert check_config(config, reader)["num_key_value_heads"] == TINY["num_key_value_heads"]
    wrong = {**config, "num_key_value_heads": 4, "num_hidden_layers": 3}
    with pytest.raises(ValueError) as e:
        check_config(wrong, reader)
    assert "num_hidden_layers 3 (the base GGUF has 2)" in str(e.value)
    assert "num_key_value_heads 4 (the base GGUF has 2)" in str(e.value)
    assert "num_attention_heads" not in str(e.value)
    with pytest.raises(ValueError, match=r"rms_norm_eps 1e-06 \(the base GGUF has 9.99"):
        check_config({**config, "rms_norm_eps": 1e-6}, reader)
    with pytest.raises(ValueError, match="the model is 'qwen3'"):
        check_config({**config, "model_type": "qwen3"}, reader)
    # through export: nothing written
    model = tmp_path / "model"
    shutil.copytree(tiny[0], model)
    (model / "config.json").write_text(json.dumps({**config, "vocab_size": 2049}))
    with pytest.raises(ValueError, match=r"vocab_size 2049 \(the base GGUF has 2048\)"):
        export(model, tiny[1], tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()
    with pytest.raises(ValueError, match="outtype 'q4_0'"):
        export(tiny[0], tiny[1], tmp_path / "out.gguf", "q4_0")


def test_an_untied_head_on_a_tied_base_is_refused(tiny, tmp_path):
    model = tiny_llama(tmp_path / "untied", tie_word_embeddings=False)
    with pytest.raises(ValueError, match="its own lm_head"):
        export(model, tiny[1], tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_a_chat_template_other_than_the_bases_is_flagged(tiny, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny[0], model)
    (model / "chat_template.jinja").write_text("{{ messages }}")
    result = export(model, tiny[1], tmp_path / "out.gguf", "f16")
    assert not result["chat_template_matches_base"]
    template = gguf.GGUFReader(tmp_path / "out.gguf").get_field("tokenizer.chat_template").contents()
    assert template.startswith("{% for message in messages %}")  # the base's: llama.cpp renders with it
