"""What the tests of coded part vectors share: a session over the coded budget, the handles that code, save and load it, and Memory.search as the reference.

A session of :func:`steps` embedded with :data:`EMBEDDER` has more distinct
part vectors than its handle keeps as float32 once :func:`coded_budget` set
the budget (:func:`budget_of`), and fewer than it keeps coded (int8): its
first query reads the rows page by page, the second codes them, the third
answers from the coded table (:func:`coded_up`). A store that names a coded
file saves it (:func:`saved`, or a writer's close: :func:`write_and_close`)
and a fresh handle loads it (:func:`first_loads`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.memory import Memory, MemoryItem
from agents.memory._vectors import fields_text
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import Store, open_store
from agents.memory.stores._search import coded_file
from agents.memory.stores._search.coded_saves import SAVE_THREAD
from agents.memory.stores._search.compact import CompactVectors

EMBEDDER = HashingEmbedder(64)
WORDS = ["open", "close", "report", "chart", "window", "saved", "invoice", "March", "pay", "OK"]
QUERIES = ["pay the invoice for March", "close the report window", "chart saved OK"]
FIELDS = fields_text(None, EmbedParts())
"""The fields key of the part vectors the sessions are embedded with (every field, default parts)."""


def steps(n: int, seed: int = 0) -> list[MemoryItem]:
    """Return ``n`` steps of a few fields drawn from a small vocabulary (parts repeat; some are cut in windows)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        fields = {
            "thought": " ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))),
            "status": str(rng.choice(["CONTINUE", "FINISH"])),
        }
        if i % 3:
            fields["observation"] = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 20))))
        out.append(MemoryItem(step=i, team="red" if i % 4 == 0 else "blue", **fields))
    return out


def more_steps(n: int, seed: int) -> list[MemoryItem]:
    """Return ``n`` steps numbered from 1,000 (apart from those of ``steps``), enough for a close to code again where ``n`` is 64 or more."""
    return [
        MemoryItem(**{**item.to_dict(), "step": 1000 + i}) for i, item in enumerate(steps(n, seed))
    ]


def budget_of(items: list[MemoryItem]) -> int:
    """Return the budget ``coded_budget`` sets for ``items``: below their part vectors as float32, above them coded."""
    texts = {text for item in items for text in EmbedParts().texts(item.to_dict(), None)}
    return 2 * EMBEDDER.dimension * len(texts)


def coded_budget(store: Store, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch) -> None:
    """Set the handle's budget below the session's distinct part vectors as float32, above them coded."""
    monkeypatch.setattr(store._vectors._cache, "_budget", budget_of(items))


@contextmanager
def coded_handle(
    url: str, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Store]:
    """Open the store at ``url`` with the coded budget of ``items`` (:func:`coded_budget`), closed on exit."""
    with open_store(url) as store:
        coded_budget(store, items, monkeypatch)
        yield store


def kept_tables(store: Store) -> list[Any]:
    """Return the tables the handle keeps."""
    return [entry[1] for entry in store._vectors._cache._tables.values() if entry[1] is not None]


def kept_types(store: Store) -> list[type]:
    """Return the type of each table the handle keeps (``[CompactVectors]``: the session kept coded)."""
    return [type(table) for table in kept_tables(store)]


def expected(items: list[MemoryItem], query: str, k: int, mode: str, where: Any) -> list[Any]:
    """Return ``(step, score)`` of Memory.search over the same items: the reference."""
    hits = Memory(items).search(query, k, mode=mode, embedder=EMBEDDER, where=where)
    return [(hit.item["step"], hit.score) for hit in hits]


def found(store: Store, query: str, k: int, mode: str, where: Any = None) -> list[Any]:
    """Return ``(step, score)`` of the store's search of session ``s``."""
    hits = store.search("s", query, k, mode=mode, embedder=EMBEDDER, where=where)
    return [(hit.item["step"], hit.score) for hit in hits]


def coded_up(
    store: Store, query: str, k: int, mode: str = "semantic", where: Any = None
) -> list[list[Any]]:
    """Return :func:`found` of three queries: read page by page, then coded, then from the coded table."""
    return [found(store, query, k, mode, where) for _ in range(3)]


def written(url: str, items: list[MemoryItem]) -> list[int]:
    """Store ``items`` in session ``s`` with their part vectors; return their seqs."""
    with open_store(url) as store:
        seqs = store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
    return seqs


def coded_path(store: Store, sid: str = "s") -> str:
    """Return where the store keeps the session's coded file."""
    path = store.backend.vector_snapshot_path(sid, FIELDS)
    assert path is not None
    return path


def file_of(store: Store) -> coded_file.CodedFile:
    """Return session ``s``'s coded file at the store's vectors version now."""
    version = store.backend.vectors_version("s", FIELDS)
    return coded_file.CodedFile(store.backend, "s", FIELDS, version, EMBEDDER.name, 64)


def saved(url: str, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch) -> str:
    """Code the session ``s`` on one handle (three queries) and return its file's path."""
    with coded_handle(url, items, monkeypatch) as store:
        coded_up(store, QUERIES[0], 5)
        return coded_path(store)


def coded_session(url: str, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch) -> str:
    """Store ``items`` in session ``s`` with their part vectors (:func:`written`), code it and save its file (:func:`saved`); return the file's path."""
    written(url, items)
    return saved(url, items, monkeypatch)


def first_loads(url: str, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch) -> bool:
    """Return whether a fresh handle's first query took a coded table (from the file), checking its hits against Memory.search."""
    with coded_handle(url, items, monkeypatch) as store:
        assert found(store, QUERIES[1], 7, "hybrid") == expected(
            items, QUERIES[1], 7, "hybrid", None
        )
        return kept_types(store) == [CompactVectors]


def closed_saves() -> None:
    """Wait for the saves closing handles started in this process."""
    for thread in threading.enumerate():
        if thread.name == SAVE_THREAD:
            thread.join()


def write_and_close(url: str, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch) -> None:
    """Append ``items`` to session ``s`` and embed them on a handle with the coded budget, never query, close, and wait for its saves."""
    with coded_handle(url, items, monkeypatch) as store:
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
    closed_saves()


def harm_file(path: str, harm: str) -> None:
    """Damage the file at ``path``: a byte of the middle flipped (``"flip"``), its last 8 bytes cut (``"cut"``), emptied (``"empty"``) or its magic changed (``"magic"``)."""
    data = bytearray(Path(path).read_bytes())
    if harm == "flip":
        data[len(data) // 2] ^= 1
    elif harm == "cut":
        data = data[: len(data) - 8]
    elif harm == "empty":
        data = bytearray()
    else:
        data[0] ^= 1
    Path(path).write_bytes(bytes(data))


Action = tuple[str, Any]


def acted(db: str, actions: list[Action]) -> None:
    """Apply ``actions`` to session ``s`` of the file ``db`` on a handle of their own (a re-embed: the vector row deleted in SQL, then embedded again)."""
    with open_store(f"sqlite://{db}") as store:
        for action, what in actions:
            if action == "append":
                store.append("s", [MemoryItem(**fields) for fields in what])
            elif action == "delete":
                assert store.delete_steps("s", [what]) == 1
            else:
                with sqlite3.connect(db) as con:
                    con.execute("DELETE FROM kvmemory_vectors WHERE seq = ?", (what,))
                con.close()
            store.index_embeddings("s", EMBEDDER)
