"""A SmolLM2-shaped model small enough for fast tests of the GGUF export: a random llama-architecture
transformers directory (2 layers, hidden 64, 2048 tokens) and a base GGUF with the same hyper-parameters
that carries the bundled SmolLM2's tokenizer cut to its first 2048 tokens (its special tokens, the bytes and
the first merges: a BPE vocabulary llama.cpp loads, and a GGUF read in a tenth of a second rather than the
2 s that SmolLM2's 49152 tokens and 48900 merges take gguf.GGUFReader), its chat template, and zero weights
(the export replaces them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lazymem.llm.models import resolve_model

# the tiny model's shape; the vocabulary is SmolLM2's first 2048 tokens
TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 2048,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
}


def tiny_llama(out: Path, seed: int = 0, **changes) -> Path:
    """A random LlamaForCausalLM of shape TINY (`changes` override config keys) saved to `out`, fp32, tied
    embeddings, with weights large enough that its next-token choices are sharp (std 0.2, not 0.02)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = {**TINY, "max_position_embeddings": 8192, "tie_word_embeddings": True, **changes}
    settings["rope_parameters"] = {"rope_type": "default", "rope_theta": settings.pop("rope_theta")}
    config = LlamaConfig(**settings, bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():  # the norms away from 1, so a norm written to the wrong place shows
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    model.save_pretrained(out)
    return out


def tiny_base(path: Path) -> Path:
    """A llama GGUF of shape TINY at `path`: the bundled SmolLM2's general.* and tokenizer.* keys (special
    ids, chat template), its vocabulary cut to TINY's size with the merges that stay inside it, TINY's
    hyper-parameters, zero F32 tensors."""
    import gguf

    source = gguf.GGUFReader(resolve_model("bundled:smollm2-135m"))
    writer = gguf.GGUFWriter(path, "llama")
    n = TINY["vocab_size"]
    kept = set(source.get_field("tokenizer.ggml.tokens").contents()[:n])
    for field in source.fields.values():
        if field.name.startswith(("tokenizer.", "general.")) and field.name != "general.architecture":
            vtype, value = field.types[0], field.contents()
            if field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
                value = value[:n]
            elif field.name == "tokenizer.ggml.merges":
                value = [m for m in value if all(p in kept for p in (*m.split(" "), m.replace(" ", "")))]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, value, vtype, sub_type=sub)
    writer.add_block_count(TINY["num_hidden_layers"])
    writer.add_context_length(8192)
    writer.add_embedding_length(TINY["hidden_size"])
    writer.add_feed_forward_length(TINY["intermediate_size"])
    writer.add_head_count(TINY["num_attention_heads"])
    writer.add_head_count_kv(TINY["num_key_value_heads"])
    writer.add_rope_freq_base(TINY["rope_theta"])
    writer.add_layer_norm_rms_eps(TINY["rms_norm_eps"])
    writer.add_vocab_size(TINY["vocab_size"])
    writer.add_rope_dimension_count(TINY["head_dim"])
    h, f, v = TINY["hidden_size"], TINY["intermediate_size"], TINY["vocab_size"]
    kv = TINY["num_key_value_heads"] * TINY["head_dim"]
    zeros = {"token_embd.weight": (v, h)}
    for i in range(TINY["num_hidden_layers"]):
        layer = {"attn_norm": (h,), "attn_q": (h, h), "attn_k": (kv, h), "attn_v": (kv, h)}
        layer |= {"attn_output": (h, h), "ffn_norm": (h,), "ffn_gate": (f, h), "ffn_up": (f, h)}
        layer |= {"ffn_down": (h, f)}
        zeros |= {f"blk.{i}.{name}.weight": shape for name, shape in layer.items()}
    zeros["output_norm.weight"] = (h,)
    for name, shape in zeros.items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
