"""The tables of a PostgreSQL store: creating them, migrating them, and what opening finds.

The layout is described in :mod:`agents.memory.stores._postgres.backend`. Every step
that changes it runs under one advisory lock (:func:`lock_schema`), so
processes opening one database at once set it up once.
"""

from __future__ import annotations

import math
from typing import Any, Final

import attrs
import orjson

from agents.memory.exceptions import SchemaVersionError
from agents.memory.stores._core.migrations import check_schema_version, migrate
from agents.memory.stores._postgres.keyword import build_keyword_index, count_every_update
from agents.memory.stores._postgres.leaves import build_leaves
from agents.memory.stores._postgres.postings import build_postings, pack_blocks

__all__ = [
    "CHANGES_KEPT",
    "CUT_ROWS_OVER",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Tables",
    "jsonb_copy",
    "lock_schema",
    "offers_lz4",
    "open_tables",
]

_SCHEMA_LOCK: Final = 0x6B766D656D  # "kvmem": serializes schema setup across processes


def lock_schema(con: Any) -> None:
    """Take the lock that serializes changes of the tables, until the transaction of ``con`` ends."""
    con.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))


CUT_ROWS_OVER: Final = 4096
"""Bytes of data over which a row read for some keys is cut down on the server from its JSONB copy."""


def _create_v1(con: Any) -> None:
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id text PRIMARY KEY,
        step_key text NOT NULL,
        next_seq bigint NOT NULL DEFAULT 0,
        created double precision NOT NULL
    )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_items (
        session_id text NOT NULL REFERENCES kvmemory_sessions ON DELETE CASCADE,
        seq bigint NOT NULL,
        step text,
        created double precision NOT NULL,
        data bytea NOT NULL,
        doc jsonb,
        PRIMARY KEY (session_id, seq)
    )"""
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)"
    )


def _add_metadata_and_tombstones(con: Any) -> None:
    # '\x7b7d' is the codec's bytes for an empty dict: sessions of v1 had no metadata.
    con.execute(
        "ALTER TABLE kvmemory_sessions ADD COLUMN metadata bytea NOT NULL DEFAULT '\\x7b7d'::bytea"
    )
    con.execute("ALTER TABLE kvmemory_sessions ADD COLUMN deleted boolean NOT NULL DEFAULT false")
    _drop_inexact_docs(con)


def _add_vectors(con: Any) -> None:
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_embedders (
        session_id text PRIMARY KEY REFERENCES kvmemory_sessions ON DELETE CASCADE,
        model text NOT NULL,
        dimension integer NOT NULL
    )"""
    )
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_vectors (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        fields text NOT NULL,
        vector bytea NOT NULL,
        PRIMARY KEY (session_id, seq, fields),
        FOREIGN KEY (session_id, seq) REFERENCES kvmemory_items ON DELETE CASCADE
    )"""
    )


def _add_keyword_index(con: Any) -> None:
    build_keyword_index(con)


def _add_record_keys(con: Any) -> None:
    # Every row of older tables is a plain item: NULL, which the partial index leaves out. The
    # "C" collation orders keys by code point, as every store lists them, and lets the index
    # answer a prefix as a range.
    con.execute('ALTER TABLE kvmemory_items ADD COLUMN IF NOT EXISTS key text COLLATE "C"')
    con.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS kvmemory_items_key ON kvmemory_items (session_id, key)"
        " WHERE key IS NOT NULL"
    )


# Each statement that writes a session's vector rows (insert, update, delete, a delete
# cascaded from its items) gives the session's row a fresh number from one sequence, in
# the writing transaction: a value no earlier state of any session held, read in one
# lookup by key (Backend.vectors_version) instead of a digest of every vector row.
_VECTORS_VERSION_FUNCTION: Final = """CREATE OR REPLACE FUNCTION kvmemory_vectors_written()
    RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE kvmemory_sessions SET vectors_version = nextval('kvmemory_vectors_versions')
        WHERE session_id IN (SELECT DISTINCT session_id FROM written_rows);
        RETURN NULL;
    END $$"""

_VECTORS_VERSION_TRIGGERS: Final = tuple(
    f"CREATE TRIGGER kvmemory_vectors_{event.lower()} AFTER {event} ON kvmemory_vectors"
    f" REFERENCING {rows} TABLE AS written_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION kvmemory_vectors_written()"
    for event, rows in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))
)


def _add_vectors_version(con: Any) -> None:
    con.execute("CREATE SEQUENCE IF NOT EXISTS kvmemory_vectors_versions")
    # A session made later starts at a number of its own too (never one a cache holds).
    con.execute(
        "ALTER TABLE kvmemory_sessions ADD COLUMN IF NOT EXISTS vectors_version bigint"
        " NOT NULL DEFAULT nextval('kvmemory_vectors_versions')"
    )
    con.execute(_VECTORS_VERSION_FUNCTION)
    for event in ("insert", "update", "delete"):
        con.execute(f"DROP TRIGGER IF EXISTS kvmemory_vectors_{event} ON kvmemory_vectors")
    for statement in _VECTORS_VERSION_TRIGGERS:
        con.execute(statement)


# Schema version 7: the same trigger also logs each seq written, under the session's new
# version, in kvmemory_vector_changes. The version is taken while the writing transaction
# holds the session's row (every writer of a session locks it first, and the trigger's
# UPDATE waits for it), so a session's versions follow commit order: a reader that sees
# version v finds every change logged at or below it committed, and the rows above a
# version it kept name the items whose vectors changed since (Backend.vector_changes).
# A statement whose version is a multiple of _PRUNE_EVERY keeps the newest CHANGES_KEPT
# rows of its session: the older ones go, and one row with no seq marks where they
# went ("changes at or before here are gone").

CHANGES_KEPT: Final = 16384
"""The rows of a session's vector change log kept at least; the older ones are pruned."""

_PRUNE_EVERY: Final = 64
"""A write whose version is a multiple of this prunes its session's log (versions come from one sequence)."""

_LOGGED_VECTORS_VERSION_FUNCTION: Final = f"""CREATE OR REPLACE FUNCTION kvmemory_vectors_written()
    RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        bumped record;
        cut bigint;
    BEGIN
        FOR bumped IN
            UPDATE kvmemory_sessions SET vectors_version = nextval('kvmemory_vectors_versions')
            WHERE session_id IN (SELECT DISTINCT session_id FROM written_rows)
            RETURNING session_id, vectors_version
        LOOP
            INSERT INTO kvmemory_vector_changes (session_id, version, seq)
            SELECT DISTINCT bumped.session_id, bumped.vectors_version, w.seq
            FROM written_rows AS w WHERE w.session_id = bumped.session_id;
            IF bumped.vectors_version % {_PRUNE_EVERY} = 0 THEN
                SELECT version INTO cut FROM kvmemory_vector_changes
                WHERE session_id = bumped.session_id
                ORDER BY version DESC OFFSET {CHANGES_KEPT} LIMIT 1;
                IF cut IS NOT NULL THEN
                    DELETE FROM kvmemory_vector_changes
                    WHERE session_id = bumped.session_id AND version <= cut;
                    INSERT INTO kvmemory_vector_changes (session_id, version, seq)
                    VALUES (bumped.session_id, cut, NULL);
                END IF;
            END IF;
        END LOOP;
        RETURN NULL;
    END $$"""


def _log_vector_changes(con: Any) -> None:
    # The vectors already stored have no rows: the log covers the writes from now on.
    con.execute(
        """CREATE TABLE IF NOT EXISTS kvmemory_vector_changes (
        session_id text NOT NULL,
        version bigint NOT NULL,
        seq bigint
    )"""
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_vector_changes_session"
        " ON kvmemory_vector_changes (session_id, version)"
    )
    con.execute(_LOGGED_VECTORS_VERSION_FUNCTION)


# Schema version 8: each row's term counts (tf, JSONB) are compressed with lz4 where the
# server offers it (PostgreSQL 14 and later, built with lz4). A keyword ranking reads the
# counts of every row a query word matches, and decompressing them was most of its time:
# reading three counts from each of 100,000 rows took 348-902 ms with pglz, the default,
# and 177-535 ms with lz4 (reading the rows alone 36-148 ms; 7 runs each, load 5). Only
# rows written from then on are compressed so: writing the rows stored before again took
# 27.6 s for 130,000 rows under the schema lock (every handle's open waits for it) and
# leaves a dead copy of each row until vacuumed, so they stay pglz (both read the same).
# A server without lz4 keeps pglz.


def offers_lz4(con: Any) -> bool:
    """Return whether the server can compress a column with lz4 (PostgreSQL 14 and later, built with it)."""
    row = con.execute(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    ).fetchone()
    return bool(row and row[0])


def _compress_counts_with_lz4(con: Any) -> None:
    if not offers_lz4(con):
        return
    con.execute("ALTER TABLE kvmemory_items ALTER COLUMN tf SET COMPRESSION lz4")


# Schema version 9: the posting blocks (kvmemory_postings, see _postgres.postings), filled
# from every stored row's counts and kept by triggers from then on. A keyword ranking
# reads the query terms' blocks instead of every row holding a query word: at 100,000
# steps the rows' ranking read ~20,000 heap pages and each row's JSONB counts per query.


def _add_posting_blocks(con: Any) -> None:
    build_postings(con)


# v10: every update of a session's rows touches its session's row (the count trigger did only
# where the terms' number changed), so that the row's xmin names every version of the rows: a
# memory read from the store asks its keyword ranking while that is unchanged.
def _count_every_update(con: Any) -> None:
    count_every_update(con)


# Schema version 11: a GIN index over each row's JSONB copy (jsonb_path_ops: it answers "doc @>
# value"), and a partial index of the rows without one. A filter asking fields for some values
# names the rows that may pass from them (_sql.doc_index), where it read every row's copy: a
# filter passing 0.1% of 100,000 steps took 1.5-1.8 s in a keyword search (see docs/search.md).


def _add_doc_index(con: Any) -> None:
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_doc ON kvmemory_items USING gin (doc jsonb_path_ops)"
    )
    con.execute(
        "CREATE INDEX IF NOT EXISTS kvmemory_items_docless ON kvmemory_items (session_id)"
        " WHERE doc IS NULL"
    )


# Schema version 12: each posting block's arrays also packed, generated by the server (see
# _postgres.postings.pack_blocks). A query of common words only reads every block of its words,
# and the server's conversion of each element (array_send) and the frame around each were most
# of it: at 100,000 steps the first hybrid query of a StoredMemory was 3.5-6x its warm one.


def _pack_posting_blocks(con: Any) -> None:
    pack_blocks(con)


# Schema version 13: each row's numbers and strings by field path in kvmemory_leaves (see
# _postgres.leaves), kept by triggers. A range filter ($gt, $lt, ...) names the rows that may
# pass from its btree indexes, where it read every row's JSONB copy: a semantic query with a
# range keeping 0.1% of 10,000 steps cost ~12x the unfiltered one in the server's CPU.


def _add_leaves(con: Any) -> None:
    build_leaves(con)


# Schema version 14: the triggers give the session's row a random nonce beside its new number,
# and log it on each change row. A database put back to a physical copy of itself (same name,
# same oids: the same vector cache folder) rewinds the sequence, and its later writes get the
# numbers a cache may hold again; the nonce tells them apart. A version is (number, nonce),
# still one lookup by key, and Backend.vector_changes takes a kept version only where the
# change rows at its number still hold its nonce. Sessions and change rows from before get a
# nonce of their own (sessions) or none (rows): a cache kept at them is built again once.

_RANDOM_NONCE: Final = "(random() * 4611686018427387904)::bigint"  # 2 ** 62: a bigint

_NONCED_VECTORS_VERSION_FUNCTION: Final = f"""CREATE OR REPLACE FUNCTION kvmemory_vectors_written()
    RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        bumped record;
        cut bigint;
    BEGIN
        FOR bumped IN
            UPDATE kvmemory_sessions SET vectors_version = nextval('kvmemory_vectors_versions'),
                vectors_nonce = {_RANDOM_NONCE}
            WHERE session_id IN (SELECT DISTINCT session_id FROM written_rows)
            RETURNING session_id, vectors_version, vectors_nonce
        LOOP
            INSERT INTO kvmemory_vector_changes (session_id, version, seq, nonce)
            SELECT DISTINCT bumped.session_id, bumped.vectors_version, w.seq, bumped.vectors_nonce
            FROM written_rows AS w WHERE w.session_id = bumped.session_id;
            IF bumped.vectors_version % {_PRUNE_EVERY} = 0 THEN
                SELECT version INTO cut FROM kvmemory_vector_changes
                WHERE session_id = bumped.session_id
                ORDER BY version DESC OFFSET {CHANGES_KEPT} LIMIT 1;
                IF cut IS NOT NULL THEN
                    DELETE FROM kvmemory_vector_changes
                    WHERE session_id = bumped.session_id AND version <= cut;
                    INSERT INTO kvmemory_vector_changes (session_id, version, seq)
                    VALUES (bumped.session_id, cut, NULL);
                END IF;
            END IF;
        END LOOP;
        RETURN NULL;
    END $$"""


def _add_vectors_nonce(con: Any) -> None:
    con.execute(
        "ALTER TABLE kvmemory_sessions ADD COLUMN IF NOT EXISTS vectors_nonce bigint"
        f" NOT NULL DEFAULT {_RANDOM_NONCE}"
    )
    con.execute("ALTER TABLE kvmemory_vector_changes ADD COLUMN IF NOT EXISTS nonce bigint")
    con.execute(_NONCED_VECTORS_VERSION_FUNCTION)


MIGRATIONS: Final = (
    _create_v1,
    _add_metadata_and_tombstones,
    _add_vectors,
    _add_keyword_index,
    _add_record_keys,
    _add_vectors_version,
    _log_vector_changes,
    _compress_counts_with_lz4,
    _add_posting_blocks,
    _count_every_update,
    _add_doc_index,
    _pack_posting_blocks,
    _add_leaves,
    _add_vectors_nonce,
)
"""Step ``i`` brings the tables from schema version ``i`` to ``i + 1`` (see :func:`migrate`)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
_SEARCHED_BY_SCAN: Final = (
    3  # the layout before the keyword index: read-only opens search by scanning
)
_NO_RECORD_KEYS: Final = 4  # the layout before record keys: read-only opens hold no records
_NO_VECTORS_VERSION: Final = (
    5  # the layout before the vectors' version: read-only opens digest the rows
)
_NO_CHANGE_LOG: Final = (
    6  # the layout before the vector change log: read-only opens cannot tell changes
)
# Version 7 (before lz4 counts) reads as 8 does.
_NO_POSTINGS: Final = 8  # the layout before the posting blocks: read-only opens rank the rows
_NO_ROWS_VERSION: Final = (
    9  # before every update touched its session: read-only opens tell no version
)
_NO_DOC_INDEX: Final = 10  # the layout before the JSONB index: read-only opens scan for filters
_UNPACKED_BLOCKS: Final = 11  # before the blocks' packed copies: read-only opens have arrays sent
_NO_LEAVES: Final = 12  # before the leaf table: read-only opens read every row's copy for a range
_NO_VECTORS_NONCE: Final = 13  # before the nonce: read-only opens' versions are numbers alone


@attrs.frozen
class Tables:
    """What opening found in the database.

    Attributes:
        no_tables: The database holds no kvmemory tables yet (a read-only
            handle then reads every session as empty).
        keyword_index: The rows carry the keyword index (``False`` for the
            tables before it, opened read-only: searches scan).
        record_keys: The rows have the record key column (``False`` for the
            tables before it, opened read-only: they hold no records).
        vectors_version: The sessions' rows keep the version of their vector
            rows (``False`` for the tables before it, opened read-only: the
            version is a digest of the vector rows).
        change_log: Every vector write is logged with its seq under the
            session's new version (``False`` for the tables before it,
            opened read-only: changes cannot be told).
        postings: The posting blocks keep each term's items (``False`` for
            the tables before them, opened read-only: keyword rankings read
            the rows holding a query word).
        rows_version: Every write of a session's rows touches its session's
            row (``False`` for the tables before, opened read-only: no
            ``keyword_version``).
        doc_index: A GIN index over the rows' JSONB copies names the rows
            a filter may pass (``False`` for the tables before it, opened
            read-only: filters read every row's copy).
        packed_blocks: The posting blocks keep their arrays packed too
            (``False`` for the tables before, opened read-only: a ranking
            has the server send the arrays, ``array_send``).
        leaves: The leaf table keeps each row's numbers and strings by path
            (``False`` for the tables before it, opened read-only: a range
            filter reads every row's JSONB copy).
        vectors_nonce: The sessions' rows and change rows keep a random
            nonce beside each vectors version (``False`` for the tables
            before it, opened read-only: a version is the number alone).
    """

    no_tables: bool = False
    keyword_index: bool = True
    record_keys: bool = True
    vectors_version: bool = True
    change_log: bool = True
    postings: bool = True
    rows_version: bool = True
    doc_index: bool = True
    packed_blocks: bool = True
    leaves: bool = True
    vectors_nonce: bool = True


def open_tables(con: Any, *, store: str, read_only: bool) -> Tables:
    """Create or migrate the tables over ``con`` (an autocommit connection), or only check them when ``read_only``.

    Args:
        con: A connection of its own, outside any transaction.
        store: Names the store in messages.
        read_only: Check the schema version in a read-only transaction and change nothing.

    Returns:
        What was found.

    Raises:
        SchemaVersionError: if a newer kvmemory created the tables, or
            ``read_only`` meets older tables that need a migration.
    """
    if read_only:
        with con.transaction():
            con.execute("SET TRANSACTION READ ONLY")
            if con.execute("SELECT to_regclass('kvmemory_schema')").fetchone()[0] is None:
                return Tables(no_tables=True)
            version = check_schema_version(_version(con), SCHEMA_VERSION, store=store)
        if _SEARCHED_BY_SCAN <= version < SCHEMA_VERSION:
            # An older layout reads the same, without what later versions added.
            return Tables(
                keyword_index=version > _SEARCHED_BY_SCAN,
                record_keys=version > _NO_RECORD_KEYS,
                vectors_version=version > _NO_VECTORS_VERSION,
                change_log=version > _NO_CHANGE_LOG,
                postings=version > _NO_POSTINGS,
                rows_version=version > _NO_ROWS_VERSION,
                doc_index=version > _NO_DOC_INDEX,
                packed_blocks=version > _UNPACKED_BLOCKS,
                leaves=version > _NO_LEAVES,
                vectors_nonce=version > _NO_VECTORS_NONCE,
            )
        if version < SCHEMA_VERSION:
            msg = f"{store} has schema version {version}; opened read-only it cannot be migrated to {SCHEMA_VERSION}. Open it once writable to migrate it."
            raise SchemaVersionError(msg)
        return Tables(no_tables=version == 0)
    with con.transaction():
        lock_schema(con)
        con.execute("CREATE TABLE IF NOT EXISTS kvmemory_schema (version integer NOT NULL)")
        found = _version(con)
        if found != SCHEMA_VERSION:
            reached = migrate(MIGRATIONS, found, con, store=store)
            con.execute("DELETE FROM kvmemory_schema")
            con.execute("INSERT INTO kvmemory_schema (version) VALUES (%s)", (reached,))
    return Tables()


def _version(con: Any) -> int:
    row = con.execute("SELECT max(version) FROM kvmemory_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def jsonb_copy(data: bytes) -> str | None:
    """Return the JSONB copy of a row's data, or ``None`` where JSONB cannot hold it exactly."""
    # JSONB cannot hold the NUL character; such items are kept in ``data`` only.
    if b"\\u0000" in data:
        return None
    if len(data) > CUT_ROWS_OVER and _jsonb_alters(orjson.loads(data)):
        return None
    return data.decode("utf-8")


def _jsonb_alters(value: Any) -> bool:
    """Return whether JSONB would give back some float of ``value`` as another value or type."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is float:
            if node == 0.0 and math.copysign(1.0, node) < 0:
                return True  # -0.0 comes back as 0
            text = orjson.dumps(node)
            if b"e" in text and b"e-" not in text:
                return True  # 1e16 comes back as the integer 10000000000000000
        elif kind is dict:
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
    return False


def _drop_inexact_docs(con: Any) -> None:
    # v1 gave every row a JSONB copy; large rows whose floats it alters lose it (see jsonb_copy).
    changed: list[tuple[str, int]] = []
    with con.cursor(name="kvmemory_migrate_docs") as cur:
        cur.execute(
            "SELECT session_id, seq, data FROM kvmemory_items"
            f" WHERE doc IS NOT NULL AND octet_length(data) > {CUT_ROWS_OVER}"
        )
        for session_id, seq, data in cur:
            if jsonb_copy(bytes(data)) is None:
                changed.append((session_id, seq))
    for session_id, seq in changed:
        con.execute(
            "UPDATE kvmemory_items SET doc = NULL WHERE session_id = %s AND seq = %s",
            (session_id, seq),
        )
