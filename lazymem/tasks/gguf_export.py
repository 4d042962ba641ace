"""task=gguf_export: a trained transformers model directory (made by task=gguf_model, then trained by
LLaMA-Factory SFT or TRL GRPO) as <run dir>/model.gguf, which llama.cpp serves (LlamaCppServer; llm=cpu's
memory model is a GGUF). lazymem/train/gguf_export.py writes it: the base GGUF's metadata (tokenizer, chat
template, hyper-parameters) with the trained weights, in gguf_export.outtype.

<run dir>/model.gguf.json records the provenance: the model directory and the sha256 of its safetensors, the
base GGUF and its sha256, the outtype, the sizes and the package versions."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

from lazymem.llm.models import ModelIntegrityError, ModelNotFound, sha256_file
from lazymem.preflight import stop
from lazymem.tasks.contract import Task
from lazymem.tasks.gguf_model import gguf_path, version

log = logging.getLogger(__name__)


def _weight_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / n for n in names]
    return [model_dir / "model.safetensors"]


def problems(cfg) -> list[str]:
    """The model directory, the base GGUF, the outtype and the gguf package, checked before a chain starts;
    where both the model and the base are there, that the model has the base's hyper-parameters."""
    from lazymem.train.gguf_export import OUTTYPES

    found = []
    opts = cfg.gguf_export
    model_dir = Path(str(opts.model)).expanduser()
    model_ok = False
    if opts.model is None:
        found.append("gguf_export.model: not set; pass gguf_export.model=<a model directory>")
    elif not (model_dir / "config.json").is_file():
        found.append(f"gguf_export.model: {str(model_dir)!r} is not a model directory (no config.json)")
    elif not all(p.is_file() for p in _weight_files(model_dir)):
        found.append(f"gguf_export.model: {str(model_dir)!r} has no model.safetensors")
    else:
        model_ok = True
    base = None
    try:
        base = gguf_path(cfg, cfg.gguf_export.base)
    except (ModelNotFound, ModelIntegrityError) as e:
        found.append(f"gguf_export.base: {e}")
    if str(opts.outtype) not in OUTTYPES:
        found.append(f"gguf_export.outtype: {opts.outtype!r} is not one of {list(OUTTYPES)}")
    if importlib.util.find_spec("gguf") is None:
        found.append("the gguf package (it reads and writes GGUF files): pip install gguf")
    elif model_ok and base is not None:
        import gguf

        from lazymem.train.gguf_export import check_config

        try:
            check_config(json.loads((model_dir / "config.json").read_text()), gguf.GGUFReader(base))
        except ValueError as e:
            found.append(f"gguf_export.model {str(model_dir)!r}: {e}")
    return found


def provenance(model_dir: Path, base: Path, out: Path, result: dict) -> dict:
    """What model.gguf.json records: which weights, on which base, how written, with which versions."""
    weights = {
        p.name: {"sha256": sha256_file(p), "size_bytes": p.stat().st_size} for p in _weight_files(model_dir)
    }
    made_from = model_dir / "lazymem_provenance.json"  # task=gguf_model's record, where the dir carries it
    return {
        "gguf": str(out),
        "size_bytes": out.stat().st_size,
        "outtype": result["outtype"],
        "tensors": result["tensors"],
        "seconds": result["seconds"],
        "model": str(model_dir),
        "weights": weights,
        "model_made_from": json.loads(made_from.read_text()).get("sha256") if made_from.is_file() else None,
        "base": str(base),
        "base_sha256": result["base_sha256"],
        "base_size_bytes": base.stat().st_size,
        "chat_template_matches_base": result["chat_template_matches_base"],
        "versions": {name: version(name) for name in ("gguf", "torch", "transformers", "safetensors")},
    }


def run(cfg, run) -> dict:
    stop(problems(cfg))
    from lazymem.train.gguf_export import export

    opts = cfg.gguf_export
    model_dir, base = Path(str(opts.model)).expanduser(), gguf_path(cfg, cfg.gguf_export.base)
    out = run.dir / "model.gguf"
    result = export(model_dir, base, out, str(opts.outtype))
    record = provenance(model_dir, base, out, result)
    if record["model_made_from"] not in (None, record["base_sha256"]):
        log.warning(
            "%s was made from a GGUF with sha256 %s, not the base %s (%s): its metadata is the base's",
            model_dir,
            record["model_made_from"],
            base,
            record["base_sha256"],
        )
    (run.dir / "model.gguf.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{model_dir} -> {out}: {opts.outtype}, {record['size_bytes']} bytes ({result['seconds']}s)")
    return {"model": str(out), "bytes": record["size_bytes"], "outtype": str(opts.outtype)}


TASK = Task(run, problems=problems)
