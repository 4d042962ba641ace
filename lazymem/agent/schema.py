"""The stores' one schema: its tables, the versioned steps that build them, and what both stores check alike.

Both stores (lazymem/agent/sqlite_store.py, lazymem/agent/postgres_store.py) hold the same tables and bring
a database to `VERSION` through the same `STEPS`. A step's statements are written once, with placeholders
for the few words the dialects spell differently (`Dialect`); what only one store has (PostgreSQL's
sequences and its `derived` rows, SQLite's counters) is a step's per-dialect extra. Each store keeps its
own SQL where the dialects really differ: upserts, locks, the maintenance step.

Versions: 2 is the first schema both stores shared; 3 adds the adds' idempotency keys and the times a user
became pending and was claimed; 4 adds `blocks`, a user's derived data as numbered blobs; 5 gives every
message a key (`source`: those added without one get a random key) and adds `forgotten`, the digests a
deletion leaves of the keys it deleted (lazymem/agent/store.py), so that no import brings them back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from lazymem.agent.errors import UnknownMessages
from lazymem.agent.store import StoredMessage


@dataclass(frozen=True)
class Dialect:
    """How one database spells the schema's column types, the current unix time and a query parameter."""

    name: str
    integer: str  # a 64-bit integer
    real: str  # a double
    blob: str  # bytes
    ids: str  # a list of message ids
    now: str  # an expression: the current unix time, in seconds
    mark: str  # a query parameter's placeholder (lazymem/agent/store_sql.py)

    def words(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}


SQLITE = Dialect("sqlite", "INTEGER", "REAL", "BLOB", "TEXT", "((julianday('now') - 2440587.5) * 86400)", "?")
POSTGRES = Dialect(
    "postgres",
    "BIGINT",
    "DOUBLE PRECISION",
    "BYTEA",
    "BIGINT[]",
    "extract(epoch FROM clock_timestamp())",
    "%s",
)


@dataclass(frozen=True)
class Step:
    """One schema version: the statements that bring the version before it to this one, shared ones first,
    then the dialect's own (`only`, by dialect name)."""

    version: int
    shared: tuple[str, ...]
    only: dict[str, tuple[str, ...]]

    def statements(self, dialect: Dialect) -> list[str]:
        words = dialect.words()
        return [s.format(**words) for s in (*self.shared, *self.only.get(dialect.name, ()))]


# a user's derived data as numbered blobs by (kind, name), e.g. ("vectors", model identity)
_BLOCKS = """CREATE TABLE blocks (
    tenant  TEXT NOT NULL,
    user_id TEXT NOT NULL,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    block   {integer} NOT NULL,
    data    {blob} NOT NULL,
    PRIMARY KEY (tenant, user_id, kind, name, block)
)"""

STEPS = (
    Step(
        2,
        (
            """CREATE TABLE messages (
                tenant     TEXT NOT NULL,
                user_id    TEXT NOT NULL,
                id         {integer} NOT NULL,
                session_id TEXT NOT NULL,
                time       TEXT NOT NULL,
                role       TEXT NOT NULL,
                text       TEXT NOT NULL,
                added      {real} NOT NULL,
                source     TEXT,
                PRIMARY KEY (tenant, id)
            )""",
            "CREATE INDEX messages_by_user ON messages (tenant, user_id, id)",
            "CREATE UNIQUE INDEX messages_by_source ON messages (tenant, user_id, source) "
            "WHERE source IS NOT NULL",
            "CREATE TABLE tenant_ids (tenant TEXT PRIMARY KEY, last_id {integer} NOT NULL)",
            "CREATE TABLE generations (tenant TEXT, user_id TEXT, generation {integer} NOT NULL, "
            "PRIMARY KEY (tenant, user_id))",
            "CREATE TABLE pending (tenant TEXT, user_id TEXT, mark {integer} NOT NULL, "
            "claimed_until {real} NOT NULL DEFAULT 0, PRIMARY KEY (tenant, user_id))",
        ),
        {
            # one counter numbers generations and pending marks
            "sqlite": (
                "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
                "INSERT INTO counters (name, value) VALUES ('generation', 0)",
            ),
            # the memory model's replies as rows (lazymem/agent/derived_rows.py), and whether deletions
            # wait for maintenance
            "postgres": (
                "CREATE SEQUENCE generation_seq",
                "CREATE SEQUENCE pending_seq",
                """CREATE TABLE derived (
                    tenant  TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    kind    TEXT NOT NULL,
                    model   TEXT NOT NULL,
                    key     TEXT NOT NULL,
                    value   BYTEA NOT NULL,
                    created DOUBLE PRECISION NOT NULL,
                    PRIMARY KEY (tenant, user_id, kind, model, key)
                )""",
                "CREATE TABLE maintenance (pending BOOLEAN NOT NULL)",
                "INSERT INTO maintenance VALUES (false)",
            ),
        },
    ),
    Step(
        3,
        (
            """CREATE TABLE idempotency (
                tenant  TEXT NOT NULL,
                user_id TEXT NOT NULL,
                key     TEXT NOT NULL,
                digest  TEXT NOT NULL,
                ids     {ids} NOT NULL,
                created {real} NOT NULL,
                PRIMARY KEY (tenant, user_id, key)
            )""",
            "CREATE INDEX idempotency_by_age ON idempotency (created)",
            # since: the unix time the user became pending (a user already pending: the upgrade's time)
            "ALTER TABLE pending ADD COLUMN since {real} NOT NULL DEFAULT 0",
            "UPDATE pending SET since = {now}",
            "ALTER TABLE pending ADD COLUMN claimed_at {real}",
        ),
        {},
    ),
    Step(
        4,
        (_BLOCKS,),
        {
            # blocks out of line but not compressed: vectors do not compress, and the attempt made writes
            # 5x slower (and would hide a forgotten block's bytes from the canary tests' file search)
            "postgres": ("ALTER TABLE blocks ALTER COLUMN data SET STORAGE EXTERNAL",),
        },
    ),
    Step(
        5,
        (
            """CREATE TABLE forgotten (
                tenant  TEXT NOT NULL,
                user_id TEXT NOT NULL,
                digest  TEXT NOT NULL,
                created {real} NOT NULL,
                PRIMARY KEY (tenant, user_id, digest)
            )""",
            "CREATE INDEX forgotten_by_age ON forgotten (created)",
        ),
        {
            # a random key for each message stored without one, as the stores give new ones (store.new_key)
            "sqlite": (
                "UPDATE messages SET source = 'm1:' || lower(hex(randomblob(16))) WHERE source IS NULL",
            ),
            "postgres": (
                "UPDATE messages SET source = 'm1:' || md5(random()::text || clock_timestamp()::text || "
                "id::text) WHERE source IS NULL",
            ),
        },
    ),
)
VERSION = STEPS[-1].version

# A StoredMessage's columns in a SELECT or RETURNING list, in its fields' order
MESSAGE_COLUMNS = ", ".join(f.name for f in fields(StoredMessage))
# The columns an add writes, in this order
INSERT_COLUMNS = "tenant, user_id, id, session_id, time, role, text, added, source"


def steps_after(version: int, dialect: Dialect, where: str) -> list[str]:
    """The statements that bring a database of the shared `version` to VERSION (none when it is there); a
    RuntimeError naming `where` when it is newer than this lazymem."""
    if version > VERSION:
        raise RuntimeError(f"{where} has lazymem schema version {version}; this lazymem knows {VERSION}")
    return [s for step in STEPS if step.version > version for s in step.statements(dialect)]


def blocks_table(dialect: Dialect, if_absent: bool = False) -> str:
    """The statement that creates `blocks` (lazymem/agent/local_blocks.py keeps it in a file of its own)."""
    statement = _BLOCKS.format(**dialect.words())
    return statement.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1) if if_absent else statement


def check_known(wanted: Sequence[int], found: Iterable[int]) -> None:
    """A deletion by ids deletes all of them or none: UnknownMessages naming those of `wanted` that are not
    among the user's messages (`found`)."""
    mine = set(found)
    missing = sorted({i for i in wanted if i not in mine})
    if missing:
        raise UnknownMessages(missing)
