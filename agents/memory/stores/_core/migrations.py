"""Schema versions: how every store brings its layout up to date, one ordered step at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from agents.memory.exceptions import CorruptStoreError, SchemaVersionError

__all__ = ["check_schema_version", "migrate"]

T = TypeVar("T")


def migrate(migrations: Sequence[Callable[[T], None]], found: int, target: T, *, store: str) -> int:
    """Bring a store from schema version ``found`` to ``len(migrations)`` and return the new version.

    Every store keeps its migrations the same way: an ordered list of steps in
    which the step at position ``i`` turns a version-``i`` layout into version
    ``i + 1`` (so position 0 creates the first layout in an empty store), and
    the version it reached recorded in the store itself. The caller runs this
    inside one transaction and records the returned version in it.

    Args:
        migrations: The store's steps, oldest first.
        found: The version recorded in the store (0 for an empty one).
        target: What each step works on (a connection, a directory).
        store: Names the store in error messages.

    Raises:
        SchemaVersionError: if a newer kvmemory wrote the store.
    """
    check_schema_version(found, len(migrations), store=store)
    for step in migrations[found:]:
        step(target)
    return len(migrations)


def check_schema_version(found: object, newest: int, *, store: str) -> int:
    """Return ``found`` if this kvmemory can open a store of that schema version, else raise.

    Raises:
        SchemaVersionError: if the version is not a number, or newer than ``newest``.
    """
    if type(found) is not int or found < 0:
        msg = f"{store} records the schema version {found!r}, which is not a version number; it was not written by kvmemory."
        raise CorruptStoreError(msg)
    if found > newest:
        msg = (
            f"{store} has schema version {found}, newer than the {newest} this kvmemory "
            "writes; upgrade kvmemory to open it."
        )
        raise SchemaVersionError(msg)
    return found
