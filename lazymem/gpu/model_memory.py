"""How much GPU memory a model's weights, KV cache and an inference batch's activations take, and how many
parameters it has (for its checkpoints' disk space), estimated from its directory alone.

Weights: the checkpoint's own byte count (the safetensors index's ``metadata.total_size``, else the weight
files' sizes), scaled from the dtype it is stored in to the dtype it is loaded in; without weight files
(a directory holding only ``config.json``), a parameter count from the config: a decoder-only transformer
(Llama/Qwen layout: embeddings, an untied output head, attention with grouped KV heads, a gated MLP) or an
encoder-only one (BERT, XLM-RoBERTa). Biases and norms are left out (under 0.1%). Nothing is imported or
loaded, so preflight can call it for a 32B model in milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

GIB = 1024**3
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
ENCODERS = ("bert", "xlm-roberta", "roberta")
# a transformer block's sizes in config.json
BLOCK = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads")


def _config(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _dtype_bytes(dtype, config: dict) -> int:
    """Bytes per value when loaded in `dtype` (auto/None: the checkpoint's own dtype, else 2)."""
    return DTYPE_BYTES.get(str(dtype)) or DTYPE_BYTES.get(_stored_dtype(config)) or 2


def _stored_dtype(config: dict) -> str:
    return str(config.get("torch_dtype") or config.get("dtype") or "")


def param_count(config: dict) -> int | None:
    """Parameters of the transformer a config.json describes; None when it lacks the sizes."""
    sizes = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
    h, layers, inter, vocab = (config.get(k) for k in sizes)
    if not (h and layers and inter and vocab):
        return None
    if config.get("model_type") in ENCODERS:
        positions = config.get("max_position_embeddings", 0) + config.get("type_vocab_size", 0)
        return (vocab + positions) * h + layers * (4 * h * h + 2 * h * inter)
    heads = config.get("num_attention_heads")
    if not heads:
        return None
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or h // heads
    attention = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim  # q and o, k and v
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", True) else 2)
    return embeddings + layers * (attention + 3 * h * inter)


def _weights_bytes(model_dir: Path) -> int:
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        try:
            total = json.loads((model_dir / index).read_text()).get("metadata", {}).get("total_size")
        except (OSError, ValueError, AttributeError):
            total = None
        if total:
            return int(total)
    for pattern in ("*.safetensors", "pytorch_model*.bin"):  # one format: some checkpoints ship both
        if size := sum(f.stat().st_size for f in model_dir.glob(pattern)):
            return size
    return 0


def model_gib(model_dir: str | Path, dtype=None) -> float | None:
    """GiB of weights of the model in `model_dir` loaded in `dtype` (bfloat16, float16, float32; None or
    auto: as stored); None when the directory does not exist or tells neither its weights nor its sizes."""
    path = Path(str(model_dir)).expanduser()
    if not path.is_dir():
        return None
    config = _config(path)
    if size := _weights_bytes(path):
        stored = DTYPE_BYTES.get(_stored_dtype(config))
        return size * (_dtype_bytes(dtype, config) / stored if stored else 1) / GIB
    params = param_count(config)
    return params * _dtype_bytes(dtype, config) / GIB if params else None


def kv_gib(model_dir: str | Path, tokens: int | None, dtype=None) -> float | None:
    """GiB of KV cache one sequence of `tokens` tokens takes (None: the model's own context length), over
    every GPU of a tensor-parallel server; None when the config does not tell."""
    config = _config(Path(str(model_dir)).expanduser())
    layers, h, heads = (config.get(k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    tokens = tokens or config.get("max_position_embeddings")
    if not (layers and h and heads and tokens):
        return None
    head_dim = config.get("head_dim") or h // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return 2 * layers * kv_heads * head_dim * tokens * _dtype_bytes(dtype, config) / GIB


def param_total(model_dir: str | Path) -> int | None:
    """Parameters of the model in `model_dir`: its weight files' bytes over the stored dtype's (bfloat16
    when the config does not say), else the count from its config; None when neither tells."""
    path = Path(str(model_dir)).expanduser()
    config = _config(path)
    if path.is_dir() and (size := _weights_bytes(path)):
        return size // (DTYPE_BYTES.get(_stored_dtype(config)) or 2)
    return param_count(config)


def lora_params(model_dir: str | Path, rank: int) -> int | None:
    """Parameters of rank-`rank` LoRA adapters on every linear layer of a decoder's blocks (peft's
    "all-linear", which leaves the output head out): rank x (inputs + outputs) of each of q, k, v, o, gate,
    up and down; None when the config does not tell."""
    config = _config(Path(str(model_dir)).expanduser())
    h, layers, inter, heads = (config.get(k) for k in BLOCK)
    if not (h and layers and inter and heads):
        return None
    head_dim = config.get("head_dim") or h // heads
    q, kv = heads * head_dim, (config.get("num_key_value_heads") or heads) * head_dim
    return rank * layers * (2 * (h + q) + 2 * (h + kv) + 3 * (h + inter))


def activation_gib(model_dir: str | Path, batch: int, tokens: int | None, dtype=None) -> float | None:
    """GiB of activations at the peak of one inference forward pass (no autograd, SDPA attention) of `batch`
    sequences of `tokens` tokens (None: the model's context length); None when the config does not tell.

    Without autograd a layer's tensors are freed before the next layer runs, so the peak is one layer's, per
    token: the residual stream and its normalised copy (2 x hidden) plus the larger of the MLP's live tensors
    (a gated MLP holds act(gate(x)), up(x) and their product, 3 x intermediate: transformers 5.10.4's
    models/qwen3/modeling_qwen3.py:82; an encoder's the intermediate and its activation, 2 x:
    models/xlm_roberta/modeling_xlm_roberta.py:385-387) and attention's (q and its rotary copies, k, v and
    the output: 4 x heads x head_dim + 3 x kv_heads x head_dim; SDPA's memory-efficient kernel keeps no
    tokens x tokens scores), each value in `dtype`. Plus the boolean (batch, 1, tokens, tokens) mask that
    transformers builds for SDPA once per pass when the batch holds padding (masking_utils.py:396-413;
    left out only without padding, :299)."""
    config = _config(Path(str(model_dir)).expanduser())
    h, layers, inter, heads = (config.get(k) for k in BLOCK)
    tokens = tokens or config.get("max_position_embeddings")
    if not (h and layers and inter and heads and tokens):
        return None
    head_dim = config.get("head_dim") or h // heads
    kv_heads = config.get("num_key_value_heads") or heads
    mlp = (2 if config.get("model_type") in ENCODERS else 3) * inter
    attention = 4 * heads * head_dim + 3 * kv_heads * head_dim
    per_token = (2 * h + max(mlp, attention)) * _dtype_bytes(dtype, config)
    return (batch * tokens * per_token + batch * tokens * tokens) / GIB
