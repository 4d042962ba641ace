"""A trained llama-architecture transformers model back into a GGUF that llama.cpp serves: the reverse of
task=gguf_model, for the model that task made and LLaMA-Factory SFT / TRL GRPO trained.

No HF->GGUF converter ships in the installed packages (llama.cpp's convert_hf_to_gguf.py is not in the
wheels), so this one is narrow: it takes every key-value of the GGUF the model was made from (architecture,
hyper-parameters, tokenizer vocab/merges/special ids, chat template) as it is, and writes the trained
weights in place of that GGUF's tensors, under llama.cpp's names, in the base's tensor order.

- q_proj/k_proj rows are permuted as llama.cpp's converter does (its RoPE pairs rows within a head
  differently); transformers' GGUF loader undoes exactly this when it reads (LlamaTensorProcessor in
  transformers/modeling_gguf_pytorch_utils.py: q with the attention heads, k with the kv heads).
- 1-D tensors (the RMS norms) stay f32, as llama.cpp's converter keeps them; 2-D weights are written in
  `outtype`: f32, f16 or q8_0 (gguf.quants' Q8_0, bit-exact with ggml's reference quantiser; a row whose
  length is not a multiple of 32 falls back to f16, as convert_hf_to_gguf does).
- output.weight is written only where the base has one (SmolLM2 ties its embeddings: llama.cpp then uses
  token_embd); a model with its own lm_head on a tied base is refused rather than silently re-tied.
- general.file_type says the outtype; lazymem.source (a JSON string: the model dir, the base's sha256, the
  outtype) is an extra key, which llama.cpp loads with the rest of the metadata and otherwise ignores.

The model must have the base's shape (layers, hidden, heads, kv heads, head dim, FFN, vocab, RoPE base, RMS
epsilon): the tokenizer and hyper-parameters come from the base, so a mismatch raises ValueError naming it."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from lazymem.llm.models import sha256_file

log = logging.getLogger(__name__)

OUTTYPES = ("f32", "f16", "q8_0")
ARCH = "llama"
# llama.cpp's per-layer tensor names -> transformers' (LlamaForCausalLM)
LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
SOURCE_KEY = "lazymem.source"


def _quant_types():
    import gguf

    return {
        "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
        "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
        "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    }


def hf_name(gguf_name: str) -> str:
    """The transformers name of one of llama.cpp's llama tensor names; KeyError for any other."""
    if gguf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[3] == "weight":
        return f"model.layers.{parts[1]}.{LAYER_TENSORS[parts[2]]}.weight"
    raise KeyError(gguf_name)


def permute_qk(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """transformers' q/k row order -> llama.cpp's (convert_hf_to_gguf's LlamaModel.permute): within each
    head, rows (2, dim/2) become (dim/2, 2). Its inverse is transformers' _reverse_permute_weights."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def base_metadata(reader) -> dict:
    """{key: value} of a GGUFReader's key-values (the GGUF.* header fields left out)."""
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _hparams(reader) -> dict:
    """The base's hyper-parameters under transformers' config names."""

    def get(key, default=None):
        field = reader.get_field(key)
        return field.contents() if field is not None else default

    arch = get("general.architecture")
    if arch != ARCH:
        raise ValueError(f"the base GGUF's architecture is {arch!r}; this exporter writes {ARCH!r} only")
    vocab = get(f"{ARCH}.vocab_size")
    if vocab is None:
        vocab = len(reader.get_field("tokenizer.ggml.tokens").data)
    hidden, heads = get(f"{ARCH}.embedding_length"), get(f"{ARCH}.attention.head_count")
    return {
        "num_hidden_layers": get(f"{ARCH}.block_count"),
        "hidden_size": hidden,
        "intermediate_size": get(f"{ARCH}.feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": get(f"{ARCH}.attention.head_count_kv", heads),
        "head_dim": get(f"{ARCH}.rope.dimension_count", hidden // heads),
        "vocab_size": vocab,
        "rope_theta": get(f"{ARCH}.rope.freq_base", 10000.0),
        "rms_norm_eps": get(f"{ARCH}.attention.layer_norm_rms_epsilon"),
    }


def _config_hparams(config: dict) -> dict:
    rope = config.get("rope_parameters") or {}
    heads = config["num_attention_heads"]
    return {
        "num_hidden_layers": config["num_hidden_layers"],
        "hidden_size": config["hidden_size"],
        "intermediate_size": config["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": config.get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "vocab_size": config["vocab_size"],
        "rope_theta": rope.get("rope_theta", config.get("rope_theta", 10000.0)),
        "rms_norm_eps": config["rms_norm_eps"],
    }


def check_config(config: dict, reader) -> dict:
    """The base's hyper-parameters, after checking the model's config has them; ValueError naming each
    mismatch otherwise."""
    if config.get("model_type") != ARCH:
        raise ValueError(f"the model is {config.get('model_type')!r}; this exporter writes {ARCH!r} only")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"the model's RoPE is {rope_type!r}; this exporter writes the default RoPE only")
    base, model = _hparams(reader), _config_hparams(config)
    wrong = []
    for key, want in base.items():
        have = model[key]
        same = math.isclose(have, want, rel_tol=1e-6) if isinstance(want, float) else have == want
        if not same:
            wrong.append(f"{key} {have} (the base GGUF has {want})")
    if wrong:
        raise ValueError("the model does not match the base GGUF: " + "; ".join(wrong))
    return base


class _Weights:
    """The model directory's safetensors (one file or shards), each tensor read as float32 numpy."""

    def __init__(self, model_dir: Path):
        from safetensors import safe_open

        index = model_dir / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        elif (model_dir / "model.safetensors").is_file():
            files = ["model.safetensors"]
        else:
            raise FileNotFoundError(f"{model_dir} has no model.safetensors (nor a safetensors index)")
        self.where = {}
        for name in files:
            handle = safe_open(model_dir / name, framework="pt")
            for key in handle.keys():  # noqa: SIM118 (a safe_open handle, not a dict)
                self.where[key] = handle

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str) -> np.ndarray:
        import torch

        return self.where[name].get_tensor(name).to(torch.float32).numpy()


def _chat_template(model_dir: Path) -> str | None:
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        return json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    return None


def export(model_dir, base_gguf, out_path, outtype: str = "q8_0") -> dict:
    """Write `out_path`: the base GGUF's metadata with the model's weights in `outtype`. Returns what it did
    (tensor counts per type, bytes, seconds, the base's sha256, whether the chat templates agree)."""
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r} is not one of {list(OUTTYPES)}")
    model_dir, base_gguf, out_path = Path(model_dir), Path(base_gguf), Path(out_path)
    t0 = time.monotonic()
    config = json.loads((model_dir / "config.json").read_text())
    reader = gguf.GGUFReader(base_gguf)
    hp = check_config(config, reader)
    weights = _Weights(model_dir)
    base_tensors = [t.name for t in reader.tensors]
    unknown = []
    for name in base_tensors:
        try:
            hf_name(name)
        except KeyError:
            unknown.append(name)
    if unknown:
        raise ValueError(f"the base GGUF has tensors this exporter does not write: {unknown}")
    tied = "output.weight" not in base_tensors
    if tied and "lm_head.weight" in weights and not config.get("tie_word_embeddings", True):
        head, embd = weights.get("lm_head.weight"), weights.get("model.embed_tokens.weight")
        if not np.array_equal(head, embd):
            raise ValueError(
                "the model has its own lm_head (tie_word_embeddings false) but the base GGUF ties it to "
                "token_embd (no output.weight): the trained head would be lost"
            )
    missing = [
        hf_name(n)
        for n in base_tensors
        if hf_name(n) not in weights and not (n == "output.weight" and "model.embed_tokens.weight" in weights)
    ]
    if missing:
        raise ValueError(f"the model has no {missing[:5]}{' ...' if len(missing) > 5 else ''}")

    base_sha = sha256_file(base_gguf)
    qtype, file_type = _quant_types()[outtype]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    writer = gguf.GGUFWriter(partial, ARCH)
    for field in reader.fields.values():
        name = field.name
        if name.startswith("GGUF.") or name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE):
            continue  # the header's own fields; the architecture the writer writes; the file type, below
        if name == gguf.Keys.General.ALIGNMENT:
            writer.add_custom_alignment(int(field.contents()))
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub_type)
    writer.add_file_type(int(file_type))
    source = {"model": str(model_dir.resolve()), "base_sha256": base_sha, "outtype": outtype}
    writer.add_string(SOURCE_KEY, json.dumps(source, sort_keys=True))

    counts: dict[str, int] = {}
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in reader.tensors}
    for name in base_tensors:
        key = hf_name(name)
        w = weights.get(key if key in weights else "model.embed_tokens.weight")
        if w.shape != shapes[name]:
            raise ValueError(f"{key} has shape {w.shape}; the base GGUF's {name} has {shapes[name]}")
        if name.endswith(".attn_q.weight"):
            w = permute_qk(w, hp["num_attention_heads"], hp["num_attention_heads"])
        elif name.endswith(".attn_k.weight"):
            w = permute_qk(w, hp["num_attention_heads"], hp["num_key_value_heads"])
        w = np.ascontiguousarray(w)
        if w.ndim == 1:
            kind = gguf.GGMLQuantizationType.F32
        elif qtype == gguf.GGMLQuantizationType.Q8_0 and not gguf.quants.Q8_0.can_quantize(w):
            kind = gguf.GGMLQuantizationType.F16
        else:
            kind = qtype
        data = gguf.quants.quantize(w, kind)
        if kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=kind)
        counts[kind.name] = counts.get(kind.name, 0) + 1
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        partial.replace(out_path)  # a reader never sees half a file under the final name
    finally:
        partial.unlink(missing_ok=True)

    template = _chat_template(model_dir)
    base_template = reader.get_field(gguf.Keys.Tokenizer.CHAT_TEMPLATE)
    base_template = base_template.contents() if base_template is not None else None
    same_template = template is None or template == base_template
    if not same_template:
        log.warning(
            "%s has a chat template other than the base GGUF's; the GGUF keeps the base's (llama.cpp renders "
            "with it)",
            model_dir,
        )
    return {
        "tensors": counts,
        "bytes": out_path.stat().st_size,
        "seconds": round(time.monotonic() - t0, 2),
        "base_sha256": base_sha,
        "outtype": outtype,
        "chat_template_matches_base": same_template,
    }
