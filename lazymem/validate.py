"""Config checks that run before any server starts or model loads: ranges, types, known keys and names.

Every problem found is reported at once, each naming the key, the value and what is allowed, so a bad
value fails in a second instead of per question after the models have loaded.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from functools import lru_cache

from hydra.utils import get_class
from omegaconf import DictConfig

from lazymem.conf import CONF_DIR
from lazymem.construct.processor import FALLBACKS
from lazymem.llm.backends import get_backend
from lazymem.llm.client import CONTEXT_POLICIES, Decoding
from lazymem.llm.llm_set import merge, to_dict
from lazymem.retrieval.bm25 import BACKENDS as BM25_BACKENDS

METHOD_CONF = CONF_DIR / "method"
# method keys that are counts, with their least allowed value
METHOD_COUNTS = {
    "n": 1,
    "top_k": 1,
    "radius": 0,
    "max_len": 1,
    "stride": 1,
    "budget_tokens": 0,
    "top_sessions": 1,
}


class ConfigError(ValueError):
    """lazymem's one error for a bad config value, the job's and the agent's settings alike: every problem
    found, each naming the key, the value and what is allowed (``problems``)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in problems))


@lru_cache(maxsize=1)
def method_presets() -> list[str]:
    """The bundled method configs (conf/method/NAME.yaml), named in error messages."""
    return [p.stem for p in sorted(METHOD_CONF.glob("*.yaml"))]


def _number(found: list[str], key: str, value, lo: float, *, integer=True, hi=None, nullable=False) -> None:
    if value is None and nullable:
        return
    kind = int if integer else (int, float)
    what = "an integer" if integer else "a number"
    bounds = f">= {lo}" + (f" and <= {hi}" if hi is not None else "")
    if (
        isinstance(value, bool)
        or not isinstance(value, kind)
        or value < lo
        or (hi is not None and value > hi)
    ):
        found.append(f"{key} = {value!r}: must be {what} {bounds}" + (" or null" if nullable else ""))


def _one_of(found: list[str], key: str, value, allowed) -> None:
    if value not in allowed:
        found.append(f"{key} = {value!r}: allowed values are {', '.join(map(str, allowed))}")


def _methods(cfg: DictConfig, found: list[str]) -> None:
    entries = [(f"methods.{k}", v) for k, v in (cfg.get("methods") or {}).items()]
    if not entries and cfg.get("method") is not None:
        entries = [("method", cfg.method)]
    for key, spec in entries:
        if not isinstance(spec, DictConfig):
            found.append(
                f"{key} = {spec!r} is not a method config: add one with +method@{key}=NAME, NAME one of "
                + ", ".join(method_presets())
                + " (or a method config of your own on the search path)"
            )
            continue
        target = spec.get("_target_")
        try:
            cls = get_class(target)
        except Exception as e:  # Hydra wraps import errors of every kind
            found.append(f"{key}._target_ = {target!r} cannot be imported: {str(e).splitlines()[0]}")
            continue
        if not inspect.iscoroutinefunction(getattr(cls, "build", None)):
            found.append(
                f"{key}._target_ = {target!r} is not a method: it has no async build(question, history, ctx) "
                "(lazymem.methods.base.Method)"
            )
            continue
        params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        unknown = sorted(set(spec) - set(params) - {"_target_"})
        if unknown:
            found.append(f"{key}: unknown key(s) {', '.join(unknown)}; {target} takes {', '.join(params)}")
        for name, lo in METHOD_COUNTS.items():
            if name in spec:
                _number(found, f"{key}.{name}", spec[name], lo, nullable=name == "n")
        if spec.get("construct") is not None and spec.construct != cfg.get("construct"):
            _construct(found, f"{key}.construct", spec.construct)  # its own, not the job's (checked once)


def _construct(found: list[str], key: str, construct) -> None:
    invalid = construct.get("invalid") if construct is not None else None
    if invalid is not None:
        _one_of(found, f"{key}.invalid.fallback", invalid.get("fallback", "raw"), FALLBACKS)
        _number(found, f"{key}.invalid.retries", invalid.get("retries", 0), 0)


def _llm(cfg: DictConfig, found: list[str]) -> None:
    llm = to_dict(cfg.llm)
    decoding_keys = {f.name for f in fields(Decoding)}
    for role, over in (llm.get("roles") or {}).items():
        rc, key = merge(llm.get("common") or {}, over or {}), f"llm.roles.{role}"
        try:
            get_backend(rc)  # an unknown backend, or an endpoint's unknown dialect, raises
        except ValueError as e:
            found.append(f"{key}.{e}")
        for name, lo in (("concurrency", 1), ("max_retries", 0)):
            if name in rc:
                _number(found, f"{key}.{name}", rc[name], lo)
        if "timeout_s" in rc:
            _number(found, f"{key}.timeout_s", rc["timeout_s"], 0.001, integer=False)
        if "context_policy" in rc:
            _one_of(found, f"{key}.context_policy", rc["context_policy"], CONTEXT_POLICIES)
        _number(found, f"{key}.context_tokens", rc.get("context_tokens"), 1, nullable=True)
        decoding = rc.get("decoding") or {}
        unknown = sorted(set(decoding) - decoding_keys)
        if unknown:
            found.append(
                f"{key}.decoding: unknown key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(decoding_keys))}"
            )
        _number(found, f"{key}.decoding.max_tokens", decoding.get("max_tokens"), 1, nullable=True)
        _number(
            found, f"{key}.decoding.temperature", decoding.get("temperature"), 0, integer=False, nullable=True
        )
        _number(found, f"{key}.decoding.top_p", decoding.get("top_p"), 0, integer=False, hi=1, nullable=True)


def _retrieval(cfg: DictConfig, found: list[str]) -> None:
    retrieval = cfg.get("retrieval")
    if retrieval is None:
        return
    if "n" in retrieval:
        _number(found, "retrieval.n", retrieval.n, 1)
    if "rerank_candidates" in retrieval:
        _number(found, "retrieval.rerank_candidates", retrieval.rerank_candidates, 1, nullable=True)
    bm25 = (retrieval.get("retrievers") or {}).get("bm25") or (retrieval if "k1" in retrieval else None)
    if bm25 is not None and "backend" in bm25:
        where = "retrieval.retrievers.bm25" if bm25 is not retrieval else "retrieval"
        _one_of(found, f"{where}.backend", bm25.backend, BM25_BACKENDS)


def problems(cfg: DictConfig) -> list[str]:
    found: list[str] = []
    if "w" in cfg:
        _number(found, "w", cfg.w, 0)
    _number(found, "max_error_rate", cfg.get("max_error_rate", 0.0), 0, integer=False, hi=1)
    if "latency" in cfg:
        _number(found, "latency.warmup", cfg.latency.warmup, 0)
        _number(found, "latency.repeats", cfg.latency.repeats, 1)
    if "data" in cfg and "limit" in cfg.data:
        _number(found, "data.limit", cfg.data.limit, 1, nullable=True)
    if "coverage" in cfg:
        for i, r in enumerate(cfg.coverage.radii):
            _number(found, f"coverage.radii[{i}]", r, 0)
    if cfg.get("construct") is not None:
        _construct(found, "construct", cfg.construct)
    _retrieval(cfg, found)
    _methods(cfg, found)
    if cfg.get("llm") is not None:
        _llm(cfg, found)
    return found


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` listing every problem of `cfg`."""
    found = problems(cfg)
    if found:
        raise ConfigError(found)
