"""A session's vectors version read from the SQLite vector change log, and the seqs logged between two versions.

The log (``kvmemory_vector_changes``, schema version 8) is written by
trigger at every vector row written; since schema version 10 each row holds
a random nonce too (see :mod:`~agents.memory.stores._sqlite.schema`). A
version is ``(id, nonce)`` of the session's newest row (one covering index
lookup), ``0`` for a session no write was logged for; on a file of version
8 or 9 opened read-only (no nonces), the id alone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

from agents.memory.stores._core.change_log import logged_changes

__all__ = ["changes_between", "newest_change"]

QueryRows = Callable[[str, Sequence[object]], list[Any]]

_NEWEST: Final = (
    "SELECT id, nonce FROM kvmemory_vector_changes WHERE session_id = ? ORDER BY id DESC LIMIT 1"
)
_NEWEST_ID: Final = (  # a file of version 8 or 9 opened read-only: no nonces
    "SELECT id FROM kvmemory_vector_changes WHERE session_id = ? ORDER BY id DESC LIMIT 1"
)
_NONCE_OF: Final = "SELECT nonce FROM kvmemory_vector_changes WHERE id = ? AND session_id = ?"
_BETWEEN: Final = (
    "SELECT DISTINCT seq FROM kvmemory_vector_changes WHERE session_id = ? AND id > ? AND id <= ?"
)


def newest_change(
    query_rows: QueryRows, session_id: str, *, nonced: bool
) -> int | tuple[int, int | None]:
    """Return the session's vectors version: ``(id, nonce)`` of its newest change row (the id alone where not ``nonced``), 0 where it has none."""
    if not nonced:
        rows = query_rows(_NEWEST_ID, (session_id,))
        return int(rows[0][0]) if rows else 0
    rows = query_rows(_NEWEST, (session_id,))
    if not rows:
        return 0
    change, nonce = rows[0]
    return (int(change), None if nonce is None else int(nonce))


def changes_between(
    query_rows: QueryRows, session_id: str, since: Hashable, now: Hashable, *, nonced: bool
) -> set[int] | None:
    """Return the seqs logged for the session after version ``since`` up to ``now``; ``None`` where the log cannot tell.

    ``None`` for a version of another layout, where the log was pruned past
    ``since``, and (``nonced``) where the row ``since`` names no longer
    holds its nonce: the file was put back to an older copy and its ids
    written again by other writes (see :func:`~agents.memory.stores._core.change_log.logged_changes`).
    """

    def nonce_held(after: int, nonce: int | None) -> bool:
        if not nonced:
            return True  # (ids alone: a file of version 8 or 9 opened read-only)
        if nonce is None:
            return False
        rows = query_rows(_NONCE_OF, (after, session_id))
        return bool(rows) and rows[0][0] == nonce

    def logged_seqs(after: int, end: int) -> list[int | None]:
        return [seq for (seq,) in query_rows(_BETWEEN, (session_id, after, end))]

    return logged_changes(
        since,
        now,
        nonced=nonced,
        nonce_held=nonce_held,
        logged_seqs=logged_seqs,
        nonce_may_be_none=True,  # a newest row from before the nonce
    )
