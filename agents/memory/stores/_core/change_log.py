"""The seqs a vector change log names between two versions, read the same way by every backend that keeps one.

SQLite and PostgreSQL log each write to a session's vector rows by trigger,
one row per seq under a rising number (SQLite's row id, PostgreSQL's
session version) and, from their nonce layouts on, a random nonce the
write drew. A session's vectors version is then ``(number, nonce)`` of its
newest write, ``0`` before any; on older tables opened read-only the
number alone. :func:`logged_changes` answers :meth:`Backend.vector_changes`
from such a log; each backend brings the two lookups its SQL makes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["logged_changes", "version_parts"]


def version_parts(
    version: object, *, nonced: bool, nonce_may_be_none: bool = False
) -> tuple[int, int | None] | None:
    """Return the number and nonce a logged vectors version names, or ``None`` for a value of another layout.

    Args:
        version: A version the backend gave: ``0`` (no write logged yet),
            ``(number, nonce)`` where ``nonced``, else the number alone.
        nonced: The log holds a nonce beside each number.
        nonce_may_be_none: A ``(number, None)`` pair is a version too (a
            newest row written before the nonce layout).

    Returns:
        ``(number, nonce)``, the nonce ``None`` for ``0`` and where not
        ``nonced``; ``None`` also for a number below 0 or either past 64
        bits (no log gives one; a coded file's tag read unchecked may).
    """
    if type(version) is int:
        return (version, None) if version == 0 or (not nonced and _number(version)) else None
    if (
        nonced
        and type(version) is tuple
        and len(version) == 2
        and _number(version[0])
        and (_nonce(version[1]) or (nonce_may_be_none and version[1] is None))
    ):
        return version[0], version[1]
    return None


def _number(value: object) -> bool:
    """Return whether ``value`` may be a log's number: an int of a 64-bit column (SQLite's row id, PostgreSQL's ``bigint``), never below 0 (a bool is none; one past 64 bits would raise as it is bound)."""
    return type(value) is int and 0 <= value < 2**63


def _nonce(value: object) -> bool:
    """Return whether ``value`` may be a nonce: a signed 64-bit int (a bool is none)."""
    return type(value) is int and -(2**63) <= value < 2**63


def logged_changes(
    since: object,
    now: object,
    *,
    nonced: bool,
    nonce_held: Callable[[int, int | None], bool],
    logged_seqs: Callable[[int, int], Iterable[int | None]],
    nonce_may_be_none: bool = False,
) -> set[int] | None:
    """Return the seqs a change log names between versions ``since`` and ``now``; ``None`` where it cannot tell.

    ``None`` for a version of another layout (:func:`version_parts`), for
    versions out of order or one number with two nonces (another file's or
    database's), where the log's rows at ``since``'s number no longer hold
    its nonce (pruned, or the store was put back to an older copy and that
    number given again), and where the log was pruned past ``since`` (a
    ``None`` seq marks the cut).

    Args:
        since: The version a cache was kept at.
        now: The version now.
        nonced: The log holds a nonce beside each number.
        nonce_held: Tells whether the log's rows at a number (never 0)
            still hold a nonce.
        logged_seqs: The seqs logged above one number up to another, ``None``
            for a pruning mark.
        nonce_may_be_none: Passed on to :func:`version_parts`.
    """
    first = version_parts(since, nonced=nonced, nonce_may_be_none=nonce_may_be_none)
    last = version_parts(now, nonced=nonced, nonce_may_be_none=nonce_may_be_none)
    if first is None or last is None:
        return None
    if since == now:
        return set()
    (start, nonce), end = first, last[0]
    if start >= end:
        return None  # a lower number, or one number with two nonces: another store's
    if start and not nonce_held(start, nonce):
        return None
    changed: set[int] = set()
    for seq in logged_seqs(start, end):
        if seq is None:
            return None
        changed.add(int(seq))
    return changed
