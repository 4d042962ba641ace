"""A judge decision rule defined outside lazymem: the judge scores the reply from 0 to 10, and a score of 7
or more is correct (a reply without a score is a judge error, counted, never a silent "incorrect")."""

from __future__ import annotations

import re

from lazymem.eval.judge import JudgeStyle

_SCORE = re.compile(r"SCORE:\s*(\d+)")


class ScoreStyle(JudgeStyle):
    name = "score"
    rule = "SCORE: n out of 10 in the reply; correct iff n >= 7; no score = judge error"

    def label(self, final: str) -> bool | None:
        match = _SCORE.search(final)
        return None if match is None else int(match.group(1)) >= 7
