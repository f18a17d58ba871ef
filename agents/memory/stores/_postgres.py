"""The PostgreSQL store: sessions shared by processes on many machines.

Needs the ``postgres`` extra (psycopg 3 and psycopg_pool), imported only
when a ``postgresql://`` URL is opened. Layout (schema version 1, recorded in
``kvmemory_schema``)::

    kvmemory_sessions(session_id text PRIMARY KEY, step_key text, next_seq bigint, created float8)
    kvmemory_items(session_id text, seq bigint, step text, created float8,
                   data bytea, doc jsonb, PRIMARY KEY (session_id, seq))
    index (session_id, step), index (session_id, created)

``data`` holds the codec's bytes for the item (exact, with its field order);
``doc`` the same item as JSONB for queries in SQL (``NULL`` only for the rare
item whose text holds a NUL character, which JSONB cannot store).

Order for concurrent writers: an append is one statement that bumps the
session's ``next_seq`` (taking the session row's lock until commit) and
inserts the rows with the seqs it reserved. Two writers appending to one
session therefore queue on that row lock; each gets a consecutive block of
seqs, and seqs follow commit order, so a reader that has seen seq ``n`` never
misses a row committed later with a smaller seq. Every statement runs in
autocommit mode or one explicit transaction; nothing is half applied.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

from agents.memory.exceptions import (
    SchemaVersionError,
    StoreError,
    missing_dependency,
)
from agents.memory.stores._base import BaseStore, Row

__all__ = ["PostgresStore"]

SCHEMA_VERSION: Final = 1
_SCHEMA_LOCK: Final = 0x6B766D656D  # "kvmem": serializes schema setup across processes

_SCHEMA_V1: Final = (
    """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id text PRIMARY KEY,
        step_key text NOT NULL,
        next_seq bigint NOT NULL DEFAULT 0,
        created double precision NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kvmemory_items (
        session_id text NOT NULL REFERENCES kvmemory_sessions ON DELETE CASCADE,
        seq bigint NOT NULL,
        step text,
        created double precision NOT NULL,
        data bytea NOT NULL,
        doc jsonb,
        PRIMARY KEY (session_id, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)",
)

_APPEND: Final = """
WITH s AS (
    INSERT INTO kvmemory_sessions AS s (session_id, step_key, next_seq, created)
    VALUES (%(sid)s, %(key)s, %(n)s, %(now)s)
    ON CONFLICT (session_id) DO UPDATE SET next_seq = s.next_seq + %(n)s
    RETURNING s.next_seq, s.step_key
)
INSERT INTO kvmemory_items (session_id, seq, step, created, data, doc)
SELECT %(sid)s, s.next_seq - %(n)s + r.ord, r.step, r.created, r.data, r.doc::jsonb
FROM s, unnest(%(steps)s::text[], %(created)s::float8[], %(datas)s::bytea[], %(docs)s::text[])
    WITH ORDINALITY AS r(step, created, data, doc, ord)
WHERE s.step_key = %(key)s
RETURNING seq
"""


class PostgresStore(BaseStore):
    """Sessions in a PostgreSQL database, through a connection pool.

    Args:
        conninfo: A libpq URL or connection string (``postgresql://user@host/db``).
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most (one per concurrent call).
        timeout: Seconds to wait for a connection from the pool.

    Raises:
        MissingDependencyError: if psycopg or psycopg_pool is not installed.
        SchemaVersionError: if a newer kvmemory created the tables.
        StoreError: if the server cannot be reached or the tables cannot be created.
    """

    schema_version = SCHEMA_VERSION

    def __init__(
        self, conninfo: str, *, min_size: int = 1, max_size: int = 4, timeout: float = 30.0
    ) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:
            raise missing_dependency(exc.name or "psycopg", "postgres") from exc
        from agents.memory.stores import _redact

        super().__init__(_redact(conninfo))
        self._psycopg = psycopg
        self._pool = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True},
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
            self._setup()
        except BaseException as exc:
            self._pool.close()
            if isinstance(exc, (psycopg.Error, psycopg_pool.PoolTimeout)):
                msg = f"Cannot open PostgreSQL store {self.url}: {exc}; check that the server is running and the URL's user, password and database are right."
                raise StoreError(msg) from exc
            raise

    def _setup(self) -> None:
        with self._pool.connection() as con, con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            con.execute("CREATE TABLE IF NOT EXISTS kvmemory_schema (version integer NOT NULL)")
            row = con.execute("SELECT max(version) FROM kvmemory_schema").fetchone()
            version = row[0] if row and row[0] is not None else 0
            if version > SCHEMA_VERSION:
                msg = (
                    f"PostgreSQL store {self.url} has schema version {version}, newer than the "
                    f"{SCHEMA_VERSION} this kvmemory writes; upgrade kvmemory to open it."
                )
                raise SchemaVersionError(msg)
            if version < 1:
                for statement in _SCHEMA_V1:
                    con.execute(statement)
                con.execute("DELETE FROM kvmemory_schema")
                con.execute("INSERT INTO kvmemory_schema (version) VALUES (%s)", (SCHEMA_VERSION,))

    @contextlib.contextmanager
    def _connection(self, action: str, session_id: str | None) -> Iterator[Any]:
        try:
            with self._pool.connection() as con:
                yield con
        except StoreError:
            raise
        except self._psycopg.Error as exc:
            where = f" session {session_id!r} of" if session_id else ""
            msg = f"Cannot {action}{where} PostgreSQL store {self.url}: {exc}; nothing was changed."
            raise StoreError(msg) from exc

    def _write(
        self,
        session_id: str,
        step_key: str,
        *,
        add: Sequence[Row] = (),
        delete: Sequence[int] = (),
        update: Sequence[tuple[int, str | None, bytes]] = (),
        clear: bool = False,
    ) -> tuple[list[int], int]:
        deleted = 0
        added: list[int] = []
        with self._connection("write to", session_id) as con:
            many = clear or delete or update
            with con.transaction() if many else contextlib.nullcontext():
                if clear:
                    con.execute("DELETE FROM kvmemory_items WHERE session_id = %s", (session_id,))
                if delete:
                    cur = con.execute(
                        "DELETE FROM kvmemory_items WHERE session_id = %s AND seq = ANY(%s)",
                        (session_id, list(delete)),
                    )
                    deleted = cur.rowcount
                if update:
                    with con.cursor() as cur:
                        cur.executemany(
                            "UPDATE kvmemory_items SET step = %s, data = %s, doc = %s::jsonb WHERE session_id = %s AND seq = %s",
                            [(s, d, _doc(d), session_id, seq) for seq, s, d in update],
                        )
                if add:
                    added = self._append_rows(con, session_id, step_key, add)
        return added, deleted

    def _append_rows(
        self, con: Any, session_id: str, step_key: str, add: Sequence[Row]
    ) -> list[int]:
        params = {
            "sid": session_id,
            "key": step_key,
            "n": len(add),
            "now": time.time(),
            "steps": [row[0] for row in add],
            "created": [row[1] for row in add],
            "datas": [row[2] for row in add],
            "docs": [_doc(row[2]) for row in add],
        }
        seqs = [int(r[0]) for r in con.execute(_APPEND, params).fetchall()]
        if len(seqs) != len(add):
            # The WHERE on step_key filtered every row: the session files steps under another key.
            row = con.execute(
                "SELECT step_key FROM kvmemory_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            other = row[0] if row else None
            msg = (
                f"Session {session_id!r} of PostgreSQL store {self.url} files steps under "
                f"{other!r}, not {step_key!r}; open it with step_key={other!r}. Nothing was written."
            )
            # Raising inside the statement's transaction is too late in autocommit mode:
            # the seq counter moved, but no row was inserted, so nothing visible changed.
            raise StoreError(msg)
        return sorted(seqs)

    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        sql = "SELECT seq, data FROM kvmemory_items WHERE session_id = %s"
        params: list[Any] = [session_id]
        if after is not None:
            sql += " AND seq > %s"
            params.append(after)
        if steps is not None:
            sql += " AND step = ANY(%s)"
            params.append(list(steps))
        sql += " ORDER BY seq"
        with self._connection("read", session_id) as con:
            return [(int(seq), bytes(data)) for seq, data in con.execute(sql, params).fetchall()]

    def _fetch_keys(
        self, session_id: str, keys: Sequence[str], *, steps: Sequence[str] | None
    ) -> list[tuple[int, bytes]]:
        # Rows larger than a few kB (a screenshot, a long page) are cut down to
        # the asked keys from the JSONB copy, so the rest is never sent; smaller
        # rows come back whole, which benchmarks/bench_stores.py measured to be
        # faster than cutting them. Items without a JSONB copy (they hold a NUL
        # character) come back whole too.
        pick = (
            "COALESCE((SELECT jsonb_object_agg(key, value) FROM jsonb_each({source})"
            " WHERE key = ANY(%(keys)s)), '{{}}'::jsonb)"
        )
        plain = pick.format(source="doc")
        wrapped = pick.format(source="doc->'fields'")
        sql = (
            f"SELECT seq, CASE WHEN doc IS NULL OR octet_length(data) <= {_CUT_ROWS_OVER} THEN data"
            f" WHEN doc ? '$kv' THEN convert_to(jsonb_build_object('$kv', 'item', 'fields', {wrapped})::text, 'UTF8')"
            f" ELSE convert_to({plain}::text, 'UTF8') END"
            " FROM kvmemory_items WHERE session_id = %(session)s"
        )
        params: dict[str, Any] = {"keys": list(keys), "session": session_id}
        if steps is not None:
            sql += " AND step = ANY(%(steps)s)"
            params["steps"] = list(steps)
        sql += " ORDER BY seq"
        with self._connection("read", session_id) as con:
            return [(int(seq), bytes(data)) for seq, data in con.execute(sql, params).fetchall()]

    def _count(self, session_id: str) -> int:
        with self._connection("count", session_id) as con:
            row = con.execute(
                "SELECT count(*) FROM kvmemory_items WHERE session_id = %s", (session_id,)
            ).fetchone()
            return int(row[0])

    def _returning(
        self, action: str, session_id: str, sql: str, params: Sequence[Any]
    ) -> list[int]:
        with self._connection(action, session_id) as con:
            return sorted(int(r[0]) for r in con.execute(sql, params).fetchall())

    def _delete_steps(self, session_id: str, steps: Sequence[str]) -> list[int]:
        return self._returning(
            "delete steps from",
            session_id,
            "DELETE FROM kvmemory_items WHERE session_id = %s AND step = ANY(%s) RETURNING seq",
            (session_id, list(steps)),
        )

    def _clear(self, session_id: str) -> int:
        with self._connection("clear", session_id) as con:
            cur = con.execute("DELETE FROM kvmemory_items WHERE session_id = %s", (session_id,))
            return int(cur.rowcount)

    def _sessions(self) -> list[str]:
        with self._connection("list sessions of", None) as con:
            rows = con.execute(
                'SELECT session_id FROM kvmemory_sessions ORDER BY session_id COLLATE "C"'
            ).fetchall()
            return [str(r[0]) for r in rows]

    def _delete_session(self, session_id: str) -> bool:
        with self._connection("delete", session_id) as con:
            cur = con.execute("DELETE FROM kvmemory_sessions WHERE session_id = %s", (session_id,))
            return bool(cur.rowcount)

    def _keep_last(self, session_id: str, n: int) -> list[int]:
        return self._returning(
            "trim",
            session_id,
            "DELETE FROM kvmemory_items WHERE session_id = %s AND seq <= ("
            "SELECT seq FROM kvmemory_items WHERE session_id = %s ORDER BY seq DESC LIMIT 1 OFFSET %s"
            ") RETURNING seq",
            (session_id, session_id, n),
        )

    def _expire(self, session_id: str, cutoff: float) -> list[int]:
        return self._returning(
            "expire items of",
            session_id,
            "DELETE FROM kvmemory_items WHERE session_id = %s AND created < %s RETURNING seq",
            (session_id, cutoff),
        )

    def _close(self) -> None:
        self._pool.close()


_CUT_ROWS_OVER: Final = 4096
"""Rows of more bytes than this are cut down to the asked keys by the server."""


def _doc(data: bytes) -> str | None:
    # JSONB cannot hold the NUL character; such items are kept in ``data`` only.
    if b"\\u0000" in data:
        return None
    return data.decode("utf-8")
