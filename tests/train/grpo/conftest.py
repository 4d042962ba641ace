"""The reward with a quality judge that fails on purpose, for the tests of the judge's error-rate bound."""

from __future__ import annotations

import pytest

import lazymem.train.grpo.reward as reward_mod
from lazymem.train.grpo.quality_judge import JudgeScore


class FailingJudge:
    """Grades every kept message (2, 2), except one whose text starts with "fail": a failed call."""

    async def score(self, item) -> JudgeScore:
        if item.memory.startswith("fail"):
            return JudgeScore(None, None, error="request failed: stub")
        return JudgeScore(2, 2)


@pytest.fixture
def failing_judge(monkeypatch):
    monkeypatch.setattr(reward_mod, "get_judge", lambda cfg: FailingJudge())
