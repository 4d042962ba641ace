"""One schema for every benchmark: histories of messages, and questions over them.

A `History` stores the conversation verbatim, in chronological order; `Message.idx` is the message's
position in that order (0-based). A `Question` points at its history and names its gold evidence by
message index. Retrieval, windowing and every method read only these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class DataError(ValueError):
    """A dataset file that cannot be read as its benchmark's format.

    The message always names the file, the record (id or index) and the field at fault.
    """

    def __init__(self, path: str, record: str | int | None, field_name: str | None, problem: str):
        self.path, self.record, self.field, self.problem = str(path), record, field_name, problem
        where = [f"file {self.path}"]
        if record is not None:
            where.append(f"record {record}")
        if field_name is not None:
            where.append(f"field '{field_name}'")
        super().__init__(f"{', '.join(where)}: {problem}")


@dataclass(frozen=True)
class Message:
    idx: int  # position in the history, chronological, 0-based
    session_id: str
    time: str  # the session date / message timestamp as the benchmark writes it
    role: str  # "user" / "assistant" (LongMemEval) or the speaker's name (LoCoMo)
    text: str
    gold: bool = False  # evidence for at least one question over this history


@dataclass
class History:
    id: str
    messages: list[Message]

    @property
    def session_ids(self) -> list[str]:
        """Session ids in chronological order, each once."""
        return list(dict.fromkeys(m.session_id for m in self.messages))

    def session(self, session_id: str) -> list[Message]:
        return [m for m in self.messages if m.session_id == session_id]


@dataclass(frozen=True)
class Question:
    id: str
    type: str  # LongMemEval question_type, or the LoCoMo category name
    text: str
    answer: str  # the reference answer, always a string (for preference questions: the rubric)
    history_id: str
    date: str | None = None  # when the question is asked (LongMemEval); None when the benchmark has none
    gold_idx: tuple[int, ...] = ()  # gold evidence messages, by History index, sorted
    gold_sessions: tuple[str, ...] = ()
    abstention: bool = False  # the correct response says the information is not available


@dataclass
class Dataset:
    """Questions with the histories they are asked over. `source` records where it came from."""

    name: str
    histories: dict[str, History]
    questions: list[Question]
    source: dict = field(default_factory=dict)  # path, sha256, options, load counters

    def history(self, question: Question) -> History:
        return self.histories[question.history_id]

    def subset(self, ids: list[str] | set[str]) -> Dataset:
        """The questions whose id is in `ids` (file order kept), with only the histories they need."""
        wanted = set(ids)
        questions = [q for q in self.questions if q.id in wanted]
        used = {q.history_id for q in questions}
        histories = {k: v for k, v in self.histories.items() if k in used}
        return Dataset(self.name, histories, questions, dict(self.source))


def query_time(question: Question, history: History) -> str:
    """When the question is asked: the benchmark's date, else the time of the last message (LoCoMo)."""
    if question.date:
        return question.date
    return history.messages[-1].time if history.messages else "unknown"
