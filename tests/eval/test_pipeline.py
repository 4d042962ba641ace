"""lazymem.eval.pipeline: the Answerer's prompt and its failures, and evaluate_question's record for each
outcome (ok and judged, unjudged, not applicable, a failed LLM call, a bug, a provider refusal, a pending
signal), with the answer and judge roles on the in-process stand-in server (tests/standin.py)."""

import asyncio
import signal
import socket

import pytest

from lazymem import interrupt
from lazymem.construct.processor import StageError
from lazymem.eval.judge import Judge, judge_style
from lazymem.eval.pipeline import Answerer, evaluate_question
from lazymem.llm.client import ClientConfig, LLMClient, ProviderRefused
from lazymem.methods.base import Context, MemoryBlock, NotApplicable
from lazymem.methods.oracle import OracleTurn
from lazymem.prompts import Template, load
from lazymem.tokens import count_tokens

from helpers import ask, make_history
from standin import StandinServer

HISTORY = make_history(
    [
        ("s1", "2023/01/01 (Sun) 09:00", ["I adopted a dog last week", "congrats!"]),
        ("s2", "2023/01/05 (Thu) 10:00", ["I named her Biscuit", "lovely name"]),
        ("s3", "2023/02/01 (Wed) 11:00", ["my tax forms are due", "file them early"]),
    ]
)
GOLD = ask(gold_idx=(2,))  # "What did I name the dog I adopted?", reference Biscuit, evidence message 2
WRONG_GOLD = ask(gold_idx=(4,))  # the "evidence" shown is about taxes: the answer cannot contain Biscuit


@pytest.fixture(scope="module")
def server():
    with StandinServer("standin") as s:
        yield s


def client(base_url: str) -> LLMClient:
    return LLMClient(ClientConfig(base_url, "standin", max_retries=0))


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there any more: a connection error at once


def answerer(base_url: str, raw: Template | None = None) -> Answerer:
    return Answerer(
        client(base_url), load("answer_system"), load("answer_compressed"), raw or load("answer_raw")
    )


def judge(base_url: str) -> Judge:
    style = judge_style("longmemeval", "judge_longmemeval", "judge_longmemeval_rules")
    return Judge(client(base_url), style, max_tokens=10, metrics={"answer_chars": lambda q, a: len(a)})


def run(question, method, ans, jdg, ctx=None):
    return asyncio.run(evaluate_question(question, HISTORY, method, ctx or Context(), ans, jdg))


class Fixed:
    """A method that returns a given block or raises a given exception."""

    roles, needs_retrieval = (), False

    def __init__(self, result, name="fixed"):
        self.result, self.name, self.calls = result, name, 0

    async def build(self, question, history, ctx):
        self.calls += 1
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def test_answerer_prompt_picks_the_template_of_the_memory_style():
    ans = answerer("http://unused/v1")
    raw = ans.messages(GOLD, HISTORY, MemoryBlock("[t] user: I named her Biscuit", "raw", [2]))
    compressed = ans.messages(GOLD, HISTORY, MemoryBlock("named the dog Biscuit", "compressed", [2]))
    assert [m["role"] for m in raw] == ["system", "user"]
    assert raw[0]["content"] == load("answer_system").text.strip()
    assert raw[1]["content"] == load("answer_raw").format(
        query=GOLD.text, query_time="2023/02/01 (Wed) 11:00", memory="[t] user: I named her Biscuit"
    )
    assert "verbatim" in raw[1]["content"] and "condensed notes" in compressed[1]["content"]


def test_answerer_prompt_uses_the_question_date_and_marks_an_empty_memory():
    ans = answerer("http://unused/v1")
    dated = ask(date="2023/03/01 (Wed) 08:00")
    (_, user) = ans.messages(dated, HISTORY, MemoryBlock("", "raw", []))
    assert "Query Time: 2023/03/01 (Wed) 08:00" in user["content"]  # the question's date wins
    assert "# Memory\n(no memory)\n" in user["content"]
    (_, undated) = ans.messages(GOLD, HISTORY, MemoryBlock("", "raw", []))
    assert "Query Time: 2023/02/01 (Wed) 11:00" in undated["content"]  # else the last message's time


def test_answerer_returns_the_models_final_text(server):
    memory = MemoryBlock("[2023/01/05] user: I named her Biscuit", "raw", [2])
    text, thinking, latency = asyncio.run(answerer(server.base_url)(GOLD, HISTORY, memory))
    assert "I named her Biscuit" in text and text == text.strip()  # the stand-in echoes the prompt
    assert thinking == "" and latency >= 0.0


def test_answerer_that_only_thought_is_a_stage_error(server):
    # the stand-in echoes "<think>..." unclosed: a reply with reasoning and no final text
    thinking_only = Template("think", "<think>{query} {query_time} {memory}")
    ans = answerer(server.base_url, raw=thinking_only)
    with pytest.raises(StageError, match=r"answer model gave no final text \(finish_reason=stop\)"):
        asyncio.run(ans(GOLD, HISTORY, MemoryBlock("x", "raw", [])))


def test_answerer_call_failure_is_a_stage_error_with_the_clients_message():
    with pytest.raises(StageError, match="^answer model call failed: connection error"):
        asyncio.run(answerer(closed_port_url())(GOLD, HISTORY, MemoryBlock("x", "raw", [])))


def test_ok_record_holds_memory_answer_judgement_and_latency(server):
    record = run(GOLD, OracleTurn(), answerer(server.base_url), judge(server.base_url))
    memory = "[2023/01/05 (Thu) 10:00] user: I named her Biscuit"
    assert record["status"] == "ok" and record["error"] is None
    assert (record["qid"], record["method"], record["type"]) == ("q", "oracle_turn", "single-session-user")
    assert record["reference"] == "Biscuit" and record["gold_idx"] == [2] and record["abstention"] is False
    assert record["query_time"] == "2023/02/01 (Wed) 11:00"
    assert record["memory"] == memory and record["memory_style"] == "raw" and record["shown"] == [2]
    assert record["memory_tokens"] == count_tokens(memory) > 0
    assert memory in record["answer"]  # the stand-in's answer is its prompt, memory included
    assert record["correct"] is True and record["judge_raw"] == "yes" and record["contains_reference"] is True
    assert record["scores"] == {"answer_chars": len(record["answer"])}
    assert set(record["latency_s"]) == {"answer", "judge", "total"}
    assert record["latency_s"]["total"] == record["latency_s"]["answer"]  # no retrieval or processing
    assert record["build_s"] >= 0.0


def test_answer_without_the_reference_is_judged_incorrect(server):
    record = run(WRONG_GOLD, OracleTurn(), answerer(server.base_url), judge(server.base_url))
    assert record["status"] == "ok" and "tax forms" in record["answer"]
    assert (
        record["correct"] is False and record["judge_raw"] == "no" and record["contains_reference"] is False
    )


def test_total_latency_adds_the_methods_retrieval_and_processing_to_the_answer(server):
    block = MemoryBlock(
        "I named her Biscuit", "compressed", [2], timings={"retrieval": 0.5, "processing": 0.25}
    )
    record = run(GOLD, Fixed(block), answerer(server.base_url), judge(server.base_url))
    latency = record["latency_s"]
    assert latency["retrieval"] == 0.5 and latency["processing"] == 0.25
    assert latency["total"] == pytest.approx(0.75 + latency["answer"], abs=2e-4)  # judge time not included


def test_without_a_judge_the_record_is_answered_but_unjudged(server):
    record = run(GOLD, OracleTurn(), answerer(server.base_url), None)
    assert record["status"] == "ok" and "Biscuit" in record["answer"]
    assert record["correct"] is None and record["judge_raw"] is None and record["scores"] == {}
    assert record["contains_reference"] is True  # model-free, computed with or without a judge


def test_not_applicable_method_is_recorded_unscored(server):
    record = run(
        GOLD,
        Fixed(NotApplicable("not defined for locomo")),
        answerer(server.base_url),
        judge(server.base_url),
    )
    assert record["status"] == "not_applicable" and record["error"] == "not defined for locomo"
    assert "answer" not in record and "correct" not in record and "memory" not in record
    assert record["scores"] == {"answer_chars": 0}  # the metrics of an empty answer


def test_failed_answer_call_is_an_error_record_that_keeps_the_memory(server):
    record = run(GOLD, OracleTurn(), answerer(closed_port_url()), judge(server.base_url))
    assert record["status"] == "error" and record["error"].startswith(
        "answer model call failed: connection error"
    )
    assert (
        record["memory"] == "[2023/01/05 (Thu) 10:00] user: I named her Biscuit"
    )  # built before the failure
    assert "answer" not in record and "traceback" not in record
    assert record["scores"] == {"answer_chars": 0}


def test_failed_judge_call_is_an_error_record(server):
    record = run(GOLD, OracleTurn(), answerer(server.base_url), judge(closed_port_url()))
    assert record["status"] == "error" and record["error"].startswith("judge call failed: connection error")
    assert "correct" not in record


def test_a_bug_in_a_method_is_an_error_record_with_its_traceback(server):
    record = run(GOLD, Fixed(KeyError("window")), answerer(server.base_url), judge(server.base_url))
    assert record["status"] == "error" and record["error"] == "KeyError: 'window'"
    assert "Traceback" in record["traceback"] and "KeyError" in record["traceback"]


def test_a_provider_refusal_stops_the_run(server):
    with pytest.raises(ProviderRefused, match="refused response_format"):
        run(
            GOLD,
            Fixed(ProviderRefused("m refused response_format 'json_schema'")),
            answerer(server.base_url),
            None,
        )


def test_a_pending_signal_stops_before_the_method_runs(server, monkeypatch):
    monkeypatch.setattr(interrupt, "_received", signal.SIGTERM)  # a signal some library swallowed
    method = Fixed(MemoryBlock("x", "raw", []))
    with pytest.raises(interrupt.Interrupted) as err:
        run(GOLD, method, answerer(server.base_url), judge(server.base_url))
    assert err.value.signum == signal.SIGTERM and method.calls == 0


def test_the_jobs_llm_servers_are_revived_before_each_question(server):
    class Servers:
        revived = 0

        def revive(self):
            self.revived += 1

    servers = Servers()
    ctx = Context(llms=servers)
    for _ in range(2):
        run(GOLD, OracleTurn(), answerer(server.base_url), None, ctx)
    assert servers.revived == 2
