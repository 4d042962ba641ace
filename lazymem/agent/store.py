"""Where an agent's raw messages live: the storage contract and its records.

`Store` is all the rest of lazymem.agent asks of storage. Two stores implement it: `SQLiteStore`
(lazymem/agent/sqlite_store.py, one file, the embedded default) and `PostgresStore`
(lazymem/agent/postgres_store.py, one server database shared by several service replicas). The config
group conf/agent/store/ names one by its `_target_` (`agent/store=postgres`), and Hydra builds it; this
module names neither, so the stores import it and it imports no store. Their shared tables and migrations
are lazymem/agent/schema.py.

Ids are per tenant: each tenant's messages are numbered by a counter of its own, so the gaps between a
tenant's ids say nothing about other tenants. Every add marks its user `pending` until a background
indexer has embedded the new messages (`claim_pending` / `finish`). A user's `generation` changes whenever
any of their messages is deleted; whatever a process derived from the user's messages (indexes in memory,
caches) is tagged with the generation it was built at and is never used under another one.

Every stored message has a key (`source`): the one an import gave it (lazymem/agent/transfer.py), or a random
one (`new_key`) for a message added without one, which an export carries so that importing the export
again stores nothing twice. A deletion leaves digests of the keys it deleted in `forgotten` (`tombstones`:
digests, never text): an import of a message whose key was forgotten skips it, so no import, retry or
re-import of an old export brings a forgotten message back. `forget_all` deletes the user's digests too;
they are otherwise kept until the store's `forgotten_ttl_s` (None: for good).

A deletion that leaves a user some messages keeps the vectors of those messages: the caller passes
`vector_keys`, which names the embedding-cache keys of the deleted messages (`Retriever.vector_keys`), and
only those are dropped with the rest of the derived data. Re-embedding a 100,000-message user because one
message was forgotten would take half an hour on two cores.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from lazymem.agent.errors import BadInput, UnknownMessages, UnknownUser
from lazymem.retrieval.per_user import UserStorage

__all__ = ["UnknownMessages", "UnknownUser"]  # with the records below; their home is lazymem.agent.errors

# Ids are signed 64-bit integers in both stores.
MAX_ID = 2**63 - 1

# Called by a deletion with a user and the messages it deletes (in its transaction): the keys, by model
# identity, of the vectors derived from them in the user's embedding cache; None when they cannot be named.
VectorKeys = Callable[[str, Sequence["StoredMessage"]], Mapping[str, Collection[str]] | None]


@dataclass(frozen=True)
class NewMessage:
    role: str
    text: str
    time: str
    session_id: str
    # Where an imported message came from, as a key (lazymem/agent/transfer.py): an import resumed after a
    # crash skips what it already stored by this key, never by content alone (histories repeat "ok").
    source: str | None = None
    # Other keys of the same message (what an earlier lazymem named it): one stored under any of them is
    # not stored again either
    aliases: tuple[str, ...] = ()

    @property
    def keys(self) -> list[str]:
        """Its source, then its aliases: what the store looks up."""
        return ([] if self.source is None else [self.source]) + list(self.aliases)


def new_key() -> str:
    """A key for a message added without one: random, so that it names that message only."""
    return f"m1:{secrets.token_hex(16)}"


def tombstones(m: StoredMessage) -> tuple[str, ...]:
    """What a deletion leaves of a message: a digest of its key, and one of its key with its role and text
    (an earlier import's key may come back as another import's alias, which counts only with the same
    role and text, as in `already_stored`). Digests, never the key or the text."""
    if m.source is None:
        return ()
    return _digest("key", m.source), _digest("alias", m.source, m.role, m.text)


def tombstone_checks(m: NewMessage) -> list[str]:
    """The digests that say a message to be stored was forgotten (any one of them in `forgotten`)."""
    keys = [] if m.source is None else [_digest("key", m.source)]
    return keys + [_digest("alias", a, m.role, m.text) for a in m.aliases]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def already_stored(m: NewMessage, stored: Mapping[str, tuple[int, str, str]]) -> int | None:
    """The id of the message `m` is, among `stored` ({key: (id, role, text)} of the user's messages under
    m's keys), or None. A source names one message: the same source with another role or text is a
    BadInput, never a silent skip (the client reused a key). An alias counts only with the same role and
    text: it is a key of earlier versions, which named a line by its file's name alone."""
    if m.source is not None and m.source in stored:
        known, role, text = stored[m.source]
        if (role, text) != (m.role, m.text):
            raise BadInput(
                f"source {m.source!r} is already stored for this user with another message; a source names "
                "one message (nothing of this batch was stored)"
            )
        return known
    return next((stored[a][0] for a in m.aliases if a in stored and stored[a][1:] == (m.role, m.text)), None)


@dataclass(frozen=True)
class Idempotency:
    """An add's idempotency key, scoped to its tenant and user, and a digest of the request it came with:
    the same key with the same digest replays the first add's ids; with another digest it is an
    IdempotencyConflict. A store remembers a key for its `idempotency_ttl_s`."""

    key: str
    digest: str


@dataclass(frozen=True)
class Added:
    """What an add did: the batch's ids in order (a message skipped as already stored has the stored one's
    id, one skipped as forgotten has None), how many rows it wrote, how many messages it skipped because
    their key was forgotten, and whether it replayed an earlier add of the same idempotency key."""

    ids: list[int | None]
    stored: int
    replayed: bool = False
    forgotten: int = 0

    @property
    def skipped(self) -> int:
        """Messages skipped as already stored."""
        return 0 if self.replayed else len(self.ids) - self.stored - self.forgotten


@dataclass(frozen=True)
class Readiness:
    """The store answered: users waiting to be indexed, and how long the oldest has waited and the oldest
    live indexing claim has been held (None: none)."""

    backlog: int
    oldest_pending_s: float | None
    oldest_claim_s: float | None


@dataclass(frozen=True)
class StoredMessage:
    id: int
    session_id: str
    time: str
    role: str
    text: str
    added: float  # unix time it was stored: what retention counts from
    source: str | None = None  # its key (see above)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Snapshot:
    """A user's messages, oldest first, and the generation they were read at (None: unknown user)."""

    generation: int | None
    messages: list[StoredMessage]


@dataclass(frozen=True)
class Claim:
    """A user whose messages are waiting to be indexed, claimed by one process until `finish` (or until its
    lease runs out, when another process may take it: a replica that dies leaves its claims to the others).
    `mark` identifies the adds it covers: a later add keeps the user pending after `finish`."""

    tenant: str
    user: str
    mark: int


@dataclass(frozen=True)
class Derived:
    """Where one user's derived data goes: the retrievers' storage handle, and a factory for the memory
    model's response cache (an object with `get(key)` / `put(key, value, model)` / `close()`)."""

    storage: UserStorage
    llm_cache: Callable[[], Any]


class Store(Protocol):
    """Raw messages per (tenant, user), in the order they were added."""

    # True when the store keeps users' derived data itself (`derived`), so the local user folders are
    # scratch that a restart may clear; False when those folders are the derived data
    derived_in_store: bool

    def add(
        self, tenant: str, user: str, messages: Sequence[NewMessage], idempotency: Idempotency | None = None
    ) -> Added:
        """Store a batch atomically. A message whose `source` or one of its `aliases` is already stored for
        the user is not stored again: its id is the stored one's; nor is one whose key a deletion left in
        `forgotten` (`tombstone_checks`). A message without a `source` is stored under `new_key()`. With
        `idempotency`, the key is written in
        the same transaction; a key already remembered for the user replays its ids (same digest, even while
        the first add is still committing: the second waits for it) or raises IdempotencyConflict."""
        ...

    def ready(self) -> Readiness:
        """One round trip to the store (StoreUnavailable when it does not answer in time)."""
        ...

    def unreachable(self) -> str | None:
        """Why the store is known to be unreachable now (a call found it down, and no probe since found it
        up), without a round trip; None when it is not known to be. A caller waiting for something else
        (a user's lock) gives up as soon as this is not None."""
        ...

    def snapshot(self, tenant: str, user: str, after: int = 0, limit: int | None = None) -> Snapshot:
        """The user's messages with an id above `after` (by default all; with `limit`, the oldest `limit`
        of them) and the user's generation, read together (one transaction). A tenant's ids grow in the
        order its adds commit, so a reader that holds a user's messages up to id N at generation G has them
        all after reading `after=N`, as long as the generation is still G (deletions change it)."""
        ...

    def generations(self, users: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The current generation of each of `users` that has messages."""
        ...

    def forget(
        self, tenant: str, user: str, ids: Sequence[int] | None = None, vector_keys: VectorKeys | None = None
    ) -> int:
        """Delete the given messages (all of them, or UnknownMessages), leaving their `tombstones`, or with
        `ids=None` every message of the user, the user's idempotency keys and tombstones, with the derived
        data the store holds for the user; the user's generation changes. With `vector_keys`, deleting some
        of a user's messages keeps the vectors of the others (see above). Callers never pass an empty list
        (it would change nothing)."""
        ...

    def purge(
        self, tenant: str, before: float, vector_keys: VectorKeys | None = None
    ) -> dict[str, int] | None:
        """Delete the tenant's messages added before `before` (unix time), leaving their `tombstones`;
        deletions per user. None when
        another process holds the purge (a server database runs one purge at a time). `vector_keys`: as
        for `forget`, called with each user's deleted messages."""
        ...

    def maintain(self) -> None:
        """Make past deletions final in the store's files (what `forget` alone cannot promise), and delete
        idempotency keys older than the store's `idempotency_ttl_s` (and tombstones older than its
        `forgotten_ttl_s`, when it has one). Raises when a step fails: the deletions stay to be made final
        by the next call."""
        ...

    def claim_pending(self, lease_s: float) -> Claim | None:
        """The user added to longest ago whose messages no process is indexing now, claimed for
        `lease_s` seconds; None when every added message is indexed or claimed."""
        ...

    def finish(self, claim: Claim) -> None:
        """The claimed user is indexed up to the claim's mark."""
        ...

    def users(self, after: tuple[str, str] | None = None, limit: int = 1000) -> list[tuple[str, str]]:
        """Up to `limit` users who have messages, as (tenant, user) in that order, after `after`: a page of
        a scan over every user (lazymem/agent/reembedding.py looks for vectors of another encoder)."""
        ...

    def mark_pending(self, users: Sequence[tuple[str, str]]) -> int:
        """Mark `users` pending, as an add does, so that a background indexer claims them (to re-embed
        them under a new encoder); a user already pending keeps its mark and place, one without messages
        is left out. How many it marked."""
        ...

    def derived(self, tenant: str, user: str, dir: Path, generation: int) -> Derived:
        """Where the user's derived data lives while their generation is `generation`."""
        ...

    def close(self) -> None: ...


def open_store(cfg: Any) -> Store:
    """The store `cfg` (the composed `agent.store`) names by its `_target_`, built by Hydra. What the store
    raises while it opens (StoreUnavailable in an outage, a schema newer than this lazymem) reaches the
    caller as it is, not wrapped in Hydra's InstantiationException; the wrapper stays for the config's own
    faults (a `_target_` that does not import, a key the class does not take)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(cfg)
    except InstantiationException as e:
        cause = e.__cause__
        if cause is None or isinstance(cause, ImportError | TypeError):
            raise
        raise cause from None
