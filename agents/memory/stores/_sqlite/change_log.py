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
    written again by other writes.
    """
    start, end = _change_of(since, nonced=nonced), _change_of(now, nonced=nonced)
    if start is None or end is None:
        return None
    if since == now:
        return set()
    after, nonce = start
    if after >= end[0]:
        return None  # (a lower version: another file)
    if nonced and after:
        rows = query_rows(_NONCE_OF, (after, session_id))
        if nonce is None or not rows or rows[0][0] != nonce:
            return None  # the row is gone (pruned) or another write's: the file was put back
    changed: set[int] = set()
    for (seq,) in query_rows(_BETWEEN, (session_id, after, end[0])):
        if seq is None:
            return None  # the log was pruned past ``since``
        changed.add(int(seq))
    return changed


def _change_of(version: Hashable, *, nonced: bool) -> tuple[int, int | None] | None:
    """Return the change-log id and nonce a version names (id 0: no change logged), or ``None`` for a value of another layout."""
    if type(version) is int:
        return (version, None) if version == 0 or not nonced else None
    if (
        nonced
        and type(version) is tuple
        and len(version) == 2
        and type(version[0]) is int
        and (version[1] is None or type(version[1]) is int)
    ):
        return version[0], version[1]
    return None
