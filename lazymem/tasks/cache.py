"""task=cache: size and entries per model of the LLM response and embedding caches under cache.dir, and
pruning by age or model (a dry run unless cache.prune.apply=true).

Every *.sqlite file below cache.dir holding one of the two cache tables counts: llm.sqlite,
reward_judge.sqlite, embeddings/embeddings.sqlite, and any cache a config points elsewhere inside it.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

from lazymem import sqlite
from lazymem.llm import cache as llm_cache
from lazymem.retrieval import embed_cache
from lazymem.tasks.contract import Task
from lazymem.validate import ConfigError

log = logging.getLogger("lazymem")
DAY_S = 86400.0


def open_caches(root: Path) -> list[tuple[str, Path, object]]:
    """(kind, file, cache object) for every LLM or embedding cache file below `root`, sorted by path."""
    found = []
    for path in sorted(root.rglob("*.sqlite")):
        tables = sqlite.tables_of(path)
        if llm_cache.TABLE in tables:
            found.append(("llm", path, llm_cache.LLMCache(path)))
        elif embed_cache.TABLE in tables:
            found.append(("embeddings", path, embed_cache.EmbeddingCache(path.parent, path.name)))
    return found


def file_bytes(path: Path) -> int:
    """The database with its write-ahead log and shared-memory index."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())


def _prune_args(prune) -> tuple[float | None, str | None, bool]:
    days, model, apply = prune.get("older_than_days"), prune.get("model"), bool(prune.get("apply", False))
    if days is not None and (isinstance(days, bool) or not isinstance(days, int | float) or days < 0):
        raise ConfigError([f"cache.prune.older_than_days: a number of days >= 0 or null, got {days!r}"])
    if model is not None and (not isinstance(model, str) or not model):
        raise ConfigError([f"cache.prune.model: a model name or glob pattern, or null; got {model!r}"])
    if apply and days is None and model is None:
        raise ConfigError(["cache.prune.apply=true needs cache.prune.older_than_days or cache.prune.model"])
    before = time.time() - float(days) * DAY_S if days is not None else None
    return before, model, apply


def run(cfg, run) -> dict:
    root = Path(str(cfg.cache.dir))
    before, model, apply = _prune_args(cfg.cache.prune)
    pruning = before is not None or model is not None
    if not root.is_dir():
        raise ConfigError([f"cache.dir: no such folder {root} (paths.cache, $LAZYMEM_CACHE)"])
    report = {"dir": str(root), "caches": [], "prune": None}
    if pruning:
        report["prune"] = {"older_than_days": cfg.cache.prune.older_than_days, "model": model, "apply": apply}
    for kind, path, cache in open_caches(root):
        try:
            entry = {"kind": kind, "path": str(path), "bytes": file_bytes(path), "models": cache.summary()}
            if pruning:
                entry["pruned" if apply else "would_prune"] = cache.prune(before, model, apply)
                entry["bytes_after"] = file_bytes(path)
        finally:
            cache.close()
        report["caches"].append(entry)
    (run.dir / "cache.json").write_text(json.dumps(report, indent=2) + "\n")
    print(render(report))
    return report


def _size(n: int | None) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _date(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d") if t is not None else "-"


def render(report: dict) -> str:
    lines = [f"caches under {report['dir']}: {len(report['caches'])}"]
    for c in report["caches"]:
        lines += ["", f"{c['kind']}: {c['path']} ({_size(c['bytes'])})"]
        lines += ["| model | entries | size | oldest | newest |", "|---|---:|---:|---|---|"]
        for m, s in c["models"].items():
            name = m.replace("|", "\\|")  # embedding identities hold "|"
            dates = f"{_date(s['oldest'])} | {_date(s['newest'])}"
            lines.append(f"| {name} | {s['entries']} | {_size(s['bytes'])} | {dates} |")
        for key, verb in (("would_prune", "would drop"), ("pruned", "dropped")):
            if key in c:
                dropped = sum(c[key].values())
                lines.append(f"{verb} {dropped} entries" + (f" ({c[key]})" if dropped else ""))
    if report["prune"] and not report["prune"]["apply"]:
        lines += ["", "dry run: nothing deleted; add cache.prune.apply=true to delete"]
    return "\n".join(lines)


TASK = Task(run)
