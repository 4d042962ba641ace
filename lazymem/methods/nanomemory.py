"""NanoMemory-style query-time construction (paper Appendix B and D.4): rank sessions, then ONE LLM call.

1. Turn isolation retrieval: each session is cut into turns (consecutive message pairs, a trailing
   single message is its own turn); every turn is embedded on its own with the job's dense encoder and
   a session scores by its best turn (max cosine), so one precise turn is not diluted by the rest of a
   long session. The top `top_sessions` sessions (paper: 10) are kept.
2. Query-driven pruning: the kept sessions, oldest first and each headed by its date, go to the memory
   model in a single call that copies out the query-relevant passages verbatim; the reply is the memory
   block. The whole pool is one call by design (paper Appendix B: it cannot be split without changing
   the method).

Timings: `retrieval` is query encoding plus session scoring (turn embeddings come from the embedding
cache and are built outside the timer, like a stored index); `processing` is the LLM call.
`shown` is approximate: the messages of the kept sessions that a copied passage was found in.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence

import numpy as np

from lazymem.construct.processor import StageError
from lazymem.data.schema import History, Message, Question, query_time
from lazymem.methods.base import Context, MemoryBlock
from lazymem.prompts import load
from lazymem.tokens import count_tokens

NONE_MARKER = "NO RELEVANT CONTENT"
MIN_COPY_CHARS = 12  # shorter copied fragments ("Yes.", "Thanks!") say nothing about where they came from


class NanoMemory:
    needs_retrieval = True  # uses the job's dense retriever (its encoder and embedding cache)

    def __init__(
        self,
        name: str = "nanomemory",
        top_sessions: int = 10,
        role: str = "memory",
        retriever: str = "dense",
        system_prompt: str = "nanomemory_system",
        user_prompt: str = "nanomemory_user",
        decoding: Mapping | None = None,
    ):
        if top_sessions < 1:
            raise ValueError(f"top_sessions must be >= 1, got {top_sessions}")
        self.name, self.top_sessions, self.role, self.retriever = name, top_sessions, role, retriever
        self.roles = (role,)
        self.system, self.user = load(system_prompt), load(user_prompt)
        self.prompt_version = f"{self.system.version}-{self.user.version}"
        self.decoding = dict(decoding or {})

    async def build(self, question: Question, history: History, ctx: Context) -> MemoryBlock:
        dense = ctx.dense(self.retriever)
        turns = session_turns(history)
        if not turns:
            return MemoryBlock(text="", style="compressed", shown=[], detail={"ranked_sessions": []})
        t0 = time.perf_counter()
        texts = ["\n".join(dense.render(history.messages[i]) for i in idx) for _, idx in turns]
        matrix, embedded = dense.embed(texts)
        index_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        query = dense.embed_query(question.text)
        ranked = rank_sessions([sid for sid, _ in turns], matrix @ query, history.session_ids)
        retrieval_s = time.perf_counter() - t0

        top = {sid for sid, _ in ranked[: self.top_sessions]}
        chosen = [sid for sid in history.session_ids if sid in top]  # chronological
        by_session = sessions_of(history)
        sessions_text = render_sessions([by_session[sid] for sid in chosen])
        chat = self.prompt(question, history, sessions_text, len(chosen))

        t0 = time.perf_counter()
        reply = await ctx.llms[self.role].chat(chat, prompt_version=self.prompt_version, **self.decoding)
        processing_s = time.perf_counter() - t0
        if reply.error:
            raise StageError(f"{self.name} construction call failed: {reply.error}")
        final = reply.text.strip()
        if not final:
            raise StageError(f"{self.name} construction call gave no final text (stopped while thinking?)")
        text = "" if final.strip().rstrip(".") == NONE_MARKER else final
        candidates = [m for sid in chosen for m in by_session[sid]]
        return MemoryBlock(
            text=text,
            style="compressed",
            shown=copied_from(text, candidates),
            timings={"retrieval": retrieval_s, "processing": processing_s},
            detail={
                "ranked_sessions": [[sid, round(score, 6)] for sid, score in ranked],
                "sessions_selected": chosen,
                "turns": len(turns),
                "turns_embedded": embedded,
                "index_s": round(index_s, 4),
                "session_tokens": count_tokens(sessions_text),
                "prompt_tokens": count_tokens(chat[0]["content"]) + count_tokens(chat[1]["content"]),
                "construct_latency_s": round(reply.latency_s, 4),
                "construct_cached": reply.cached,
                "construct_usage": {"prompt": reply.prompt_tokens, "completion": reply.completion_tokens},
                "construct_thinking": reply.reasoning or "",
            },
        )

    def prompt(self, question: Question, history: History, sessions_text: str, n_sessions: int) -> list:
        user = self.user.format(
            query=question.text,
            query_time=query_time(question, history),
            n_sessions=n_sessions,
            sessions=sessions_text,
            none_marker=NONE_MARKER,
        )
        return [{"role": "system", "content": self.system.text.strip()}, {"role": "user", "content": user}]


def sessions_of(history: History) -> dict[str, list[Message]]:
    out: dict[str, list[Message]] = {}
    for m in history.messages:
        out.setdefault(m.session_id, []).append(m)
    return out


def session_turns(history: History) -> list[tuple[str, tuple[int, ...]]]:
    """(session id, message indices) per turn: consecutive pairs within a session, chronological."""
    turns = []
    for sid, messages in sessions_of(history).items():
        idx = [m.idx for m in messages]
        turns.extend((sid, tuple(idx[k : k + 2])) for k in range(0, len(idx), 2))
    return turns


def rank_sessions(turn_sessions: Sequence[str], scores: np.ndarray, order: Sequence[str]) -> list:
    """[(session id, best turn score)], best first; ties go to the earlier session."""
    best: dict[str, float] = {}
    for sid, score in zip(turn_sessions, scores.tolist(), strict=True):
        best[sid] = max(score, best.get(sid, -np.inf))
    position = {sid: k for k, sid in enumerate(order)}
    return sorted(best.items(), key=lambda kv: (-kv[1], position.get(kv[0], len(position))))


def render_sessions(sessions: Sequence[Sequence[Message]]) -> str:
    """Each session under a `## Session k | date` heading, then `speaker: text` per message."""
    blocks = []
    for k, messages in enumerate(sessions, 1):
        lines = [f"## Session {k} | {messages[0].time}"]
        lines += [f"{m.role}: {m.text}" for m in messages]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).strip("\"'“”")


def copied_from(reply: str, messages: Sequence[Message]) -> list[int]:
    """Indices of `messages` a passage of the reply was copied from (approximate, by substring match).

    Each reply line loses a leading bullet, `[date]` and `speaker:` prefix and is split at ellipses; a
    message counts when such a fragment (>= MIN_COPY_CHARS) lies inside it, or it lies inside a fragment.
    """
    roles = {m.role.lower() for m in messages}
    fragments = []
    for line in reply.splitlines():
        line = re.sub(r"^\s*[-*•]\s*", "", line)
        line = re.sub(r"^\[[^\]]*\]\s*", "", line)
        head, sep, tail = line.partition(":")
        if sep and head.strip().lower() in roles:
            line = tail
        fragments += [_norm(f) for f in re.split(r"\.\.\.|…", line)]
    fragments = [f for f in fragments if len(f) >= MIN_COPY_CHARS]
    shown = []
    for m in messages:
        text = _norm(m.text)
        if any(f in text or (len(text) >= MIN_COPY_CHARS and text in f) for f in fragments):
            shown.append(m.idx)
    return shown
