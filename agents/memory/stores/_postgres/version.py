"""The keyword version of a PostgreSQL session: its row in ``kvmemory_sessions``, which every write of the session's rows writes.

Every insert and delete of a session's rows updates its row (the count
triggers), and from schema version 10 every update too, even one that
keeps the number of terms (``count_every_update``): the row's ``xmin``
changes with each, and never comes back within the row's life. With the
next seq and the counts, it is the value ``Backend.keyword_version``
asks for (see docs/search.md, "A memory read asks its store's ranking").
"""

from __future__ import annotations

from typing import Any, Final

from agents.memory.stores._postgres.pool import PostgresConnections

__all__ = ["SessionVersions"]

_ROWS_VERSION: Final = (
    "SELECT xmin::text, next_seq, n_items, n_terms, deleted FROM kvmemory_sessions"
    " WHERE session_id = %s"
)


class SessionVersions:
    """``PostgresBackend.keyword_version``, apart (a base of the backend, which holds ``_connections``)."""

    _connections: PostgresConnections

    def query_rows(self, sql: str, params: Any = (), *, indexed: bool = False) -> list[Any]:
        raise NotImplementedError  # the backend's

    def keyword_version(self, session_id: str) -> tuple[object, ...] | None:
        """Return the session's row as of now: its ``xmin``, next seq and counts; ``("none",)`` for a session without one.

        ``None`` for tables older than version 10 opened read-only (an
        update that kept its terms' number wrote no session row) and
        without the keyword index.
        """
        tables = self._connections.tables
        if not (tables.rows_version and tables.keyword_index):
            return None
        if tables.no_tables:
            return ("none",)
        rows = self.query_rows(_ROWS_VERSION, (session_id,))
        return tuple(rows[0]) if rows else ("none",)
