"""The LLM judge: correct / incorrect against the reference, with the raw judge text kept.

Two styles (decision rule and prompt layout); every benchmark's data config declares its judge under
`judge:` (style, prompt, rules, output budget), so a new benchmark never inherits another's:
- `longmemeval`: a yes/no question whose rule depends on the question type (off-by-one day counts
  tolerated for temporal reasoning, updated value required for knowledge updates, rubric grading for
  preference questions, "not available" required for abstention questions). The decision rule is the
  official script's: a reply is correct when it contains "yes" (any case). The prompts are ours, or the
  official ones built at run time from the user's own checkout of the LongMemEval repository
  (`judge.official_src` of the data config); no third-party prompt text ships with this package.
- `locomo`: generous CORRECT/WRONG grading; any date format that names the same date counts. A reply
  with no recognisable label is a judge error (counted), never a silent "incorrect". LoCoMo's own
  evaluation has no LLM judge (its metric is token F1, lazymem/eval/f1.py, computed beside it).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
from pathlib import Path

from lazymem.data.schema import Question
from lazymem.prompts import load, load_json

STYLES = ("longmemeval", "locomo")
_CORRECT_WRONG = re.compile(r"\b(correct|wrong|incorrect)\b", re.IGNORECASE)
# How a judge reply becomes a label, per style (written into every summary).
DECISION_RULES = {
    "longmemeval": "correct iff the reply contains 'yes', any case (LongMemEval's evaluate_qa.py)",
    "locomo": "first CORRECT / WRONG / INCORRECT in the reply; none = judge error",
}
# Where LongMemEval's own judge prompts live in a checkout of its repository, and their builder.
OFFICIAL_FILE = "src/evaluation/evaluate_qa.py"
OFFICIAL_FUNCTION = "get_anscheck_prompt"


def load_official(src: str):
    """LongMemEval's prompt builder from the user's checkout at `src`, and the sha256 of its file.

    Only the builder function (and plain constants) of evaluate_qa.py are executed, so the script's
    top-level imports (openai, backoff, tqdm) and its main block never run.
    """
    path = Path(src).expanduser() / OFFICIAL_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"judge.official_src={src}: {path} not found; point it at a checkout of "
            "https://github.com/xiaowu0162/LongMemEval"
        )
    data = path.read_bytes()
    tree = ast.parse(data, filename=str(path))
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == OFFICIAL_FUNCTION:
            node.decorator_list = []
            body.append(node)
        elif isinstance(node, ast.Assign) and _literal(node.value):
            body.append(node)
    if not any(isinstance(n, ast.FunctionDef) for n in body):
        raise ValueError(f"judge.official_src={src}: {path} defines no {OFFICIAL_FUNCTION}()")
    spec = importlib.util.spec_from_loader("lazymem_official_longmemeval", loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), module.__dict__)
    return getattr(module, OFFICIAL_FUNCTION), hashlib.sha256(data).hexdigest()


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


class JudgePrompts:
    """One benchmark's judge prompt, as its data config declares it (`judge.style`, `prompt`, `rules`).

    `prompt` is a bundled name or a path, with {question}, {answer} (the reference) and {response}, plus
    {rule} for the longmemeval style, whose per-question-type rules come from `rules` (a JSON file). With
    `official_src` (a checkout of the LongMemEval repository) the longmemeval style's prompts come from
    that checkout's own builder instead of the template.
    """

    def __init__(
        self, style: str, prompt: str, rules: str | None = None, official_src: str | None = None
    ) -> None:
        if style not in STYLES:
            raise ValueError(f"judge.style {style!r} not in {STYLES}")
        if style == "longmemeval" and not rules:
            raise ValueError("the longmemeval judge style needs `rules` (e.g. judge_longmemeval_rules)")
        self.style, self.prompt_name = style, prompt
        self.template = load(prompt)
        self.rules = load_json(rules) if style == "longmemeval" else None
        self.official = self.official_sha256 = self.official_path = None
        if official_src:
            if style != "longmemeval":
                raise ValueError(f"judge.official_src is LongMemEval's checkout; style {style!r} takes none")
            self.official, self.official_sha256 = load_official(official_src)
            self.official_path = str(Path(official_src).expanduser().resolve() / OFFICIAL_FILE)

    @property
    def version(self) -> str:
        if self.official:
            return f"official-{self.official_sha256[:12]}"
        rules = json.dumps(self.rules, sort_keys=True).encode() if self.rules is not None else b""
        return f"{self.template.version}-{hashlib.sha256(rules).hexdigest()[:8]}"

    def source(self) -> str:
        """Where the prompts come from: `official:<file>`, `lazymem` (bundled, our own words) or a path."""
        if self.official:
            return f"official:{self.official_path}"
        return "lazymem" if self.template.bundled else str(self.template.path)

    def messages(self, question: Question, response: str) -> list[dict]:
        if self.official:
            text = self.official(
                question.type, question.text, question.answer, response, abstention=question.abstention
            )
        elif self.style == "longmemeval":
            key = "abstention" if question.abstention else question.type
            rule = self.rules.get(key, self.rules["default"])
            text = self.template.format(
                question=question.text, answer=question.answer, response=response, rule=rule
            )
        else:
            text = self.template.format(question=question.text, answer=question.answer, response=response)
        return [{"role": "user", "content": text}]


def parse_label(style: str, final: str) -> bool | None:
    """The judge's label from the final text of its reply (``Completion.text``; see DECISION_RULES).

    LongMemEval's rule always gives a label (no "yes" = incorrect); LoCoMo's is None without a label.
    """
    if style == "longmemeval":
        return "yes" in final.strip().lower()
    match = _CORRECT_WRONG.search(final)
    if not match:
        return None
    return match.group(1).lower() == "correct"


def describe_judge(identity: dict | None) -> str:
    """One line naming the judge of a summary (for table captions)."""
    if not identity:
        return "judge: not recorded"
    prompts = identity["prompts"]
    if prompts.startswith("official:"):
        prompts = f"{prompts} (sha256 {identity['prompts_sha256'][:12]})"
    return (
        f"judge: {identity['model']}, {identity['style']} style, prompts {prompts} "
        f"version {identity['prompt_version']}, temperature {identity['temperature']}, "
        f"max_tokens {identity['max_tokens']}; rule: {identity['decision_rule']}"
    )


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
