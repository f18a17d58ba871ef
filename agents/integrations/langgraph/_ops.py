"""LangGraph's store operations answered by a kvmemory :class:`~agents.memory.stores.Store`.

One namespace is one session (see ``_namespaces``); one LangGraph item is one
keyed record of it (``Store.put_records`` and friends), whose fields are:

* ``key``: the item's key (the record's key, written by the store);
* ``value``: the item's value, a dict, kept as the codec keeps any field;
* ``created_at`` and ``updated_at``: Unix times in seconds; a put over an
  existing key keeps its ``created_at``;
* ``written_at``: when the item was last written: its last put, or the last
  TTL refresh on read (which writes the record again); a search without a
  query returns the most recently written items first;
* ``ttl`` and ``expires_at`` (only for an item put with a TTL): the TTL in
  minutes, and when the item expires;
* ``embed_0``, ``embed_1``, ... (only with an index configuration, for an
  item not put with ``index=False``): the texts LangGraph's index fields
  select from the value, one per field (at most 16: further texts join the
  16th), each embedded by kvmemory's vector search into a vector of its
  own; an item ranks by its best vector, as in LangGraph's stores.

A batch reads first (gets, searches, namespace listings, all against the
store as it was when the batch began), then writes: the last put or delete
of each key wins, and the writes of one namespace go to the store in one
transaction (``put_records``, then ``delete_records``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final, Literal

from langgraph.store.base import (
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from agents.integrations.langgraph._filters import VALUE, to_where
from agents.integrations.langgraph._namespaces import (
    matches,
    namespace_to_session,
    session_to_namespace,
)
from agents.memory import MemoryItem
from agents.memory.exceptions import InvalidQueryError
from agents.memory.search import EmbedParts, Filter, Tokenizer
from agents.memory.stores import Store

__all__ = ["EMBED", "EMBED_PARTS", "WRITTEN", "Embedder", "Operations", "QueryMode"]

QueryMode = Literal["keyword", "semantic", "hybrid"]
"""How ``search(query=...)`` ranks: BM25, cosine over the index's vectors, or kvmemory's blend."""

EMBED_PARTS = 16
"""The most vectors one item gets: the texts past the 16th are embedded with the 16th."""

EMBED: Final = tuple(f"embed_{n}" for n in range(EMBED_PARTS))
"""The item fields that hold the texts an index configuration selects, one vector each."""

WRITTEN: Final = "written_at"
"""The item field that holds when the item was last written (a put, or a TTL refresh on read)."""

_WHOLE_FIELD = EmbedParts(chunk_words=None)
_MOST_HITS = 2**62
_WORDS = Tokenizer()  # the store's keyword search cuts a query into words with this default


def _time(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=timezone.utc)


class Embedder:
    """A LangGraph embedding model as a kvmemory embedder: ``name``, ``dimension``, and texts to vectors.

    The ``name`` recorded with the vectors is the embeddings class, its
    ``model`` (or ``model_name``) when it has one, and ``dims``: vectors of
    another model are never compared with a query. Documents and queries are
    both embedded with ``embed_documents``, so the model needs a sync
    ``embed_documents`` (an async-only embedding function is not enough).

    Args:
        config: The index configuration (``dims`` and ``embed``).
    """

    def __init__(self, config: IndexConfig) -> None:
        embeddings = ensure_embeddings(config.get("embed"))
        self.embeddings = embeddings
        self.dimension = int(config["dims"])
        model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        kind = (
            type(embeddings).__name__ if model is None else f"{type(embeddings).__name__}:{model}"
        )
        self.name = f"langgraph:{kind}:{self.dimension}"

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Return one vector per text (``embed_documents``), as a float32 array."""
        import numpy as np

        return np.asarray(self.embeddings.embed_documents(list(texts)), dtype=np.float32)


class Operations:
    """LangGraph's operations over one kvmemory store.

    Args:
        store: The store that keeps the items.
        index: LangGraph's index configuration, or ``None`` for none.
        ttl: LangGraph's TTL configuration, or ``None``.
        query_mode: How a query ranks; default ``"semantic"`` with an index, else ``"keyword"``.
        clock: The time in Unix seconds (``time.time``).
    """

    def __init__(
        self,
        store: Store,
        index: IndexConfig | None,
        ttl: TTLConfig | None,
        query_mode: QueryMode | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.index = index
        self.ttl = ttl
        self.embedder = Embedder(index) if index else None
        fields = (index or {}).get("fields") or ["$"]
        self.fields = [(path, path if path == "$" else tokenize_path(path)) for path in fields]
        if query_mode not in (None, "keyword", "semantic", "hybrid"):
            msg = f"query_mode must be 'keyword', 'semantic' or 'hybrid', got {query_mode!r}."
            raise InvalidQueryError(msg)
        if query_mode in ("semantic", "hybrid") and self.embedder is None:
            msg = f"query_mode={query_mode!r} needs an index configuration (index={{'dims': ..., 'embed': ...}})."
            raise InvalidQueryError(msg)
        self.query_mode: QueryMode = query_mode or ("semantic" if self.embedder else "keyword")
        self.clock = clock

    # -- the batch ----------------------------------------------------------------------

    def run(self, ops: Iterable[Op]) -> list[Result]:
        """Answer ``ops`` in order: reads against the store as it was, then the writes.

        Raises:
            InvalidNamespaceError: for a namespace label LangGraph refuses.
            InvalidSessionIdError: for a namespace too long to be a session id.
            InvalidQueryError: for a filter that is not understood.
            StoreError: if the store cannot be read or written.
        """
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        now = self.clock()
        results: list[Result] = [None] * len(ops)
        gets: dict[tuple[str, ...], list[int]] = {}
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for index, op in enumerate(ops):
            if isinstance(op, GetOp):
                gets.setdefault(tuple(op.namespace), []).append(index)
            elif isinstance(op, SearchOp):
                results[index] = self.search(op, now)
            elif isinstance(op, ListNamespacesOp):
                results[index] = self.list_namespaces(op)
            elif isinstance(op, PutOp):
                namespace_to_session(
                    op.namespace
                )  # a namespace that cannot be stored fails the batch first
                writes.pop((tuple(op.namespace), op.key), None)
                writes[(tuple(op.namespace), op.key)] = op
            else:
                msg = f"Unknown LangGraph store operation {op!r}; expected GetOp, PutOp, SearchOp or ListNamespacesOp."
                raise InvalidQueryError(msg)
        for namespace, indexes in gets.items():
            self.get(namespace, [ops[i] for i in indexes], indexes, results, now)  # type: ignore[misc]
        by_namespace: dict[tuple[str, ...], list[PutOp]] = {}
        for (namespace, _), op in writes.items():
            by_namespace.setdefault(namespace, []).append(op)
        for namespace, puts in by_namespace.items():
            self.write(namespace, puts, now)
        return results

    # -- reads ---------------------------------------------------------------------------

    def get(
        self,
        namespace: tuple[str, ...],
        ops: list[GetOp],
        indexes: list[int],
        results: list[Result],
        now: float,
    ) -> None:
        """Answer the gets of one namespace with one read, refreshing the TTLs they ask to."""
        session_id = namespace_to_session(namespace)
        found = self.store.get_records(session_id, list({op.key for op in ops}))
        refresh: dict[str, MemoryItem] = {}
        for op, index in zip(ops, indexes, strict=True):
            item = found.get(op.key)
            if item is None or self.expired(item, now):
                continue
            if op.refresh_ttl and item.get_value("ttl") is not None:
                item = self.refreshed(item, now)
                refresh[op.key] = item
            results[index] = self.item(namespace, op.key, item)
        if refresh:
            self.store.put_records(session_id, refresh)

    def scope(self, prefix: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """Return ``(session id, namespace)`` of every namespace that starts with ``prefix``."""
        prefix = tuple(prefix)
        if prefix:
            start = namespace_to_session(prefix)
            ids = [s for s in self.store.sessions() if s == start or s.startswith(start + ".")]
        else:
            ids = self.store.sessions()
        found = []
        for session_id in ids:
            namespace = session_to_namespace(session_id)
            if namespace is not None:
                found.append((session_id, namespace))
        return found

    def search(self, op: SearchOp, now: float) -> list[SearchItem]:
        """Answer one search: ranked by the query when there is one, else newest update first."""
        if op.limit <= 0 or op.offset < 0:
            return []
        scope = self.scope(op.namespace_prefix)
        if not scope:
            return []
        where = to_where(op.filter)
        compiled = Filter.of(where)

        def keep(item: MemoryItem) -> bool:
            # Items the adapter did not put (appended to the session by other code) are not LangGraph items.
            return (
                item.get_value(WRITTEN) is not None
                and not self.expired(item, now)
                and (compiled is None or compiled(item))
            )

        if self.ranks(op.query):
            found = self.ranked(op, scope, keep)
        else:
            listed = self.listed(scope, keep, op.offset + op.limit, where=compiled)
            found = [(namespace, item, None) for namespace, item in listed[op.offset :]]
        if op.refresh_ttl:
            self.refresh(found, now)
        return [self.search_item(namespace, item, score) for namespace, item, score in found]

    def ranks(self, query: str | None) -> bool:
        """Return whether ``query`` ranks the search: it holds text, and words where only keywords rank.

        A blank query, or one with no word for BM25 (punctuation, emoji) in
        keyword mode, is no query: LangGraph's stores without an index
        ignore the query, so the items are listed rather than refused.
        """
        if not query or not query.strip():
            return False
        return self.query_mode != "keyword" or bool(_WORDS(query))

    def ranked(
        self,
        op: SearchOp,
        scope: list[tuple[str, tuple[str, ...]]],
        keep: Callable[[MemoryItem], bool],
    ) -> list[tuple[tuple[str, ...], MemoryItem, float | None]]:
        """Rank the items of ``scope`` by ``op.query``; with vectors, unembedded items follow, without a score."""
        namespaces = dict(scope)
        wanted = op.offset + op.limit
        vectors = self.query_mode != "keyword"
        hits = self.store.search_sessions(
            op.query or "",
            min(wanted, _MOST_HITS),  # a search takes k < 2**63; no store holds 2**62 items
            sessions=list(namespaces),
            keys=list(EMBED) if vectors else [VALUE],
            where=keep,
            mode=self.query_mode,
            embedder=self.embedder if vectors else None,
            parts=_WHOLE_FIELD if vectors else None,
        )
        found: list[tuple[tuple[str, ...], MemoryItem, float | None]] = [
            (namespaces[hit.session_id], hit.item, hit.score) for hit in hits
        ]
        if vectors and len(found) < wanted:
            # Items put with index=False have no vector: they follow, unscored, as in LangGraph's stores.
            def unembedded(item: MemoryItem) -> bool:
                return item.get_value(EMBED[0]) is None and keep(item)

            found.extend(
                (namespace, item, None)
                for namespace, item in self.listed(scope, unembedded, wanted - len(found))
            )
        return found[op.offset : wanted]

    def listed(
        self,
        scope: list[tuple[str, tuple[str, ...]]],
        keep: Callable[[MemoryItem], bool],
        wanted: int,
        *,
        where: Filter | None = None,
    ) -> list[tuple[tuple[str, ...], MemoryItem]]:
        """Return the ``wanted`` most recently written items of ``scope`` that pass ``keep``, newest first.

        Each session is read from its end (``Store.tail``), a larger window
        each time (as large as the share of items that passed says it takes;
        the whole session when none did), until it gives ``wanted`` items
        that pass or runs out: a put or a TTL refresh writes the item at the session's
        end, so the newest writes come first and a search reads about the
        items it returns, not the namespace. ``where`` (the part of ``keep``
        that is the search's filter) is handed to ``Store.tail``, which
        SQLite and PostgreSQL narrow in SQL, so the window holds only items
        that pass it.
        """
        found: list[tuple[tuple[str, ...], MemoryItem]] = []
        for session_id, namespace in scope:
            size = max(8 * wanted, 64) if where is None else wanted
            while True:
                window = self.store.tail(session_id, size, where=where)
                passed = [
                    record.item
                    for record in window
                    if record.item.get_value(WRITTEN) is not None and keep(record.item)
                ]
                if len(passed) >= wanted or len(window) < size:
                    break
                # Read as much more as the share that passed says it takes; none passed: all.
                size = (
                    max(2 * size, (wanted * size * 3) // (2 * len(passed)))
                    if passed
                    else max(2 * size, self.store.count(session_id) + 1)
                )
            found.extend((namespace, item) for item in passed[-wanted:])
        found.sort(key=lambda pair: -float(pair[1].get_value(WRITTEN)))
        return found[:wanted]

    def list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        """Answer one namespace listing: the namespaces holding items, matched, cut to ``max_depth``, sorted."""
        prefix: tuple[str, ...] = ()
        conditions = op.match_conditions or ()
        for condition in conditions:
            if condition.match_type == "prefix":
                path = tuple(condition.path)
                plain = path[: path.index("*")] if "*" in path else path
                prefix = plain if len(plain) > len(prefix) else prefix
        found = set()
        for session_id, namespace in self.scope(prefix):
            if not all(
                matches(namespace, c.path, suffix=c.match_type == "suffix") for c in conditions
            ):
                continue
            if self.store.count(session_id) == 0:
                continue
            found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        return sorted(found)[op.offset : op.offset + op.limit]

    # -- writes --------------------------------------------------------------------------

    def write(self, namespace: tuple[str, ...], ops: list[PutOp], now: float) -> None:
        """Apply the last put or delete of each key of one namespace."""
        session_id = namespace_to_session(namespace)
        puts = [op for op in ops if op.value is not None]
        deletes = [op.key for op in ops if op.value is None]
        if puts:
            # A put over an existing key keeps its created_at, read in the write's own transaction.
            items = {op.key: self.stored(op, now, now) for op in puts}
            self.store.put_records(session_id, items, keep=("created_at",))
        if deletes:
            self.store.delete_records(session_id, deletes)

    def stored(self, op: PutOp, created: float, now: float) -> dict[str, Any]:
        """Return the fields of the item a put stores."""
        value = dict(op.value or {})
        fields: dict[str, Any] = {
            VALUE: value,
            "created_at": created,
            "updated_at": now,
            WRITTEN: now,
        }
        if op.ttl is not None:
            fields["ttl"] = float(op.ttl)
            fields["expires_at"] = now + float(op.ttl) * 60.0
        if self.embedder is not None and op.index is not False:
            paths = (
                self.fields
                if op.index is None
                else [(path, tokenize_path(path)) for path in op.index]
            )
            texts = [text for _, path in paths for text in get_text_at_path(value, path)]
            if len(texts) > EMBED_PARTS:
                texts[EMBED_PARTS - 1 :] = ["\n".join(texts[EMBED_PARTS - 1 :])]
            fields.update(zip(EMBED, texts, strict=False))  # fewer texts than fields
        return fields

    # -- TTL ------------------------------------------------------------------------------

    @staticmethod
    def expired(item: MemoryItem, now: float) -> bool:
        """Return whether an item's TTL has run out."""
        expires = item.get_value("expires_at")
        return expires is not None and float(expires) <= now

    @staticmethod
    def refreshed(item: MemoryItem, now: float) -> MemoryItem:
        """Return a copy of an item whose TTL starts again now."""
        copy = item.copy()
        copy.set_value("expires_at", now + float(item.get_value("ttl")) * 60.0)
        copy.set_value(WRITTEN, now)
        return copy

    def refresh(
        self, found: list[tuple[tuple[str, ...], MemoryItem, float | None]], now: float
    ) -> None:
        """Start again the TTL of each found item that has one, one transaction per namespace."""
        by_session: dict[str, dict[str, MemoryItem]] = {}
        for namespace, item, _ in found:
            if item.get_value("ttl") is not None:
                key = str(item.get_value("key"))
                by_session.setdefault(namespace_to_session(namespace), {})[key] = self.refreshed(
                    item, now
                )
        for session_id, items in by_session.items():
            self.store.put_records(session_id, items)

    def sweep(self, now: float) -> int:
        """Delete every expired item of the store; return how many went."""
        gone = 0
        for session_id, _ in self.scope(()):
            keys = [
                str(record.item.get_value("key"))
                for record in self.store.read_records(session_id)
                if self.expired(record.item, now)
            ]
            if keys:
                gone += self.store.delete_records(session_id, keys)
        return gone

    # -- LangGraph's items -----------------------------------------------------------------

    @staticmethod
    def item(namespace: tuple[str, ...], key: str, item: MemoryItem) -> Item:
        """Return the LangGraph item of a stored one."""
        return Item(
            value=item.get_value(VALUE),
            key=key,
            namespace=namespace,
            created_at=_time(item.get_value("created_at", 0.0)),
            updated_at=_time(item.get_value("updated_at", 0.0)),
        )

    @staticmethod
    def search_item(
        namespace: tuple[str, ...], item: MemoryItem, score: float | None
    ) -> SearchItem:
        """Return the LangGraph search result of a stored item."""
        return SearchItem(
            namespace=namespace,
            key=str(item.get_value("key")),
            value=item.get_value(VALUE),
            created_at=_time(item.get_value("created_at", 0.0)),
            updated_at=_time(item.get_value("updated_at", 0.0)),
            score=None if score is None else float(score),
        )


def check_mapping(value: Any) -> Mapping[str, Any]:
    """Return ``value`` if it is a mapping (a put's value), else raise."""
    if not isinstance(value, Mapping):
        msg = f"A LangGraph item's value is a dict, got {type(value).__name__} {value!r}."
        raise InvalidQueryError(msg)
    return value
