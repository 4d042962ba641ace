"""Re-embedding after a change of encoder, in the background, without a query ever mixing two models' vectors.

A user's vectors are stored in blocks named by the identity of the encoder that made them (`SentenceEncoder.
identity`: a bundled model's package version, a local directory's path and a fingerprint of its files, the
settings that change the vectors), and every block records that identity too (lazymem/agent/vector_blocks.py,
version 2). A query only ever reads the blocks of the deployment's own encoder, and embeds what they lack
with that encoder, so it never compares a question's vector with another model's. What a change of encoder
leaves behind is work and space: every user's history must be embedded again, and their old vectors are of
no further use.

`Reembedding` does that work through the indexer that embeds new messages:

- a scan pages through the users (`Store.users`), asks each one's storage which models its vector blocks
  are named by, and marks those holding another model's `pending` (`Store.mark_pending`). The claims and
  leases of the indexer then spread the users over the replicas, and each user is embedded a chunk at a
  time, so that queries run in between. The scan marks a page of users only while the indexing backlog is
  under a page, so that an add arriving during a long migration waits behind one page, not every user;
- once a claimed user is warmed to the end, and the blocks of the current models hold a vector of every
  message the user had when the claim began, the blocks of every other model are deleted (through the
  user's cache, bound to their generation like every derived write), and then the claim is finished;
- a pass that finds no user with another model's vectors ends it: the models are recorded in
  `agent.dir/reembedded.json`, so the next start-up with the same models skips the scan.

A query of a user not re-embedded yet embeds whatever its model lacks itself, as for a user whose indexing
has not run: its answer is the new model's, never a mix; on a long history it waits for the embedding
(`docs/agent-scale.md`, "Changing the encoder").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from lazymem.agent import vector_blocks
from lazymem.agent.indexing import Indexing
from lazymem.agent.open_users import Key, OpenUsers
from lazymem.agent.runtime import Runtime
from lazymem.agent.store import Store
from lazymem.agent.user_retrieval import UserRetrieval
from lazymem.agent.user_state import UserState
from lazymem.data.schema import Message

log = logging.getLogger(__name__)

PAGE = 200  # users examined, and at most marked, per step of the scan
RECORD = "reembedded.json"  # in agent.dir: the models a finished re-embedding left the store with
LOG_EVERY = 100  # a log line per this many users re-embedded


class Reembedding:
    """The re-embedding of one Memory's users under its retrieval's current models (`retrieval` None: the
    method retrieves nothing, and there is nothing to do). `status()` says how far it went."""

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        users: OpenUsers,
        indexing: Indexing,
        retrieval: UserRetrieval | None,
        dir: Path,
        page: int = PAGE,
    ):
        self.store, self.runtime, self.users, self.indexing = store, runtime, users, indexing
        self.models = set() if retrieval is None else retrieval.vector_models()
        self.record = Path(dir) / RECORD
        self.page = page
        # why there is nothing to do: the method retrieves nothing, or stores no vectors; or why it cannot
        # be done: the retrievers cannot name their vectors, or the store cannot list and mark its users
        self.off: str | None = None
        if self.models is None:
            self.off = "the retrievers cannot name their vectors' keys (a template with {idx})"
        elif not all(callable(getattr(store, name, None)) for name in ("users", "mark_pending")):
            self.off = f"the store {type(store).__name__} has no users() and mark_pending()"
        self.state = "off" if self.off or not self.models else "idle"  # scanning, waiting, done, incomplete
        self.passes = self.examined = self.found = self.marked = self.reembedded = 0
        self.started: float | None = None
        self.finished: float | None = None

    def status(self) -> dict:
        """For /health: where it stands, and the counts of its passes so far."""
        return {
            "state": self.state,
            "models": sorted(self.models or ()),
            "passes": self.passes,
            "users_examined": self.examined,
            "users_with_other_vectors": self.found,
            "users_marked": self.marked,
            "users_reembedded": self.reembedded,
            "started": self.started,
            "finished": self.finished,
            **({"off_because": self.off} if self.off else {}),
        }

    def start(self) -> bool:
        """Deletes other models' vectors after every claim this process indexes from now on; False (and
        nothing changes) when there is nothing to do (the method retrieves nothing, or stores no vectors)
        or it cannot be done (`off` says why, and the log once)."""
        if self.off is not None:
            log.warning("re-embedding after a change of encoder is off: %s", self.off)
            return False
        if not self.models:
            return False
        self.indexing.after_warm = self._retire
        if self.started is None:
            self.started = time.time()
        return True

    def recorded(self) -> bool:
        """Whether the last re-embedding that finished here left the store with these very models."""
        try:
            return set(json.loads(self.record.read_text())["models"]) == self.models
        except (OSError, ValueError, KeyError, TypeError):
            return False

    async def run(self, every_s: float = 1.0, rescan_s: float = 60.0) -> None:
        """The service's form: passes until one finds no user holding another model's vectors, each
        page marked once the backlog is under a page, and `rescan_s` at least between passes (users of the
        last pass may still be in another replica's hands: the next pass finds them again, and marks none
        that is pending). Skipped when the record says it is done."""
        if not self.start():
            return
        if self.recorded():
            self.state, self.finished = "done", time.time()
            return
        while True:
            found = await self.scan(lambda: self._backlog_under(self.page, every_s))
            if not found:
                self._done()
                return
            self.state = "waiting"
            await asyncio.sleep(rescan_s)
            await self._backlog_under(self.page, every_s)

    async def complete(self, lease_s: float = 600.0, chunk: int = 256, max_passes: int = 3) -> dict:
        """The script's form (`Memory.reembed`): passes, each page marked and then indexed by this process,
        until a pass finds nothing (done) or `max_passes` passes found users still to do (incomplete:
        another process holds their claims, or they could not be finished). Its status."""
        if not self.start():
            return self.status()

        async def drain() -> None:
            await self.indexing.pending(lease_s, chunk)

        for _ in range(max_passes):
            found = await self.scan(drain, after_page=True)
            if not found:
                self._done()
                return self.status()
        self.state = "incomplete"
        return self.status()

    async def scan(self, between: Callable[[], Awaitable[None]], after_page: bool = False) -> int:
        """One pass over every user: marks those holding vectors of other models pending; how many held
        any. `between` runs before each page is marked (the service waits for the backlog to shrink), or
        with `after_page` after it (a script indexes the page)."""
        self.state, self.passes = "scanning", self.passes + 1
        self.found = 0
        after: Key | None = None
        found = 0
        while page := await self.runtime.on_store(self.store.users, after, self.page):
            after = page[-1]
            if not after_page:
                await between()
            stale = await self.runtime.on_store(self._stale, page)
            self.examined += len(page)
            found += len(stale)
            self.found = found
            if stale:
                marked = await self.runtime.on_store(self.store.mark_pending, stale)
                self.marked += marked
                log.info(
                    "re-embedding: pass %d: %d of %d users examined hold vectors of another encoder "
                    "(%d marked for indexing)",
                    self.passes,
                    len(stale),
                    len(page),
                    marked,
                )
            if after_page:
                await between()
        return found

    def _stale(self, page: Sequence[Key]) -> list[Key]:
        """The users of `page` whose vector blocks are named by a model not among the current ones (in a
        store thread: one look at each user's blocks)."""
        generations = self.store.generations(list(page))
        stale = []
        for key in page:
            generation = generations.get(key)
            if generation is None:  # forgotten since the page was read
                continue
            blocks = self.users.derived(*key, generation).storage.blocks()
            names = getattr(blocks, "names", None)
            if names is not None and any(name not in self.models for name in names(vector_blocks.KIND)):
                stale.append(key)
        return stale

    async def _retire(self, key: Key, state: UserState, messages: Sequence[Message]) -> None:
        """Indexing's `after_warm`: deletes the user's vectors of other models once the current ones cover
        `messages` (on the indexer thread, where the user's caches live, unless the state was closed
        since). A failure is logged; the next pass finds the user again."""

        def retire() -> list[str] | None:
            if self.users.get(key) is not state or state.retriever is None:
                return None
            return state.retriever.retire_other_vectors(messages)

        try:
            dropped = await self.runtime.on_indexer(retire)
        except Exception as e:  # noqa: BLE001 - the user's claim is still finished; a later pass retries
            log.warning(
                "re-embedding: deleting a user's vectors of other encoders failed (%s)", type(e).__name__
            )
            return
        if dropped:
            self.reembedded += 1
            if self.reembedded % LOG_EVERY == 0:
                log.info("re-embedding: %d users re-embedded, their other vectors deleted", self.reembedded)

    async def _backlog_under(self, bound: int, every_s: float) -> None:
        """Waits until fewer than `bound` users are waiting to be indexed."""
        while (await self.runtime.on_store(self.store.ready)).backlog >= bound:
            await asyncio.sleep(every_s)

    def _done(self) -> None:
        self.state, self.finished = "done", time.time()
        took = self.finished - (self.started or self.finished)
        log.info(
            "re-embedding: done, no user holds vectors of another encoder than %s "
            "(%d users re-embedded here, %.0f s)",
            ", ".join(sorted(self.models or ())),
            self.reembedded,
            took,
        )
        tmp = self.record.with_name(f"{self.record.name}.{os.getpid()}.tmp")
        try:
            self.record.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"models": sorted(self.models or ()), "at": self.finished}))
            tmp.replace(self.record)
        except OSError as e:  # the next start-up scans again: slower, never wrong
            log.warning("re-embedding: could not record %s (%s)", self.record, type(e).__name__)
