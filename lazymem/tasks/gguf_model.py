"""task=gguf_model: a GGUF file as a transformers model directory in <run dir>/model, so that LLaMA-Factory
SFT and TRL GRPO train the weights that llama.cpp serves (first user: the bundled SmolLM2-135M-Instruct).

transformers reads the GGUF (the `gguf` package) and dequantises its blocks to `gguf_model.dtype` (float32:
CPU training keeps fp32 master weights). Its tokenizer conversion for llama-architecture GGUFs (5.10) names
the BOS token as EOS and sets no PAD, so the special tokens are set again from the GGUF's own ids. PAD must
differ from EOS (a collator that masks padding by id would mask every EOS, and the model would never learn to
stop): the GGUF's pad when it does, else its unknown token (SmolLM2: <|endoftext|>), else its BOS.
model/lazymem_provenance.json records which file, hashed, with which versions."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import time
from pathlib import Path

from lazymem.llm.models import ModelIntegrityError, ModelNotFound, resolve_model, sha256_file
from lazymem.preflight import stop
from lazymem.tasks.contract import Task

DTYPES = ("float32", "bfloat16", "float16")


def gguf_path(cfg, spec: str) -> Path:
    """The GGUF file ``spec`` names (a bundled name or a path), with the job's model cache."""
    cache = cfg.llm.get("model_cache_dir") if cfg.get("llm") is not None else None
    path = resolve_model(str(spec), Path(cache) if cache else None)
    if not path.is_file():
        raise ModelNotFound(f"model path {str(path)!r} is not a file")
    return path


def problems(cfg) -> list[str]:
    """The GGUF file, the dtype and the gguf package, checked before a chain starts."""
    found = []
    try:
        gguf_path(cfg, cfg.gguf_model.model)
    except (ModelNotFound, ModelIntegrityError) as e:
        found.append(f"gguf_model.model: {e}")
    if str(cfg.gguf_model.dtype) not in DTYPES:
        found.append(f"gguf_model.dtype: {cfg.gguf_model.dtype!r} is not one of {list(DTYPES)}")
    if importlib.util.find_spec("gguf") is None:
        found.append("the gguf package (transformers reads GGUF files with it): pip install gguf")
    return found


def version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def provenance(path: Path, dtype: str) -> dict:
    return {
        "gguf": str(path),
        "sha256": sha256_file(path),
        "size_bytes": path.stat().st_size,
        "dtype": dtype,
        "versions": {name: version(name) for name in ("transformers", "gguf", "torch")},
    }


def _special_tokens(tok, model) -> None:
    """bos/eos/unk/pad from the GGUF's ids (the model config carries them), pad distinct from eos."""
    config, name = model.config, tok.convert_ids_to_tokens
    ids = {k: getattr(config, f"{k}_token_id", None) for k in ("bos", "eos", "unk", "pad")}
    for key in ("bos", "eos", "unk"):
        if ids[key] is not None:
            setattr(tok, f"{key}_token", name(ids[key]))
    pad = next((ids[k] for k in ("pad", "unk", "bos") if ids[k] is not None and ids[k] != ids["eos"]), None)
    tok.pad_token = name(pad if pad is not None else ids["eos"])
    config.pad_token_id = model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    tok.clean_up_tokenization_spaces = False  # byte-level BPE: cleaning up would drop spaces
    tok.model_max_length = int(config.max_position_embeddings)


def run(cfg, run) -> dict:
    stop(problems(cfg))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, dtype = gguf_path(cfg, cfg.gguf_model.model), str(cfg.gguf_model.dtype)
    out = run.dir / "model"
    t0 = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=getattr(torch, dtype)
    )
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    if not tok.chat_template:
        raise SystemExit(f"error: {path} has no chat template (tokenizer.chat_template)")
    _special_tokens(tok, model)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    record = provenance(path, dtype)
    (out / "lazymem_provenance.json").write_text(json.dumps(record, indent=1) + "\n")
    n = sum(p.numel() for p in model.parameters())
    print(
        f"{path.name} -> {out}: {n} parameters, {dtype}, eos {tok.eos_token}, pad {tok.pad_token} "
        f"({time.monotonic() - t0:.1f}s)"
    )
    return {"model": str(out), "parameters": n, "gguf_sha256": record["sha256"]}


TASK = Task(run, problems=problems)
