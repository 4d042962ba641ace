"""The paper's DeepSeek roles (conf/llm/paper.yaml) against a stand-in that answers as DeepSeek-V4's API
does (tests/standin.py, deepseek=True): it thinks unless the body disables it, counts the reasoning in
max_tokens and may blank a JSON-mode reply. Behaviour tests on the CPU, each through the client the run
builds (lazymem.llm.llm_set.build_client) from the composed paper experiment."""

from __future__ import annotations

import asyncio

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from lazymem.conf import CONF_DIR
from lazymem.construct.processor import InvalidPolicy, MemoryProcessor, StageError
from lazymem.construct.windows import Window
from lazymem.data.schema import Message, Question
from lazymem.eval.judge import Judge
from lazymem.llm.llm_set import ServerRegistry, build_client, role_config
from lazymem.prompts import load
from lazymem.train import sft_data

from standin import REASONING, StandinServer

QUESTION = Question("q", "temporal-reasoning", "How many days ago did I buy the bike?", "19 days", "h")


def composed(experiment: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[f"+experiment={experiment}"])


def client(cfg, role: str, server: StandinServer, tmp_path, **decoding):
    """The role's client as the run builds it, pointed at the stand-in instead of DeepSeek's API."""
    rc = role_config(cfg.llm, role)
    rc.update(base_url=server.base_url, api_key_env=None, max_retries=0)
    rc["decoding"].update(decoding)
    return build_client(rc, ServerRegistry(tmp_path))


def test_the_judge_turns_deepseeks_thinking_off_and_gets_a_label(tmp_path):
    cfg = composed("main_table")
    with StandinServer("deepseek-v4-pro", deepseek=True, answers_as="deepseek-v4-pro-0501") as server:
        # the request the judge sent before (paper.yaml's thinking: null): DeepSeek thinks through
        # LongMemEval's 10 tokens and the reply holds no label
        before = Judge.from_config(
            client(cfg, "judge", server, tmp_path, thinking=None), cfg.benchmarks.longmemeval
        )
        with pytest.raises(StageError, match=r"judge gave no final text \(finish_reason=length\)"):
            asyncio.run(before(QUESTION, "You bought it 19 days ago."))
        assert "thinking" not in server.bodies[-1] and server.bodies[-1]["max_tokens"] == 10
        judge = Judge.from_config(client(cfg, "judge", server, tmp_path), cfg.benchmarks.longmemeval)
        label, raw, _ = asyncio.run(judge(QUESTION, "You bought it 19 days ago."))
        assert (label, raw) == (True, "yes")
    sent = server.bodies[-1]
    assert sent["thinking"] == {"type": "disabled"} and "chat_template_kwargs" not in sent
    assert (sent["max_tokens"], sent["temperature"]) == (10, 0.0)
    assert judge.client.stats()["server"]["answered_as"] == {"deepseek-v4-pro-0501": 1}


def window_item() -> sft_data.WindowItem:
    messages = [
        Message(0, "s1", "2023/05/01", "user", "I bought a red bike today."),
        Message(1, "s1", "2023/05/01", "assistant", "Enjoy the rides!"),
    ]
    processor = MemoryProcessor(None, load("memory_system"), load("memory_user"), InvalidPolicy())
    window = Window((0, 1), (0,), 0)
    chat = processor.prompt(QUESTION.text, "2023/05/20", window, messages)
    return sft_data.WindowItem(QUESTION, window, chat, (True, False), tuple(messages))


def test_the_teacher_thinks_and_decodes_freely_so_a_blank_json_mode_reply_cannot_happen(tmp_path):
    """DeepSeek's JSON mode may blank a reply (here: the first json_object reply). The paper's teacher
    decodes freely and the format gate validates: its window is annotated, with DeepSeek's reasoning."""
    cfg = composed("build_sft")
    with StandinServer("deepseek-v4-flash", deepseek=True, json_blanks=1) as server:
        teacher = client(cfg, "teacher", server, tmp_path)
        done, reason, code = asyncio.run(sft_data.annotate_one(teacher, window_item(), "v1", True))
    assert (reason, code) == (None, None)
    assert [d.op for d in done.decisions] == ["KEEP", "DROP"] and done.reasoning == REASONING
    sent = server.bodies[-1]
    assert "response_format" not in sent and sent["thinking"] == {"type": "enabled"}
    assert sent["reasoning_effort"] == "high" and sent["max_tokens"] == 16384


def test_the_reward_judge_thinks_within_its_budget_on_vllm():
    """E.2's quality-reward judge: thinking on, said explicitly, with its 512-token budget (config)."""
    rc = role_config(composed("train_grpo").llm, "reward_judge")
    assert (rc["dialect"], rc["decoding"]["thinking"], rc["decoding"]["thinking_budget"]) == (
        "vllm",
        True,
        512,
    )
