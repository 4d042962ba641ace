"""The LLM judge: correct / incorrect against the reference, with the raw judge text kept.

Two styles, after each benchmark's official harness:
- `longmemeval`: a yes/no question whose rule depends on the question type (off-by-one day counts
  tolerated for temporal reasoning, updated value required for knowledge updates, rubric grading for
  preference questions, "not available" required for abstention questions).
- `locomo`: generous CORRECT/WRONG grading; any date format that names the same date counts.
A judge reply with no recognisable label is a judge error (counted), never a silent "incorrect".
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from lazymem.construct.decisions import split_thinking
from lazymem.data.schema import Question
from lazymem.prompts import load, load_json

STYLES = ("longmemeval", "locomo")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_CORRECT_WRONG = re.compile(r"\b(correct|wrong|incorrect)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    correct: bool | None  # None when the judge call failed or its reply had no label
    raw: str
    error: str | None = None


def style_for(dataset_name: str, style: str = "auto") -> str:
    if style != "auto":
        if style not in STYLES:
            raise ValueError(f"judge style {style!r} not in {STYLES}")
        return style
    return "locomo" if dataset_name == "locomo" else "longmemeval"


class JudgePrompts:
    """The judge's templates, loaded once (each overridable by path)."""

    def __init__(
        self,
        longmemeval: str = "judge_longmemeval",
        rules: str = "judge_longmemeval_rules",
        locomo: str = "judge_locomo",
    ):
        self.longmemeval = load(longmemeval)
        self.rules = load_json(rules)
        self.locomo = load(locomo)

    @property
    def version(self) -> str:
        rules = hashlib.sha256(json.dumps(self.rules, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.longmemeval.version}-{self.locomo.version}-{rules}"

    def messages(self, style: str, question: Question, response: str) -> list[dict]:
        if style == "locomo":
            text = self.locomo.format(question=question.text, answer=question.answer, response=response)
        else:
            key = "abstention" if question.abstention else question.type
            rule = self.rules.get(key, self.rules["default"])
            text = self.longmemeval.format(
                question=question.text, answer=question.answer, response=response, rule=rule
            )
        return [{"role": "user", "content": text}]


def parse_label(style: str, text: str) -> bool | None:
    """The judge's label: the first yes/no (CORRECT/WRONG) after any thinking; None if there is none."""
    _, final = split_thinking(text or "")
    pattern = _CORRECT_WRONG if style == "locomo" else _YES_NO
    match = pattern.search(final)
    if not match:
        return None
    return match.group(1).lower() in ("yes", "correct")


def contains_reference(question: Question, answer: str) -> bool | None:
    """A model-free cross-check of the judge: does the answer contain the reference answer verbatim?

    Only for short factual references; None for abstention and preference questions (rubrics) and for
    references longer than eight words. Useful where the judge is a small model.
    """
    ref = _normal(question.answer)
    if question.abstention or question.type.endswith("preference") or not ref or len(ref.split()) > 8:
        return None
    return ref in _normal(answer)


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w$%.]+", " ", text.lower()).replace(". ", " ").split()).strip(" .")
