"""The GRPO reward (paper Eq. 6-9): gate, action reward, quality reward with a stub judge, VERL dict shape."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import lazymem.train.grpo.reward as reward_mod
from lazymem.conf import CONF_DIR
from lazymem.construct.decisions import ERROR_CODES
from lazymem.llm.llm_set import role_config
from lazymem.train.grpo.curriculum import ENV_STATE, Curriculum
from lazymem.train.grpo.quality_judge import (
    JudgeConfig,
    JudgeScore,
)
from lazymem.train.grpo.reward import (
    RESULT_KEYS,
    RewardOptions,
    compute_score,
    compute_score_async,
)
from lazymem.train.grpo.rl_rows import ground_truth_json

K, D = "KEEP", "DROP"


def truth(gold: list[bool]) -> str:
    msgs = [
        {"role": "user", "content": f"message {i}", "timestamp": f"2023/05/0{i + 1}"}
        for i in range(len(gold))
    ]
    return ground_truth_json(
        query="Where did I go?", query_time="2023/06/01", messages=msgs, gold=gold, answer="Paris"
    )


def response(ops: list[str], contents: list[str] | None = None) -> str:
    contents = contents or [f"kept {i}" for i in range(len(ops))]
    items = [
        {"op": op, "compressed_content": c if op == K else "", "reason": "r"}
        for op, c in zip(ops, contents, strict=True)
    ]
    return json.dumps(items)


class StubJudge:
    """Grades by memory text; records calls and how many overlap in time."""

    def __init__(self, grades: dict[str, tuple[int, int] | None] | None = None, delay: float = 0.0):
        self.grades, self.delay = grades or {}, delay
        self.calls: list[str] = []
        self.in_flight = self.max_in_flight = 0

    async def score(self, item) -> JudgeScore:
        self.calls.append(item.memory)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        grade = self.grades.get(item.memory, (2, 2))
        if grade is None:
            return JudgeScore(None, None, error="unparsable reply: stub")
        return JudgeScore(*grade)


@pytest.fixture
def judge(monkeypatch) -> StubJudge:
    stub = StubJudge()
    monkeypatch.setattr(reward_mod, "get_judge", lambda cfg: stub)
    return stub


@pytest.fixture
def no_judge(monkeypatch):
    def forbidden(cfg):
        raise AssertionError("the judge must not be used while lambda = 0")

    monkeypatch.setattr(reward_mod, "get_judge", forbidden)
    monkeypatch.delenv(ENV_STATE, raising=False)


def test_all_gold_kept_half_nongold_dropped(no_judge):
    out = compute_score("lazymem", response([K, K, D, D, K, K]), truth([True, True] + [False] * 4))
    assert out["format_ok"] == 1.0 and out["gate_error"] is None
    assert out["a_gold"] == 1.0 and out["a_nongold"] == 0.5
    assert out["r_act"] == pytest.approx(0.915 * 1 + 0.085 * 0.5)
    assert out["score"] == pytest.approx(0.9575)
    assert out["n_keep"] == 4 and out["phase"] == 1 and out["lam"] == 0.0 and out["r_qual"] is None


def test_gold_dropped(no_judge):
    out = compute_score("lazymem", response([D, D, D]), truth([True, False, False]))
    assert (out["a_gold"], out["a_nongold"]) == (0.0, 1.0)
    assert out["score"] == pytest.approx(0.085)
    out = compute_score("lazymem", response([K, D, D, D]), truth([True, True, False, False]))
    assert out["score"] == pytest.approx(0.915 * 0.5 + 0.085 * 1.0)


def test_absent_category_is_none_even_for_invalid_output(no_judge):
    out = compute_score("lazymem", "[", truth([False, False]))
    assert out["a_gold"] is None and out["a_nongold"] == 0.0 and out["gate_error"] == "truncated"


def test_one_category_windows_use_that_accuracy(no_judge):
    out = compute_score("lazymem", response([D, D, D]), truth([False, False, False]))
    assert out["a_gold"] is None and out["a_nongold"] == 1.0 and out["score"] == 1.0 and out["n_keep"] == 0
    out = compute_score("lazymem", response([K, D, D, K]), truth([False] * 4))
    assert out["score"] == 0.5
    out = compute_score("lazymem", response([K, D]), truth([True, True]))
    assert out["a_nongold"] is None and out["score"] == 0.5


ITEM = {"op": "KEEP", "compressed_content": "c", "reason": "r"}
DROP_ITEM = {"op": "DROP", "compressed_content": "", "reason": "r"}
VIOLATIONS = {
    "empty": "   ",
    "not_json": "Here you go: []",
    "truncated": '[{"op": "KEEP", "compressed_content": "c"',
    "trailing_text": json.dumps([ITEM, DROP_ITEM]) + " done",
    "not_array": json.dumps({"decisions": [ITEM, DROP_ITEM]}),
    "wrong_count": json.dumps([ITEM]),
    "not_object": json.dumps([ITEM, "DROP"]),
    "missing_field": json.dumps([ITEM, {"op": "DROP", "compressed_content": ""}]),
    "extra_field": json.dumps([ITEM, {**DROP_ITEM, "score": "1"}]),
    "bad_type": json.dumps([ITEM, {**DROP_ITEM, "reason": 3}]),
    "bad_op": json.dumps([ITEM, {**DROP_ITEM, "op": "drop"}]),
    "empty_keep": json.dumps([ITEM, {**ITEM, "compressed_content": "  "}]),
    "nonempty_drop": json.dumps([ITEM, {**DROP_ITEM, "compressed_content": "x"}]),
}


def test_every_gate_error_is_covered():
    assert set(VIOLATIONS) == set(ERROR_CODES)


@pytest.mark.parametrize("code", sorted(VIOLATIONS))
def test_every_gate_violation_scores_zero(code, judge):
    out = compute_score("lazymem", VIOLATIONS[code], truth([True, False]), lam=0.5)
    assert out["gate_error"] == code
    assert out["score"] == 0.0 and out["format_ok"] == 0.0
    # an invalid output made no decisions: no gold kept, no non-gold dropped
    assert (out["r_act"], out["a_gold"], out["a_nongold"], out["n_keep"], out["r_qual"]) == (
        0.0,
        0.0,
        0.0,
        0,
        0.0,
    )
    assert judge.calls == []  # invalid output: no judge calls even in phase 2


def test_phase2_mixes_action_and_quality(judge):
    judge.grades = {"good": (2, 2), "meh": (1, 0), "made up": (0, 2)}
    ops, contents = [K, K, K, D, D, D], ["good", "meh", "made up", "", "", ""]
    out = compute_score("lazymem", response(ops, contents), truth([True] + [False] * 5), lam=0.5)
    r_act = 0.915 * 1.0 + 0.085 * (3 / 5)
    r_qual = (1.0 + 0.25 + 0.0) / 3  # Q = 1[f>0](f+u)/4: unfaithful content earns nothing
    assert out["r_act"] == pytest.approx(r_act) and out["r_qual"] == pytest.approx(r_qual)
    assert out["score"] == pytest.approx(0.5 * r_act + 0.5 * r_qual)
    assert sorted(judge.calls) == ["good", "made up", "meh"]  # one call per KEEP message
    assert (out["judge_calls"], out["judge_errors"], out["phase"]) == (3, 0, 2)
    assert out["judge_s"] > 0.0  # the rollout's wait for its three concurrent calls


def test_phase2_nothing_kept_gives_zero_quality(judge):
    out = compute_score("lazymem", response([D, D]), truth([False, False]), lam=0.5)
    assert out["r_qual"] == 0.0 and out["score"] == pytest.approx(0.5) and judge.calls == []
    assert out["judge_s"] == 0.0


def test_judge_error_counts_and_scores_zero(judge):
    judge.grades = {"a": (2, 2), "b": None}
    out = compute_score("lazymem", response([K, K], ["a", "b"]), truth([True, True]), lam=0.5)
    assert out["judge_errors"] == 1 and out["r_qual"] == pytest.approx(0.5)


def test_no_judge_call_while_lambda_zero(no_judge, tmp_path):
    text, gt = response([K, K, D]), truth([True, False, False])
    assert compute_score("lazymem", text, gt)["judge_calls"] == 0  # default: phase 1
    assert compute_score("lazymem", text, gt, lam=0.0)["r_qual"] is None
    state = tmp_path / "curriculum.json"
    Curriculum(state)
    assert compute_score("lazymem", text, gt, curriculum_state=str(state))["phase"] == 1


def test_judge_calls_run_concurrently(judge):
    judge.delay = 0.2
    start = time.monotonic()
    out = compute_score("lazymem", response([K] * 5), truth([True] * 5), lam=0.5)
    assert judge.max_in_flight == 5 and out["judge_calls"] == 5
    assert time.monotonic() - start < 0.2 * 5 / 2


def test_lambda_follows_the_curriculum_file(judge, tmp_path, monkeypatch):
    state = tmp_path / "curriculum.json"
    cur = Curriculum(state, tau=0.99, lam_phase1=0.0, lam_phase2=0.5)
    text, gt = response([K, D]), truth([True, False])
    assert compute_score("lazymem", text, gt, curriculum_state=str(state))["phase"] == 1
    cur.observe_validation(0.995, step=10)
    out = compute_score("lazymem", text, gt, curriculum_state=str(state))
    assert (out["phase"], out["lam"], out["judge_calls"]) == (2, 0.5, 1)
    monkeypatch.setenv(ENV_STATE, str(state))  # the env var is the fallback path
    assert compute_score("lazymem", text, gt)["lam"] == 0.5
    assert compute_score("lazymem", text, gt, lam=0.0)["lam"] == 0.0  # an explicit lam wins


def test_same_keys_on_every_call(judge):
    gt = truth([True, False])
    outs = [
        compute_score("lazymem", response([K, D]), gt),
        compute_score("lazymem", "nonsense", gt),
        compute_score("lazymem", response([K, D]), gt, lam=0.5),
    ]
    assert outs[1]["r_qual"] is None and outs[1]["gate_error"] == "not_json"
    for out in outs:
        assert tuple(out) == RESULT_KEYS
        assert all(v is None or isinstance(v, (int, float, str)) for v in out.values())


def test_async_and_sync_agree_and_sync_works_inside_a_loop(judge):
    args = ("lazymem", response([K, K, D]), truth([True, False, False]))

    def untimed(out):  # the judge's wait is a measurement, not part of the reward
        assert out.pop("judge_s") >= 0.0
        return out

    sync = untimed(compute_score(*args, lam=0.5))
    assert untimed(asyncio.run(compute_score_async(*args, lam=0.5))) == sync

    async def inside_loop():
        return compute_score(*args, lam=0.5)

    assert untimed(asyncio.run(inside_loop())) == sync


def test_settings_are_checked(no_judge):
    args = ("lazymem", response([K]), truth([True]))
    with pytest.raises(TypeError, match="unknown settings"):
        compute_score(*args, etta=0.9)
    with pytest.raises(TypeError, match="unknown judge settings"):
        compute_score(*args, judge={"modle": "x"})
    with pytest.raises(ValueError):
        compute_score(*args, eta=1.5)
    out = compute_score(*args, reward_router_address=None, reward_model_tokenizer=None)
    assert out["score"] == 1.0


def test_config_file_builds_the_reward_settings(tmp_path, monkeypatch):
    """The judge's own settings come from reward.yaml, its LLM from the paper's reward_judge role."""
    monkeypatch.setenv(ENV_STATE, str(tmp_path / "state.json"))
    cfg = OmegaConf.load(CONF_DIR / "train" / "reward.yaml")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        llm = compose("config", overrides=["llm=paper"]).llm
    judge = {**cfg.judge, "llm": role_config(llm, "reward_judge"), "cache_path": str(tmp_path / "c.sqlite")}
    opts = RewardOptions.from_kwargs(
        {"eta": cfg.eta, "judge": judge, "curriculum_state": cfg.curriculum.state_path}
    )
    rc = opts.judge.llm
    assert opts.eta == 0.915 and opts.judge.parse_retries == 1 and opts.judge.template is None
    assert (rc["backend"], rc["base_url"], rc["dialect"], rc["served_name"]) == (
        "endpoint",
        "http://127.0.0.1:8000/v1",
        "vllm",
        "qwen3-32b",
    )
    dec = rc["decoding"]
    assert (dec["temperature"], dec["max_tokens"], dec["thinking"], dec["thinking_budget"]) == (
        0.0,
        1024,
        True,
        512,
    )
    assert (rc["timeout_s"], rc["max_retries"], rc["structured"]) == (180, 3, True)
    cur = Curriculum(**{k: cfg.curriculum[k] for k in ("state_path", "tau", "lam_phase1", "lam_phase2")})
    assert (cur.tau, cur.lam_phase1, cur.lam_phase2, cur.phase) == (0.99, 0.0, 0.5, 1)
    assert opts.lam_phase() == (0.0, 1)
    assert JudgeConfig.from_mapping(OmegaConf.create(judge)) == opts.judge


def test_curriculum_settings_pass_through_and_phase1_lambda_applies_before_the_state_file(judge, tmp_path):
    """VERL hands every reward_kwarg to the reward: the trainer's own (tau, lam_phase2) are accepted, and
    lam_phase1 is the lambda until the trainer has written the state file."""
    text, gt = response([K, D]), truth([True, False])
    missing = str(tmp_path / "not-yet.json")
    kw = {"curriculum_state": missing, "tau": 0.99, "lam_phase2": 0.5}
    assert compute_score("lazymem", text, gt, lam_phase1=0.0, **kw)["lam"] == 0.0
    out = compute_score("lazymem", text, gt, lam_phase1=0.25, **kw)
    assert (out["lam"], out["phase"], out["judge_calls"]) == (0.25, 1, 1)
    with pytest.raises(TypeError, match="unknown settings"):
        compute_score("lazymem", text, gt, tua=0.99)
