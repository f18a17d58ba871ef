"""Everything a backend of your own needs, in one public module.

A backend is a subclass of :class:`Backend` handed to :class:`Store`
(see "Writing a backend" in docs/stores.md). Its operations' signatures use
the names below; import them from here (or from :mod:`agents.memory.stores`)
to type a backend under ``mypy --strict``::

    from agents.memory.stores.backend import Backend, Row, SessionRow, Terms, Transaction

    class MyBackend(Backend):
        def insert_rows(
            self, tx: Transaction, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
        ) -> list[int]: ...

:func:`register_backend` gives it a URL scheme, and the contract suites
(:mod:`agents.memory.stores.testing`) check it.
"""

from __future__ import annotations

from agents.memory._filter import COMPARISONS, AllOf, AnyOf, Condition, FilterNode, Predicate
from agents.memory.stores._core.backend import Backend, Transaction
from agents.memory.stores._core.encoding import IndexEntry, KeyedRow, Row, RowUpdate, SessionRow
from agents.memory.stores._core.terms import Terms
from agents.memory.stores._open import ENTRY_POINT_GROUP, BackendOpener, register_backend
from agents.memory.stores._store import Store

__all__ = [
    "COMPARISONS",
    "ENTRY_POINT_GROUP",
    "AllOf",
    "AnyOf",
    "Backend",
    "BackendOpener",
    "Condition",
    "FilterNode",
    "IndexEntry",
    "KeyedRow",
    "Predicate",
    "Row",
    "RowUpdate",
    "SessionRow",
    "Store",
    "Terms",
    "Transaction",
    "register_backend",
]
