"""LongMemEval (S, M and oracle files; the official JSON list format).

Each question carries its own haystack, so every question gets its own History (id = question id).
Sessions are put in chronological order by `haystack_dates` (the files do not always list them sorted);
`Message.idx` follows that order. Gold messages are the turns flagged `has_answer`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from lazymem.data.io import read_json, require, sha256_file
from lazymem.data.schema import DataError, Dataset, History, Message, Question

TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"  # e.g. "2023/05/20 (Sat) 02:21"
HUB_REPO = "xiaowu0162/longmemeval-cleaned"


def parse_date(text: str) -> datetime:
    return datetime.strptime(text, DATE_FORMAT)


def load(
    path: str | None = None, hub_file: str = "longmemeval_s_cleaned.json", hub_repo: str = HUB_REPO
) -> Dataset:
    """Load a LongMemEval JSON file; with no path, the cleaned release from the HF hub (cached)."""
    path = Path(path) if path else fetch_from_hub(hub_repo, hub_file)
    records = read_json(path)
    return parse(records, path, sha256_file(path))


def fetch_from_hub(repo: str, filename: str) -> Path:
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset"))
    except Exception as e:  # offline, no such file, no permission: all end the same way
        raise DataError(
            f"hf://datasets/{repo}/{filename}",
            None,
            None,
            f"could not download ({type(e).__name__}). Offline machines: download {filename} from the "
            f"dataset {repo} elsewhere, copy it here and pass data.path=/path/to/{filename}",
        ) from None


def parse(records: object, path: str | Path, sha256: str) -> Dataset:
    if not isinstance(records, list):
        raise DataError(path, None, None, f"expected a JSON list of questions, got {type(records).__name__}")
    histories: dict[str, History] = {}
    questions: list[Question] = []
    seen: set[str] = set()
    empty_turns = 0
    for i, rec in enumerate(records):
        qid = rec.get("question_id", i) if isinstance(rec, dict) else i
        qid = require(rec, "question_id", str, path, qid)
        if qid in seen:
            raise DataError(path, qid, "question_id", "duplicate question id")
        seen.add(qid)
        history, skipped = _history(rec, qid, path)
        empty_turns += skipped
        histories[qid] = history
        questions.append(_question(rec, qid, history, path))
    source = {
        "name": "longmemeval",
        "path": str(path),
        "sha256": sha256,
        "records": len(records),
        "empty_turns_skipped": empty_turns,
    }
    return Dataset("longmemeval", histories, questions, source)


def _question(rec: dict, qid: str, history: History, path) -> Question:
    qtype = require(rec, "question_type", str, path, qid)
    if qtype not in TYPES:
        raise DataError(
            path, qid, "question_type", f"unknown question type '{qtype}'; known: {', '.join(TYPES)}"
        )
    answer = require(rec, "answer", (str, int, float), path, qid)
    date = require(rec, "question_date", str, path, qid)
    _check_date(date, path, qid, "question_date")
    answer_sessions = require(rec, "answer_session_ids", list, path, qid)
    return Question(
        id=qid,
        type=qtype,
        text=require(rec, "question", str, path, qid),
        answer=str(answer),
        history_id=qid,
        date=date,
        gold_idx=tuple(m.idx for m in history.messages if m.gold),
        gold_sessions=tuple(str(s) for s in answer_sessions),
        abstention=qid.endswith("_abs"),
    )


def _history(rec: dict, qid: str, path) -> tuple[History, int]:
    sessions = require(rec, "haystack_sessions", list, path, qid)
    dates = require(rec, "haystack_dates", list, path, qid)
    ids = require(rec, "haystack_session_ids", list, path, qid)
    if not len(sessions) == len(dates) == len(ids):
        raise DataError(
            path,
            qid,
            "haystack_sessions",
            f"{len(sessions)} sessions but {len(dates)} haystack_dates and {len(ids)} haystack_session_ids",
        )
    for d in dates:
        _check_date(d, path, qid, "haystack_dates")
    order = sorted(range(len(sessions)), key=lambda k: parse_date(dates[k]))  # stable for equal dates
    messages: list[Message] = []
    skipped = 0
    for k in order:
        if not isinstance(sessions[k], list):
            raise DataError(path, qid, f"haystack_sessions[{k}]", "expected a list of turns")
        for t, turn in enumerate(sessions[k]):
            where = f"haystack_sessions[{k}][{t}]"
            if not isinstance(turn, dict):
                raise DataError(path, qid, where, f"expected a turn object, got {type(turn).__name__}")
            for key in ("role", "content"):
                if not isinstance(turn.get(key), str):
                    raise DataError(path, qid, f"{where}.{key}", "missing or not a string")
            if not turn["content"].strip():
                skipped += 1  # the memory model decides per non-empty message
                continue
            messages.append(
                Message(
                    idx=len(messages),
                    session_id=str(ids[k]),
                    time=dates[k],
                    role=turn["role"],
                    text=turn["content"],
                    gold=bool(turn.get("has_answer", False)),
                )
            )
    return History(qid, messages), skipped


def _check_date(value: object, path, qid: str, field: str) -> None:
    try:
        parse_date(value)
    except (TypeError, ValueError):
        raise DataError(
            path, qid, field, f"unreadable date {value!r}; expected like '2023/05/20 (Sat) 02:21'"
        ) from None
