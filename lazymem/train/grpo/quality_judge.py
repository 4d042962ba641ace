"""The quality judge of the RL reward (paper Section 3.3, Eq. 8; Appendix E.2 and G.2).

For each KEEP decision an LLM grades the compressed content on faithfulness f (to its source message)
and utility u (for the query, given the reference answer and reasoning), both in {0, 1, 2}. The prompt
is our own wording of the paper's rules and rubric with the same reply schema. The payload is built as a
dict and serialised with ``json.dumps``, so quotes and newlines in messages cannot break it.

The judge's LLM is the role ``llm.roles.reward_judge``, built like every other role (role config ->
backend -> client); the reward runs in VERL's worker processes, so it gets that role config as a plain
dict (``judge.llm`` of the reward kwargs). Replies are parsed strictly (:func:`parse_reply`). A reply
that fails to parse is asked again up to ``parse_retries`` times (with a new sample index, so the cache
does not hand back the same reply); if it still fails, or the request itself failed after the client's
retries, the result is a recorded judge error and that message scores Q = 0. Errors are counted by the
reward (``judge_errors`` of ``judge_calls``), logged per training step and per validation round, and an
error rate above ``max_error_rate``, a validation round's or training steps' (at least ``min_step_calls``
calls), stops training (lazymem/train/grpo/reward_metrics.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from lazymem.llm.cache import LLMCache, canonical_json
from lazymem.llm.client import json_schema_format
from lazymem.llm.llm_set import ServerRegistry, build_client, to_dict

log = logging.getLogger(__name__)

SYSTEM = (
    "You grade one piece of memory that a compression model chose to keep from a chat history. Give two "
    "separate grades. Faithfulness compares constructed_memory with source_messages and nothing else. "
    "Utility measures how much constructed_memory helps answer the query, judged against gold_answer and "
    "referenced_reasoning_chain. Reply with a single JSON object and nothing else: no Markdown, no "
    "commentary."
)
RULES = [
    "Grade faithfulness from source_messages alone; gold_answer and referenced_reasoning_chain must not "
    "influence it.",
    "A source message's timestamp is evidence too: dates, ordering and elapsed time stated in the memory "
    "must agree with it.",
    "query_time is when the question was asked; compare it with the timestamps to judge recency, ordering "
    "and whether information was later superseded.",
    "Lower faithfulness for any claim the source does not support: invented details, contradictions, "
    "guesses presented as facts, or conclusions the source does not license.",
    "Grade utility from query, gold_answer and referenced_reasoning_chain taken together.",
    "Utility counts indirect help: background, constraints, entities, dates or disambiguating context that "
    "the answer or the reasoning relies on earns credit even when it is not the answer itself.",
    "The grades are independent: accurate but irrelevant memory can get faithfulness 2 and utility 0; "
    "helpful but unsupported memory gets faithfulness 0, and agreeing with gold_answer never raises "
    "faithfulness.",
    "Generic or off-topic memory gets low utility; memory that keeps the evidence the answer or the "
    "reasoning depends on gets high utility.",
    "When torn between two grades, give the lower one.",
]
RUBRIC = {
    "faithfulness": {
        "0": "Some content is not grounded in source_messages: invented, contradicted, over-inferred, or "
        "uncertain information stated as fact.",
        "1": "Grounded overall, with small problems: slight ambiguity, loose wording, or mild generalisation "
        "beyond what the source says.",
        "2": "Everything stated is explicitly backed by source_messages; nothing contradicted, invented or "
        "over-inferred.",
    },
    "utility": {
        "0": "Does not help reach gold_answer or follow referenced_reasoning_chain; irrelevant or "
        "misleading.",
        "1": "Helps somewhat: indirect support, useful background, disambiguation, chronology, entities or "
        "constraints, or evidence that is only partly relevant.",
        "2": "Helps strongly: keeps the key evidence, constraints or context needed to reach, check or "
        "explain the answer.",
    },
}
REPLY_KEYS = ("faithfulness", "utility", "unsupported_claims", "useful_evidence", "reason")
REQUIRED_OUTPUT = {
    "faithfulness": 0,
    "utility": 0,
    "unsupported_claims": [],
    "useful_evidence": [],
    "reason": "one or two sentences in English",
}
REPLY_SCHEMA = {
    "type": "object",
    "properties": {
        "faithfulness": {"type": "integer", "enum": [0, 1, 2]},
        "utility": {"type": "integer", "enum": [0, 1, 2]},
        "unsupported_claims": {"type": "array", "items": {"type": "string"}},
        "useful_evidence": {"type": "array", "items": {"type": "string"}},
        "reason": {"type": "string"},
    },
    "required": list(REPLY_KEYS),
    "additionalProperties": False,
}


class JudgeParseError(ValueError):
    """A judge reply that is not exactly one JSON object of the reply schema."""


@dataclass(frozen=True)
class JudgeConfig:
    """The quality judge: its LLM role and its own settings (``judge`` of the reward kwargs)."""

    llm: dict[str, Any] | None = None  # llm.roles.reward_judge, resolved (common merged in)
    cache_path: str | None = None  # the LLM cache (llm.cache_path); None = no cache
    parse_retries: int = 1  # extra asks when a reply does not parse
    template: str | None = None  # JSON file overriding any of system / rules / rubric
    # the judge error rate (errors / calls) of a validation round or of training steps above which the
    # trainer stops the run (lazymem/train/grpo/reward_metrics.py); the judge itself does not read it
    max_error_rate: float = 0.05
    # the fewest calls the training-step bound judges at once: steps with fewer are summed until they reach it
    min_step_calls: int = 200

    def __post_init__(self):
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ValueError(f"judge.max_error_rate must lie in [0, 1], got {self.max_error_rate}")
        if self.min_step_calls < 1:
            raise ValueError(f"judge.min_step_calls must be at least 1, got {self.min_step_calls}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> JudgeConfig:
        """From a dict or OmegaConf node; unknown keys are an error (a typo must not pass silently)."""
        values = to_dict(values) if values else {}
        if values.get("llm") is not None:
            values["llm"] = to_dict(values["llm"])  # a plain dict, also inside a plain mapping
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"unknown judge settings {unknown}")
        return cls(**values)

    @property
    def key(self) -> str:
        return canonical_json(asdict(self))


@dataclass(frozen=True)
class Template:
    system: str
    rules: tuple[str, ...]
    rubric: dict[str, dict[str, str]]

    @property
    def version(self) -> str:
        """Content hash: part of every cache key, so an edited prompt never reuses old replies."""
        parts = {"system": self.system, "rules": list(self.rules), "rubric": self.rubric, "out": REPLY_KEYS}
        return "reward_judge@" + hashlib.sha256(canonical_json(parts).encode()).hexdigest()[:12]


def load_template(path: str | Path | None = None) -> Template:
    """The built-in template, with any of ``system`` / ``rules`` / ``rubric`` replaced from a JSON file."""
    over: dict[str, Any] = json.loads(Path(path).read_text()) if path else {}
    unknown = sorted(set(over) - {"system", "rules", "rubric"})
    if unknown:
        raise ValueError(f"judge template {path}: unknown keys {unknown}")
    rubric = over.get("rubric", RUBRIC)
    return Template(system=over.get("system", SYSTEM), rules=tuple(over.get("rules", RULES)), rubric=rubric)


@dataclass(frozen=True)
class JudgeItem:
    """One kept message to grade."""

    query: str
    query_time: str | None
    answer: str
    reasoning: str | None
    source: Mapping[str, str]  # {role, content, timestamp}
    memory: str  # the compressed content the policy kept


@dataclass(frozen=True)
class JudgeScore:
    faithfulness: int | None
    utility: int | None
    error: str | None = None  # set when the judgement failed (request or parse); Q is then 0
    reply: str = ""  # raw judge text, kept for inspection

    @property
    def q(self) -> float:
        """Paper Eq. 8: Q = 1[f > 0] (f + u) / 4; 0 for a failed judgement."""
        if self.error is not None or self.faithfulness is None or self.utility is None:
            return 0.0
        return quality(self.faithfulness, self.utility)


def quality(f: int, u: int) -> float:
    return (f + u) / 4.0 if f > 0 else 0.0


def build_messages(item: JudgeItem, template: Template) -> list[dict[str, str]]:
    payload = {
        "query_time": item.query_time or "",
        "query": item.query,
        "gold_answer": item.answer,
        "referenced_reasoning_chain": item.reasoning or "",
        "source_messages": [dict(item.source)],
        "constructed_memory": item.memory,
        "evaluation_rules": list(template.rules),
        "rubric": template.rubric,
        "required_output": REQUIRED_OUTPUT,
    }
    user = json.dumps(payload, ensure_ascii=False, indent=2)
    return [{"role": "system", "content": template.system}, {"role": "user", "content": user}]


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


def parse_reply(text: str) -> dict[str, Any]:
    """Exactly one JSON object with the five reply keys, typed as the schema says, in the final text of a
    reply (``Completion.text``, thinking already split off).

    Tolerated: one surrounding Markdown code fence. Anything else
    (trailing text, missing or extra keys, grades outside {0,1,2}, floats or booleans as grades) fails.
    """
    final = text.strip()
    fenced = _FENCE.match(final)
    body = fenced.group(1).strip() if fenced else final
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise JudgeParseError(f"not one JSON value: {e.msg} at char {e.pos}") from None
    if not isinstance(value, dict):
        raise JudgeParseError(f"reply is a JSON {type(value).__name__}, not an object")
    missing = [k for k in REPLY_KEYS if k not in value]
    extra = sorted(set(value) - set(REPLY_KEYS))
    if missing or extra:
        raise JudgeParseError(f"reply keys: missing {missing}, unexpected {extra}")
    for key in ("faithfulness", "utility"):
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, int) or v not in (0, 1, 2):
            raise JudgeParseError(f"{key} is {v!r}, not one of 0, 1, 2")
    for key in ("unsupported_claims", "useful_evidence"):
        if not isinstance(value[key], list) or not all(isinstance(s, str) for s in value[key]):
            raise JudgeParseError(f"{key} is not a list of strings")
    if not isinstance(value["reason"], str):
        raise JudgeParseError("reason is not a string")
    return value


class QualityJudge:
    """Grades kept messages through the client of the reward_judge role (or a given ``client``)."""

    def __init__(self, cfg: JudgeConfig, client: Any | None = None):
        self.cfg = cfg
        self.template = load_template(cfg.template)
        if client is None:
            if not cfg.llm:
                raise ValueError("judge.llm is not set: pass the llm.roles.reward_judge role config")
            cache = _shared_cache(cfg.cache_path) if cfg.cache_path else None
            client = build_client(cfg.llm, _registry(), cache)
        self.client = client
        # the role's `structured` decides, as for every role: the client drops the format when it is off
        self.response_format = json_schema_format(REPLY_SCHEMA, "quality_judgement")

    async def score(self, item: JudgeItem) -> JudgeScore:
        messages = build_messages(item, self.template)
        error, reply = "not attempted", ""
        for sample in range(self.cfg.parse_retries + 1):
            done = await self.client.chat(
                messages,
                prompt_version=self.template.version,
                response_format=self.response_format,
                sample=sample,
            )
            if not done.ok:
                error, reply = f"request failed: {done.error}", ""
                break  # the client already retried the request itself
            reply = done.text
            try:
                value = parse_reply(reply)
            except JudgeParseError as e:
                error = f"unparsable reply: {e}"
                continue
            return JudgeScore(value["faithfulness"], value["utility"], None, reply)
        log.warning("quality judge error (%s) for memory %r", error, item.memory[:80])
        return JudgeScore(None, None, error, reply)


_CACHES: dict[str, LLMCache] = {}
_JUDGES: dict[tuple[str, int], QualityJudge] = {}
_REGISTRY: list[ServerRegistry] = []
_LOCK = threading.Lock()


def _registry() -> ServerRegistry:
    """This process's servers for judge roles on a managed backend (an endpoint starts nothing)."""
    with _LOCK:
        if not _REGISTRY:
            _REGISTRY.append(ServerRegistry(Path(tempfile.gettempdir()) / "lazymem-reward-judge"))
        return _REGISTRY[0]


def _shared_cache(path: str) -> LLMCache:
    with _LOCK:
        if path not in _CACHES:
            _CACHES[path] = LLMCache(path)
        return _CACHES[path]


def get_judge(cfg: JudgeConfig) -> QualityJudge:
    """One judge per config and thread (an async client binds to its thread's event loop)."""
    key = (cfg.key, threading.get_ident())
    with _LOCK:
        judge = _JUDGES.get(key)
    if judge is None:
        judge = QualityJudge(cfg)
        with _LOCK:
            judge = _JUDGES.setdefault(key, judge)
    return judge
