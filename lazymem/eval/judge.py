"""The LLM judge: correct / incorrect against the reference, with the raw judge text kept.

A judge style is a decision rule and a prompt layout, a small :class:`JudgeStyle` subclass. Every
benchmark's data config declares its judge under `judge:` (style, prompt, rules, output budget), so a new
benchmark never inherits another's; `style` is a registered name or the import path of your own subclass
(a new decision rule is one module plus one data config). The two shipped styles:
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
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import ClassVar

from hydra.utils import instantiate

from lazymem.construct.processor import StageError
from lazymem.data.schema import Question
from lazymem.prompts import load, load_json
from lazymem.registry import named_class

_CORRECT_WRONG = re.compile(r"\b(correct|wrong|incorrect)\b", re.IGNORECASE)
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


class JudgeStyle:
    """A decision rule and a prompt layout. `prompt` is a bundled name or a path to a template with
    {question}, {answer} (the reference) and {response}, plus whatever :meth:`fields` adds. Subclasses set
    `name` and `rule` (how a reply becomes a label, written into every summary) and implement
    :meth:`label`."""

    name: ClassVar[str]
    rule: ClassVar[str]

    def __init__(self, prompt: str, rules: str | None = None, official_src: str | None = None) -> None:
        if rules:
            raise ValueError(f"judge style {self.name!r} takes no `rules`")
        if official_src:
            raise ValueError(f"judge.official_src is LongMemEval's checkout; style {self.name!r} takes none")
        self.prompt_name, self.template = prompt, load(prompt)
        self.official_sha256: str | None = None

    @property
    def version(self) -> str:
        """Changes whenever the prompts do (part of the cache key of every judge call)."""
        return self.template.version

    def source(self) -> str:
        """Where the prompts come from: `lazymem` (bundled, our own words) or a path."""
        return "lazymem" if self.template.bundled else str(self.template.path)

    def fields(self, question: Question) -> dict[str, str]:
        """Template fields beyond question, answer and response."""
        return {}

    def messages(self, question: Question, response: str) -> list[dict]:
        text = self.template.format(
            question=question.text, answer=question.answer, response=response, **self.fields(question)
        )
        return [{"role": "user", "content": text}]

    def label(self, final: str) -> bool | None:
        """True / False from the final text of the judge's reply (``Completion.text``); None = no label
        (a judge error, counted, never a silent "incorrect")."""
        raise NotImplementedError(f"judge style {self.name!r} does not say how a reply becomes a label")


class LongMemEvalStyle(JudgeStyle):
    """A yes/no question whose rule depends on the question type (`rules`, a JSON file of rule texts per
    type, with `default` and `abstention`). With `official_src` (a checkout of the LongMemEval repository)
    the prompts come from that checkout's own builder instead of the template."""

    name = "longmemeval"
    rule = "correct iff the reply contains 'yes', any case (LongMemEval's evaluate_qa.py)"

    def __init__(self, prompt: str, rules: str | None = None, official_src: str | None = None) -> None:
        if not rules:
            raise ValueError("the longmemeval judge style needs `rules` (e.g. judge_longmemeval_rules)")
        super().__init__(prompt)
        self.rules = load_json(rules)
        self.official = self.official_path = None
        if official_src:
            self.official, self.official_sha256 = load_official(official_src)
            self.official_path = str(Path(official_src).expanduser().resolve() / OFFICIAL_FILE)

    @property
    def version(self) -> str:
        if self.official:
            return f"official-{self.official_sha256[:12]}"
        rules = json.dumps(self.rules, sort_keys=True).encode()
        return f"{self.template.version}-{hashlib.sha256(rules).hexdigest()[:8]}"

    def source(self) -> str:
        return f"official:{self.official_path}" if self.official else super().source()

    def fields(self, question: Question) -> dict[str, str]:
        key = "abstention" if question.abstention else question.type
        return {"rule": self.rules.get(key, self.rules["default"])}

    def messages(self, question: Question, response: str) -> list[dict]:
        if not self.official:
            return super().messages(question, response)
        text = self.official(
            question.type, question.text, question.answer, response, abstention=question.abstention
        )
        return [{"role": "user", "content": text}]

    def label(self, final: str) -> bool | None:
        return "yes" in final.strip().lower()  # always a label: no "yes" is incorrect


class LoCoMoStyle(JudgeStyle):
    """Generous CORRECT / WRONG grading."""

    name = "locomo"
    rule = "first CORRECT / WRONG / INCORRECT in the reply; none = judge error"

    def label(self, final: str) -> bool | None:
        match = _CORRECT_WRONG.search(final)
        return None if match is None else match.group(1).lower() == "correct"


STYLES: dict[str, type[JudgeStyle]] = {s.name: s for s in (LongMemEvalStyle, LoCoMoStyle)}


def judge_style(
    style: str, prompt: str, rules: str | None = None, official_src: str | None = None
) -> JudgeStyle:
    """The style a data config names: a registered name, or the import path of a JudgeStyle subclass."""
    cls = named_class(style, STYLES, JudgeStyle, "judge.style")
    return cls(prompt, rules, official_src)


class Judge:
    """One benchmark's LLM judge (its style, client and output budget) and its model-free metrics (e.g.
    LoCoMo's token F1)."""

    def __init__(self, client, style: JudgeStyle, max_tokens=None, metrics=None):
        self.client, self.style = client, style
        self.max_tokens = max_tokens  # the benchmark's output budget, a decoding override; None = the role's
        self.metrics = dict(metrics or {})  # name -> callable(question, answer) -> float | None

    @classmethod
    def from_config(cls, client, data) -> Judge:
        """The judge and metrics a benchmark's data config declares (`judge:` and `metrics:`)."""
        spec = data.get("judge")
        if not hasattr(spec, "get") or not spec.get("style"):
            raise ValueError(
                f"the data config of {data.get('name')!r} declares no judge: add a `judge:` block with "
                "style, prompt (and rules for the longmemeval style), as conf/data/*.yaml do"
            )
        style = judge_style(spec.style, spec.prompt, spec.get("rules"), spec.get("official_src"))
        metrics = {name: instantiate(m) for name, m in (data.get("metrics") or {}).items()}
        return cls(client, style, spec.get("max_tokens"), metrics)

    @property
    def identity(self) -> dict:
        """Who judged and how: written into every summary and named in the results' captions."""
        cfg = self.client.cfg
        return {
            "model": cfg.served_name,
            "model_id": cfg.model_id or None,
            "style": self.style.name,
            "prompts": self.style.source(),
            "prompts_sha256": self.style.official_sha256,
            "prompt_version": self.style.version,
            "decision_rule": self.style.rule,
            "temperature": cfg.decoding.temperature,
            "max_tokens": cfg.decoding.max_tokens if self.max_tokens is None else self.max_tokens,
            "metrics": sorted(self.metrics),
        }

    async def __call__(self, question: Question, answer: str):
        chat = self.style.messages(question, answer)
        budget = {} if self.max_tokens is None else {"max_tokens": int(self.max_tokens)}
        reply = await self.client.chat(chat, prompt_version=self.style.version, **budget)
        if reply.error:
            raise StageError(f"judge call failed: {reply.error}")
        if not reply.text.strip():  # never a silent "incorrect" for a judge cut short while thinking
            raise StageError(f"judge gave no final text (finish_reason={reply.finish_reason})")
        return self.style.label(reply.text), reply.text, reply.latency_s

    def scores(self, question: Question, answer: str) -> dict:
        """The model-free metrics of one answer; a failed question is scored with an empty answer."""
        return {name: metric(question, answer) for name, metric in self.metrics.items()}


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
