"""LangGraph's long-term memory store, kept by kvmemory (extra ``kvmemory[langgraph]``).

:class:`KVMemoryStore` is a ``langgraph.store.base.BaseStore``: pass it where
a graph takes a store, ``builder.compile(store=KVMemoryStore("sqlite:///agent.db"))``,
and the graph's nodes read and write memories through ``get_store()`` (or
``runtime.store``) as with any LangGraph store. :class:`AsyncKVMemoryStore`
is its asyncio twin (``async with``).

Each namespace is one kvmemory session and each item one keyed record of it
(fields ``key``, ``value``, ``created_at``, ``updated_at``, and ``ttl``,
``expires_at``, ``embed`` when they apply). The session id of a namespace is
its labels joined by ``.``, each label with every character other than an
ASCII letter, a digit or a ``-`` (not first) written ``_<hex code point>_``:
``("users", "ann")`` is ``users.ann``, ``("a.b", "c/d")`` is
``a_2e_b.c_2f_d`` (:func:`namespace_to_session`,
:func:`session_to_namespace`; the spelling is reversible and a namespace
prefix is a session-id prefix). LangGraph's own methods refuse labels with a
``.`` (as every LangGraph store does); the mapping itself takes any label.

Importing this package does not import LangGraph; the store classes do, and
raise ``MissingDependencyError`` naming the extra when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.integrations.langgraph._namespaces import namespace_to_session, session_to_namespace
from agents.memory.exceptions import missing_dependency

if TYPE_CHECKING:
    from agents.integrations.langgraph._store import (
        AsyncKVMemoryStore,
        KVMemoryStore,
        LoopThreadError,
    )

__all__ = [
    "AsyncKVMemoryStore",
    "KVMemoryStore",
    "LoopThreadError",
    "namespace_to_session",
    "session_to_namespace",
]


def __getattr__(name: str) -> Any:
    """Import the store classes (and LangGraph) on first use."""
    if name in ("KVMemoryStore", "AsyncKVMemoryStore", "LoopThreadError"):
        try:
            import langgraph.store.base  # noqa: F401  # only to name the extra when it is missing
        except ImportError as exc:
            raise missing_dependency("langgraph", "langgraph") from exc
        from agents.integrations.langgraph import _store

        return getattr(_store, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)  # attribute protocol
