"""Deprecated: :class:`BaseStore`, an alias of :class:`~agents.memory.stores.Store` kept for one release.

Stores used to subclass ``BaseStore`` and implement its underscore hooks
(``_fetch``, ``_insert_rows``, ...). A store is now a
:class:`~agents.memory.stores.Store` over a :class:`~agents.memory.stores.Backend`:
the same operations under public names (``read_rows``, ``insert_rows``, ...),
handed to ``Store(backend)``. ``isinstance(store, BaseStore)`` stays true of
every store; subclassing or instantiating ``BaseStore`` warns.

This module also re-exports the names it used to hold, from the modules
that hold them now.
"""

from __future__ import annotations

import warnings
from typing import Any

from agents.memory.exceptions import StoreArgumentError
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.batch import WriteBatch
from agents.memory.stores._core.checks import (
    SESSION_ID_MAX_LENGTH,
    check_session_id,
    check_store_path,
)
from agents.memory.stores._core.encoding import (
    IndexEntry,
    Row,
    RowUpdate,
    SessionRow,
    StoredRecord,
    decode_pairs,
    decode_rows,
    encode_metadata,
    encode_rows,
    step_text,
)
from agents.memory.stores._core.migrations import check_schema_version, migrate
from agents.memory.stores._core.terms import Terms, item_terms
from agents.memory.stores._core.values import (
    SessionHit,
    SessionInfo,
    SessionSummary,
    StoreHit,
    VectorModel,
)
from agents.memory.stores._store import Store

__all__ = [
    "SESSION_ID_MAX_LENGTH",
    "BaseStore",
    "IndexEntry",
    "Row",
    "RowUpdate",
    "SessionHit",
    "SessionInfo",
    "SessionRow",
    "SessionSummary",
    "StoreHit",
    "StoredRecord",
    "Terms",
    "VectorModel",
    "WriteBatch",
    "check_schema_version",
    "check_session_id",
    "check_store_path",
    "decode_pairs",
    "decode_rows",
    "encode_metadata",
    "encode_rows",
    "item_terms",
    "migrate",
    "step_text",
]

_MIGRATE: str = (
    "write a Backend (the row operations under public names: read_rows, insert_rows, ...) "
    "and open Store(backend); see 'Writing a backend' in docs/stores.md"
)


class _Alias(type):
    """Makes every :class:`Store` an instance of :class:`BaseStore`, as every store was one."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if cls is BaseStore:
            return isinstance(instance, Store)
        return super().__instancecheck__(instance)

    def __subclasscheck__(cls, subclass: type) -> bool:
        if cls is BaseStore:
            return issubclass(subclass, Store)
        return super().__subclasscheck__(subclass)


class BaseStore(Store, metaclass=_Alias):
    """Deprecated alias of :class:`~agents.memory.stores.Store`, kept for one release.

    ``isinstance(x, BaseStore)`` is ``isinstance(x, Store)``. Subclassing it
    or creating one raises a :class:`DeprecationWarning`; its underscore
    hooks are gone: move them to a :class:`~agents.memory.stores.Backend`.

    Raises:
        StoreArgumentError: if given a URL instead of a backend (the old
            ``BaseStore(url, read_only=...)`` of a subclass with hooks).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        msg = f"{cls.__name__} subclasses BaseStore, which is deprecated: {_MIGRATE}."
        warnings.warn(msg, DeprecationWarning, stacklevel=3)
        super().__init_subclass__(**kwargs)

    def __init__(self, backend: Backend, *, read_only: bool = False) -> None:
        msg = f"BaseStore is deprecated; use Store(backend) instead: {_MIGRATE}."
        warnings.warn(msg, DeprecationWarning, stacklevel=2)
        if not isinstance(backend, Backend):
            msg = (
                f"BaseStore() takes a Backend, got {backend!r} ({type(backend).__name__}): a store "
                f"no longer implements underscore hooks (_fetch, _insert_rows, ...); {_MIGRATE}."
            )
            raise StoreArgumentError(msg)
        super().__init__(backend, read_only=read_only)
