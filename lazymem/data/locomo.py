"""LoCoMo (the official `locomo10.json` format): one History per conversation, shared by its questions.

Sessions are the `session_N` keys in numeric order (some files carry `session_N_date_time` keys for
sessions that do not exist). Evidence ids like "D8:6" name (session, turn); entries may pack several ids
("D8:6; D9:17"), be zero-padded ("D30:05"), be empty or point at turns that do not exist. All of these
are resolved where possible and counted in `Dataset.source["evidence"]`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from lazymem.data.io import read_json, require, sha256_file
from lazymem.data.schema import DataError, Dataset, History, Message, Question

SESSION_KEY = re.compile(r"^session_(\d+)$")
EVIDENCE_ID = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")
ABSTAIN_ANSWER = "Not mentioned in the conversation."


def load(
    path: str,
    conversations: Sequence[int | str] = (-2, -1),
    categories: Sequence[int] = (1, 2, 3, 4),
    category_names: Mapping[int, str] | None = None,
    image_captions: bool = True,
) -> Dataset:
    """Load the selected conversations and categories of a LoCoMo file.

    `conversations` picks conversations by position in the file (negative counts from the end; the paper
    uses the last two) or by `sample_id`. `category_names` maps the dataset's integer categories to names.
    """
    if not path:
        raise DataError(
            "<data.path>", None, None, "LoCoMo has no hub copy here: pass data.path=/path/to/locomo10.json"
        )
    path = Path(path)
    records = read_json(path)
    if not isinstance(records, list):
        raise DataError(
            path, None, None, f"expected a JSON list of conversations, got {type(records).__name__}"
        )
    names = {int(k): str(v) for k, v in (category_names or {}).items()}
    counts: Counter = Counter()
    histories: dict[str, History] = {}
    questions: list[Question] = []
    for pos in _select(records, conversations, path):
        rec = records[pos]
        sample_id = str(rec.get("sample_id", f"conv-{pos}")) if isinstance(rec, dict) else str(pos)
        history, dia_index = _history(rec, sample_id, path, image_captions)
        histories[sample_id] = history
        qa = require(rec, "qa", list, path, sample_id)
        for k, item in enumerate(qa):
            qid = f"{sample_id}_q{k}"
            category = require(item, "category", int, path, qid)
            if category not in names:
                raise DataError(path, qid, "category", f"unknown category {category}; known: {sorted(names)}")
            if category not in categories:
                continue
            gold = _resolve_evidence(item.get("evidence"), dia_index, counts)
            questions.append(_question(item, qid, sample_id, names[category], category, gold, history, path))
    gold_union = {(q.history_id, i) for q in questions for i in q.gold_idx}
    for hid, history in histories.items():
        history.messages = [_with_gold(m, (hid, m.idx) in gold_union) for m in history.messages]
    source = {
        "name": "locomo",
        "path": str(path),
        "sha256": sha256_file(path),
        "conversations": list(histories),
        "categories": list(categories),
        "evidence": dict(sorted(counts.items())),
    }
    return Dataset("locomo", histories, questions, source)


def _select(records: list, conversations: Sequence[int | str], path) -> list[int]:
    ids = [r.get("sample_id") if isinstance(r, dict) else None for r in records]
    chosen: list[int] = []
    for c in conversations:
        if isinstance(c, int):
            if not -len(records) <= c < len(records):
                raise DataError(
                    path, c, None, f"no conversation at position {c}; the file has {len(records)}"
                )
            chosen.append(c % len(records))
        elif c in ids:
            chosen.append(ids.index(c))
        else:
            raise DataError(path, c, "sample_id", "no conversation with this sample_id")
    return list(dict.fromkeys(chosen))


def _history(
    rec: dict, sample_id: str, path, image_captions: bool
) -> tuple[History, dict[tuple[int, int], int]]:
    conv = require(rec, "conversation", dict, path, sample_id)
    sessions = sorted((int(m.group(1)), key) for key in conv if (m := SESSION_KEY.match(key)))
    messages: list[Message] = []
    dia_index: dict[tuple[int, int], int] = {}
    for _, key in sessions:
        turns = require(conv, key, list, path, sample_id)
        date = require(conv, f"{key}_date_time", str, path, sample_id)
        for t, turn in enumerate(turns):
            where = f"conversation.{key}[{t}]"
            for field in ("speaker", "text"):
                if not isinstance(turn, dict) or not isinstance(turn.get(field), str):
                    raise DataError(path, sample_id, f"{where}.{field}", "missing or not a string")
            text = turn["text"]
            if not text.strip() and not turn.get("blip_caption"):
                continue  # the memory model decides per non-empty message
            if image_captions and isinstance(turn.get("blip_caption"), str):
                text = f"{text} [shares an image: {turn['blip_caption']}]"
            dia = EVIDENCE_ID.fullmatch(str(turn.get("dia_id", "")))
            if dia:
                dia_index[(int(dia.group(1)), int(dia.group(2)))] = len(messages)
            messages.append(Message(len(messages), f"{sample_id}/{key}", date, turn["speaker"], text))
    if not messages:
        raise DataError(path, sample_id, "conversation", "no session_N turns found")
    return History(sample_id, messages), dia_index


def _resolve_evidence(evidence: object, dia_index: dict, counts: Counter) -> tuple[int, ...]:
    entries = evidence if isinstance(evidence, list) else ([] if evidence is None else [evidence])
    found: set[int] = set()
    if not entries:
        counts["questions_without_evidence"] += 1
    for entry in entries:
        ids = EVIDENCE_ID.findall(str(entry))
        if not ids:
            counts["empty_or_unreadable_entries"] += 1
        if len(ids) > 1:
            counts["packed_entries"] += 1
        for session, turn in ids:
            if session.startswith("0") or turn.startswith("0"):
                counts["zero_padded_ids"] += 1
            idx = dia_index.get((int(session), int(turn)))
            if idx is None:
                counts["unresolved_ids"] += 1
            else:
                counts["resolved_ids"] += 1
                found.add(idx)
    return tuple(sorted(found))


def _question(item, qid, sample_id, category_name, category, gold, history: History, path) -> Question:
    text = require(item, "question", str, path, qid)
    abstention = category == 5
    if abstention:
        answer = ABSTAIN_ANSWER  # category 5 carries only the tempting wrong `adversarial_answer`
    else:
        answer = str(require(item, "answer", (str, int, float), path, qid))
    return Question(
        id=qid,
        type=category_name,
        text=text,
        answer=answer,
        history_id=sample_id,
        date=None,
        gold_idx=gold,
        gold_sessions=tuple(dict.fromkeys(history.messages[i].session_id for i in gold)),
        abstention=abstention,
    )


def _with_gold(message: Message, gold: bool) -> Message:
    return message if message.gold == gold else Message(**{**message.__dict__, "gold": gold})
