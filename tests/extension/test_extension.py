"""Extending lazymem from outside the package (this folder's modules and configs, copied elsewhere first):
an LLM backend, a benchmark with its own judge and metric, and a method, each one module plus one config
file on Hydra's search path, with no edit of lazymem/.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from lazymem.conf import CONF_DIR
from lazymem.llm.client import json_schema_format
from lazymem.llm.llm_set import LLMSet
from lazymem.preflight import problems as preflight_problems
from lazymem.validate import problems as validate_problems

from helpers import EXTENSION

FIXED = "llm.common.toy.reply='<think>toy thoughts</think>[]'"


@pytest.fixture
def outside(tmp_path, monkeypatch, toy_modules):
    """tests/extension's modules and configs (not this test) copied to a folder of its own: modules on
    sys.path, configs on the search path."""
    folder = tmp_path / "ext"
    shutil.copytree(EXTENSION, folder, ignore=shutil.ignore_patterns("test_*.py", "__pycache__"))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("TOY_BENCH_DIR", str(folder))
    return folder


def composed(folder, *overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        search = f"hydra.searchpath=[file://{folder / 'conf'}]"
        return compose("config", overrides=["llm=toy", search, *overrides])


def test_a_backend_added_from_outside_serves_every_role(outside):
    cfg = composed(outside, FIXED)
    assert validate_problems(cfg) == []
    assert preflight_problems(cfg, [], {}) == []
    with LLMSet(cfg.llm, outside / "logs") as llms:
        memory = llms["memory"]
        schema = {"type": "array", "items": {"type": "object"}}
        reply = asyncio.run(
            memory.chat([{"role": "user", "content": "q"}], response_format=json_schema_format(schema))
        )
        assert len(llms.registry) == 1  # all roles on the one toy server
    import toy_backend  # the module the config named, imported by the backend lookup

    (body,) = toy_backend.BODIES
    assert body["model"] == "toy-1" and body["toy_think_tokens"] == 32
    assert body["response_format"] == {"type": "toy_grammar", "grammar": schema}  # the toy dialect
    assert reply.ok and (reply.text, reply.reasoning) == ("[]", "toy thoughts")  # parsed once, in Completion
    assert memory.cfg.model_id == "toy-weights@toy:tiny"


def test_validate_and_preflight_ask_the_toy_backend(outside):
    assert preflight_problems(composed(outside, "llm.common.model=tiny"), [], {}) == [
        "llm.roles.answer.model = 'tiny': a toy model is named toy:NAME",
        "llm.roles.judge.model = 'tiny': a toy model is named toy:NAME",
    ]
    typo = validate_problems(composed(outside, "+llm.roles.judge.backend=toy_backend.TyoBackend"))
    assert len(typo) == 1 and typo[0].startswith(
        "llm.roles.judge.backend = 'toy_backend.TyoBackend' cannot be"
    )


def evaluate(
    folder: Path, run_dir: Path, *overrides: str, task: str = "evaluate", method: str = "recent"
) -> subprocess.CompletedProcess:
    """`python -m lazymem.run task=evaluate` (or another `task`) on the toy benchmark, method and backend,
    from `folder`."""
    env = {**os.environ, "PYTHONPATH": str(folder), "TOY_BENCH_DIR": str(folder)}
    env["LAZYMEM_CACHE"] = str(folder / "cache")
    cmd = [sys.executable, "-m", "lazymem.run", f"task={task}", "data=toy", f"method={method}", "llm=toy"]
    cmd += [f"hydra.searchpath=[file://{folder / 'conf'}]", f"hydra.run.dir={run_dir}", "logger=none"]
    return subprocess.run(cmd + list(overrides), cwd=folder, env=env, capture_output=True, text=True)


def test_a_benchmark_and_a_method_of_your_own_run_end_to_end(outside, tmp_path):
    """The toy method's memory decides the answer; the benchmark's own judge prompt and metric score it."""
    enough = evaluate(outside, tmp_path / "k3", "method.k=3")  # the pet's message is among the last 3
    assert enough.returncode == 0, enough.stderr[-3000:]
    too_few = evaluate(outside, tmp_path / "k2", "method.k=2")
    assert too_few.returncode == 0, too_few.stderr[-3000:]

    def results(run_dir):
        summary = json.loads((run_dir / "summary.json").read_text())
        (bench,) = summary["benchmarks"].values()
        records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
        return bench, records

    bench, records = results(tmp_path / "k3")
    assert bench["judge"]["style"] == "locomo"
    assert bench["judge"]["prompts"] == str((outside / "judge_toy.txt").resolve())  # its own prompt
    assert bench["judge"]["max_tokens"] == 8 and bench["judge"]["metrics"] == ["exact"]
    assert [r["judge_raw"] for r in records] == ["CORRECT", "CORRECT"]
    assert all(r["scores"] == {"exact": 1.0} and r["shown"] == [1, 2, 3] for r in records)
    method = bench["methods"]["recent"]
    assert method["accuracy"] == 1.0 and method["exact"] == 1.0

    bench, records = results(tmp_path / "k2")
    assert [r["judge_raw"] for r in records] == ["WRONG", "WRONG"]
    assert bench["methods"]["recent"]["accuracy"] == 0.0 and bench["methods"]["recent"]["exact"] == 0.0


def test_a_retriever_of_your_own_joins_the_fusion(outside):
    from hydra.utils import instantiate

    from lazymem.data.schema import History, Message

    cfg = composed(
        outside,
        "+retrieval/retriever@retrieval.retrievers.recency=recency",
        "retrieval.retrievers.dense=null",
    )
    assert validate_problems(cfg) == []
    retriever = instantiate(cfg.retrieval)
    texts = ["my dog is called Rex", "hello", "the weather is nice", "bye"]
    history = History("h", [Message(i, "s", "t", "user", t) for i, t in enumerate(texts)])
    result = retriever.search(history, "what is my dog called?", 4)
    assert result.ranked == {"bm25": (0,), "recency": (3, 2, 1, 0)}  # both lists entered the fusion
    assert result.indices[0] == 0 and set(result.indices) == {0, 1, 2, 3}


# the toy retriever with only the research hooks as the job's one retriever
RECENCY_ONLY = (
    "+retrieval/retriever@retrieval.retrievers.recency=recency",
    "retrieval.retrievers.dense=null",
    "retrieval.retrievers.bm25=null",
)


def test_a_retriever_with_only_the_research_hooks_runs_coverage_and_evaluate(outside, tmp_path):
    """build, problems and gpu_keys are all a retriever needs for the research tasks."""
    coverage = evaluate(outside, tmp_path / "coverage", *RECENCY_ONLY, "retrieval.n=2", task="coverage")
    assert coverage.returncode == 0, coverage.stderr[-3000:]
    report = json.loads((tmp_path / "coverage" / "coverage.json").read_text())
    assert report["n"] == 2 and report["questions"] == 2
    assert set(report["retrieval"]["query_s"]) >= {"recency", "total"}  # its own stage was timed
    for top_k, verdict in ((3, "CORRECT"), (2, "WRONG")):  # the pet's message is the 3rd most recent
        run_dir = tmp_path / f"rag{top_k}"
        done = evaluate(outside, run_dir, *RECENCY_ONLY, f"method.top_k={top_k}", method="rag")
        assert done.returncode == 0, done.stderr[-3000:]
        records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
        assert [r["judge_raw"] for r in records] == [verdict, verdict]


def test_a_retriever_with_its_own_per_user_cache_forgets_with_the_user(outside, tmp_path):
    """Its per-user form writes into the user's storage only, and appends after an add (the port's
    `extend`); a forget removes what it derived."""
    from toy_retriever import SeenRetriever

    from lazymem import Memory
    from lazymem.retrieval.per_user import PerUserRetriever

    assert isinstance(SeenRetriever(), PerUserRetriever)

    overrides = [
        f"hydra.searchpath=[file://{outside / 'conf'}]",
        "method=rag",
        "method.top_k=2",
        "+retrieval/retriever@retrieval.retrievers.seen=seen",
        "retrieval.retrievers.dense=null",
        f"agent.dir={tmp_path / 'data'}",
        f"paths.cache={tmp_path / 'cache'}",
    ]
    with Memory.from_config(overrides) as memory:
        memory.add("alice", [{"role": "user", "text": "my canary is zq-4471"}])
        memory.add("bob", [{"role": "user", "text": "nothing to see"}])
        assert "zq-4471" in memory.query("alice", "what is my canary?").text
        memory.query("bob", "anything?")
        seen = {p.read_text() for p in (tmp_path / "data").rglob("seen.txt")}
        assert seen == {"my canary is zq-4471", "nothing to see"}  # one file per user, in the user's storage
        memory.add("bob", [{"role": "user", "text": "a second line"}])
        memory.query("bob", "anything?")
        seen = {p.read_text() for p in (tmp_path / "data").rglob("seen.txt")}
        assert seen == {"my canary is zq-4471", "nothing to see\na second line"}
        memory.forget_all("alice")
        left = [p.read_text() for p in (tmp_path / "data").rglob("seen.txt")]
        assert left == ["nothing to see\na second line"]
    assert not any("zq-4471" in p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())


def test_a_benchmark_with_a_decision_rule_of_your_own(outside):
    """A judge style from outside (one module, one data config): its prompt, its labels, its rule named in
    the summary's judge identity."""
    from types import SimpleNamespace

    from lazymem.data.schema import Question
    from lazymem.eval.judge import Judge
    from lazymem.llm.client import Decoding

    class Client:
        def __init__(self, reply):
            self.reply, self.sent = reply, []
            self.cfg = SimpleNamespace(served_name="judge", model_id="", decoding=Decoding(temperature=0.0))

        async def chat(self, messages, **kwargs):
            self.sent.append(messages[0]["content"])
            return SimpleNamespace(text=self.reply, error=None, latency_s=0.0, finish_reason="stop")

    data = composed(outside, "data=toy_scored").data
    q = Question("q1", "single", "What is my pet called?", "Rex", "h1")
    labels = {}
    for reply in ("SCORE: 9", "SCORE: 3", "no idea"):
        client = Client(reply)
        judge = Judge.from_config(client, data)
        labels[reply] = asyncio.run(judge(q, "Your dog is Rex."))[0]
        assert "Reference: Rex" in client.sent[0] and "Reply with one line: SCORE" in client.sent[0]
    assert labels == {"SCORE: 9": True, "SCORE: 3": False, "no idea": None}
    assert judge.identity["style"] == "score" and "n >= 7" in judge.identity["decision_rule"]
    assert judge.identity["metrics"] == ["exact"]  # the benchmark's metrics come along from toy.yaml
