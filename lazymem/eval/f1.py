"""LoCoMo's own QA metric: token F1 between the answer and the reference, per question category.

Reimplements the rules of the benchmark's evaluation code (snap-research/LoCoMo, task_eval/evaluation.py,
`eval_question_answering`): text is lower-cased, commas and ASCII punctuation are removed, the words
a/an/the/and are dropped, and every token is Porter-stemmed (NLTK's default mode, as there). Then by the
dataset's category id:
- 1 (multi-hop): answer and reference are split at commas; each reference part takes its best F1 against
  any answer part, and the parts are averaged;
- 2, 3, 4: plain token F1; for 3 only the reference text before the first ";" counts;
- 5 (adversarial): 1 when the answer says "no information available" or "not mentioned", else 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping

from nltk.stem import PorterStemmer

from lazymem.data.schema import Question

# the dataset's category ids -> the rule its evaluation code applies to them
RULES = {1: "multi_answer", 2: "single", 3: "first_alternative", 4: "single", 5: "abstain"}
ABSTAIN_PHRASES = ("no information available", "not mentioned")
_DROPPED = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_stemmer = PorterStemmer()


def tokens(text: str) -> list[str]:
    """The normalised, stemmed tokens of a text."""
    text = text.replace(",", "").lower().translate(_PUNCTUATION)
    return [_stemmer.stem(w) for w in _DROPPED.sub(" ", text).split()]


def token_f1(answer: str, reference: str) -> float:
    pred, ref = tokens(answer), tokens(reference)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(answer: str, reference: str) -> float:
    """Mean over the reference's comma-separated parts of the best F1 against any part of the answer."""
    parts = [p.strip() for p in answer.split(",")]
    refs = [r.strip() for r in reference.split(",")]
    return sum(max(token_f1(p, r) for p in parts) for r in refs) / len(refs)


def score(rule: str, answer: str, reference: str) -> float:
    if rule == "multi_answer":
        return multi_answer_f1(answer, reference)
    if rule == "first_alternative":
        return token_f1(answer, reference.split(";")[0].strip())
    if rule == "abstain":
        return float(any(p in answer.lower() for p in ABSTAIN_PHRASES))
    return token_f1(answer, reference)


class LocomoF1:
    """Token F1 of an answer to a LoCoMo question, by the rule of its category.

    `category_names` is the data config's id -> name map (conf/data/locomo.yaml): questions carry the
    name, the rules follow the dataset's ids. Questions of other types get None (not scored).
    """

    def __init__(self, category_names: Mapping):
        self.rules = {str(name): RULES[int(cid)] for cid, name in category_names.items() if int(cid) in RULES}

    def __call__(self, question: Question, answer: str) -> float | None:
        rule = self.rules.get(question.type)
        return None if rule is None else score(rule, answer or "", question.answer)
