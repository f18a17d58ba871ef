"""A session's coded part vectors saved beside an SQLite file or a JSONL store's logs: a fresh handle's first query loads them where current, with Memory.search's hits and floats; a stale file is caught up; a damaged, cut, foreign or forged file is ignored."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from coded_sessions import (
    EMBEDDER,
    FIELDS,
    QUERIES,
    Action,
    acted,
    coded_budget,
    coded_handle,
    coded_path,
    coded_session,
    coded_up,
    expected,
    file_of,
    first_loads,
    found,
    harm_file,
    kept_tables,
    kept_types,
    saved,
    steps,
    written,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory._vectors import fields_text
from agents.memory.search import EmbedParts
from agents.memory.stores import open_store
from agents.memory.stores._search import coded_file
from agents.memory.stores._search.compact import CompactVectors

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = pytest.mark.usefixtures("int8_kernel")

STORES = ["sqlite", "jsonl"]
"""The stores that keep a coded file beside their own files (PostgreSQL's: ``test_stores_postgres_coded_folder``)."""


def store_url(folder: Path | str, kind: str) -> str:
    """Return the URL of a store of ``kind`` in ``folder``: an SQLite file, or a JSONL directory."""
    if kind == "sqlite":
        return f"sqlite://{Path(folder) / 'store.db'}"
    return f"jsonl://{Path(folder) / 'store'}"


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(2, 120),
    seed=st.integers(0, 1000),
    k=st.integers(1, 40),
    query=st.sampled_from(QUERIES),
    mode=st.sampled_from(["semantic", "hybrid"]),
    where=st.sampled_from([None, {"team": "red"}]),
)
@pytest.mark.parametrize("kind", STORES)
def test_a_fresh_handle_loads_the_coded_file_and_ranks_as_memory_search(
    kind: str,
    n: int,
    seed: int,
    k: int,
    query: str,
    mode: str,
    where: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first query of a fresh handle answers from the saved file (a coded table kept at once), with Memory.search's hits and floats."""
    items = steps(n, seed)
    with tempfile.TemporaryDirectory() as folder:
        url = store_url(folder, kind)
        assert os.path.exists(coded_session(url, items, monkeypatch))
        with coded_handle(url, items, monkeypatch) as store:
            want = expected(items, query, k, mode, where)
            assert found(store, query, k, mode, where) == want
            assert kept_types(store) == [CompactVectors]
            assert found(store, query, k, mode, where) == want


def saved_at(url: str) -> Any:
    """Return the version the session's file was saved at (its head)."""
    with open_store(url) as store:
        return file_of(store).saved_version()


def rows_read(
    url: str, folder: Path, items: list[MemoryItem], monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    """Return each query's ranking of every item by a handle without the file (``folder`` put aside meanwhile): the stored rows, read."""
    os.rename(folder, f"{folder}.aside")
    try:
        with coded_handle(f"{url}?vector_snapshot=off", items, monkeypatch) as store:
            return [found(store, query, len(items), "semantic") for query in QUERIES]
    finally:
        os.rename(f"{folder}.aside", folder)


@pytest.mark.parametrize("kind", STORES)
def test_the_file_is_caught_up_once_another_handle_writes(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write since the save (another handle) makes the file stale: loaded and caught up with the step written (Memory.search's hits, the new step among them), not saved again."""
    url = store_url(tmp_path, kind)
    items = steps(60)
    coded_session(url, items, monkeypatch)
    before = saved_at(url)
    with open_store(url) as other:
        added = MemoryItem(step=500, thought="pay the invoice for March", team="red")
        other.append("s", [added])
        other.index_embeddings("s", EMBEDDER)
    items = [*items, added]
    assert first_loads(url, items, monkeypatch)
    with coded_handle(url, items, monkeypatch) as store:
        assert found(store, QUERIES[0], 1, "semantic") == expected(
            items, QUERIES[0], 1, "semantic", None
        )
        assert found(store, QUERIES[0], 1, "semantic")[0][0] == 500
    assert saved_at(url) == before


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("at", [40, 3, 0])
def test_a_step_deleted_by_another_process_is_caught_up_unless_among_the_first_rows(
    at: int, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step deleted by another process since the save: the stale file is caught up (the step gone from the hits); deleted among the first 16 vector rows (the file's key), the file fails and the table is built and saved again."""
    url = store_url(tmp_path, kind)
    items = steps(60)
    seqs = written(url, items)
    saved(url, items, monkeypatch)
    script = f"""
        from agents.memory.stores import open_store
        with open_store({url!r}) as store:
            assert store.delete_seqs("s", [{seqs[at]}]) == 1
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True)
    left = [*items[:at], *items[at + 1 :]]
    assert first_loads(url, left, monkeypatch) == (at >= 16)
    if at < 16:
        saved(url, left, monkeypatch)
        assert first_loads(url, left, monkeypatch)


def test_a_vector_rewritten_in_place_is_caught_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vector row rewritten by another connection (same count, same first rows): the log names it, the file is loaded and that item re-coded: the hits are those of a handle that reads the rows (no file)."""
    db = tmp_path / "store.db"
    items = steps(60)
    coded_session(f"sqlite://{db}", items, monkeypatch)
    with sqlite3.connect(db) as con:
        first, last = con.execute("SELECT min(seq), max(seq) FROM kvmemory_vectors").fetchone()
        con.execute(
            "UPDATE kvmemory_vectors SET vector = (SELECT vector FROM kvmemory_vectors WHERE seq = ?)"
            " WHERE seq = ?",
            (first, last),
        )
    con.close()
    want = rows_read(f"sqlite://{db}", tmp_path / "store.db.vectors", items, monkeypatch)
    assert want[0] != expected(items, QUERIES[0], 60, "semantic", None)
    with coded_handle(f"sqlite://{db}", items, monkeypatch) as store:
        assert [found(store, query, 60, "semantic") for query in QUERIES] == want
        assert kept_types(store) == [CompactVectors]


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("harm", ["flip", "cut", "empty", "magic"])
def test_a_damaged_or_cut_file_is_ignored(
    harm: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte changed anywhere in the body, a cut file, an empty one: not loaded, and the hits stay right."""
    url = store_url(tmp_path, kind)
    items = steps(80, 5)
    path = coded_session(url, items, monkeypatch)
    assert first_loads(url, items, monkeypatch)
    harm_file(path, harm)
    assert not first_loads(url, items, monkeypatch)


@pytest.mark.parametrize("kind", STORES)
def test_a_file_of_another_session_or_store_is_ignored(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file of session s copied over that of session t (same steps), or of another store's session s: not loaded."""
    items = steps(70, 2)
    url = store_url(tmp_path, kind)
    path = coded_session(url, items, monkeypatch)
    with open_store(url) as store:
        store.append("t", items)
        store.index_embeddings("t", EMBEDDER)
        other = coded_path(store, "t")
    os.makedirs(os.path.dirname(other), exist_ok=True)
    shutil.copyfile(path, other)
    with coded_handle(url, items, monkeypatch) as store:
        hits = store.search("t", QUERIES[0], 5, mode="semantic", embedder=EMBEDDER)
        assert [(hit.item["step"], hit.score) for hit in hits] == expected(
            items, QUERIES[0], 5, "semantic", None
        )
        assert kept_tables(store) == []
    # Another store whose session s holds other steps, given this store's file.
    (tmp_path / "second").mkdir()
    second = store_url(tmp_path / "second", kind)
    others = steps(70, 3)
    written(second, others)
    with open_store(second) as store:
        target = coded_path(store)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(path, target)
    assert not first_loads(second, others, monkeypatch)


def test_a_file_of_another_model_or_fields_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file loads only under its own subject: another model, dimension or fields names another; it gives the version it was saved at."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(50, 4)
    path = coded_session(url, items, monkeypatch)
    with open_store(url) as store:
        file = file_of(store)
        version, key = file.version, file.key()

    def load(subject: tuple[Any, ...]) -> Any:
        return coded_file.load_coded(
            path, repr(subject).encode(), key, 1 << 30, EMBEDDER.name, EmbedParts(), 64, dict
        )

    table, at = load(("s", FIELDS, EMBEDDER.name, 64))
    assert isinstance(table, CompactVectors)
    assert at == repr(version).encode()
    assert coded_file.version_of(at) == version
    assert load(("s", FIELDS, "other-model", 64)) is None
    assert load(("s", FIELDS, EMBEDDER.name, 32)) is None
    assert load(("s", fields_text(None, EmbedParts.WHOLE), EMBEDDER.name, 64)) is None
    assert load(("t", FIELDS, EMBEDDER.name, 64)) is None
    assert (
        coded_file.load_coded(
            path,
            repr(("s", FIELDS, EMBEDDER.name, 64)).encode(),
            key,
            100,
            EMBEDDER.name,
            EmbedParts(),
            64,
            dict,
        )
        is None
    )  # past the budget


def _forged(path: str, key: bytes, change: Any) -> None:
    """Rewrite the file at ``path`` with its coded rows changed by ``change`` and its HMAC made with ``key``."""
    data = bytearray(Path(path).read_bytes())
    body = memoryview(data)[coded_file._START :]
    tag_length, used, row_bytes, _, _ = coded_file._HEAD.unpack_from(body)
    at = coded_file._START + coded_file._HEAD.size + tag_length + (-tag_length % 8)
    rows = np.frombuffer(data, np.int8, used * row_bytes, at).reshape(used, row_bytes)
    change(rows)
    mac = coded_file._body_mac(key, [bytes(data[coded_file._START :])])
    data[len(coded_file.MAGIC) : coded_file._START] = mac
    Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("key", ["guessed", "right"])
def test_a_forged_file_is_ignored(
    key: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slacks forged to zero under a key guessed without the store's rows fail the HMAC; forged negative under the right key, they fail the checks: never loaded."""
    url = store_url(tmp_path, kind)
    items = steps(80, 7)
    path = coded_session(url, items, monkeypatch)
    dimension = EMBEDDER.dimension

    def zero_slacks(rows: Any) -> None:
        tail = rows[:, dimension : dimension + 8].view(np.float32)
        tail[:, 1] = 0.0 if key == "guessed" else -1.0

    with open_store(url) as store:
        right = file_of(store).key()
    _forged(path, coded_file.snapshot_key([]) if key == "guessed" else right, zero_slacks)
    assert not first_loads(url, items, monkeypatch)


def test_a_read_only_handle_loads_but_never_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only handle codes the session without saving it, and loads a file a writer saved."""
    db = tmp_path / "store.db"
    items = steps(60, 1)
    written(f"sqlite://{db}", items)
    with coded_handle(f"sqlite://{db}?mode=ro", items, monkeypatch) as store:
        coded_up(store, QUERIES[0], 5, "semantic")
        assert kept_types(store) == [CompactVectors]
    assert not (tmp_path / "store.db.vectors").exists()
    saved(f"sqlite://{db}", items, monkeypatch)
    assert first_loads(f"sqlite://{db}?mode=ro", items, monkeypatch)


def test_off_writes_none_and_delete_session_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vector_snapshot=off`` writes no file; ``delete_session`` removes the session's file."""
    db = tmp_path / "store.db"
    items = steps(60, 1)
    written(f"sqlite://{db}", items)
    saved(f"sqlite://{db}?vector_snapshot=off", items, monkeypatch)
    assert not (tmp_path / "store.db.vectors").exists()
    path = saved(f"sqlite://{db}", items, monkeypatch)
    assert os.path.exists(path)
    with open_store(f"sqlite://{db}") as store:
        assert store.delete_session("s")
    assert not os.path.exists(path)


def test_stores_without_a_file_keep_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``memory://`` names no file (a coded table is built by each handle, as before), and ranks as Memory.search."""
    items = steps(60, 2)
    # A name of its own: a named memory store lives on in the process (each kernel's run adds).
    with open_store(f"memory://coded-file-test-{tmp_path.name}") as store:
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
        assert store.backend.vector_snapshot_path("s", FIELDS) is None
        coded_budget(store, items, monkeypatch)
        assert (
            coded_up(store, QUERIES[2], 6, "semantic")
            == [expected(items, QUERIES[2], 6, "semantic", None)] * 3
        )
    assert os.listdir(tmp_path) == []


def test_a_bad_vector_snapshot_option_is_refused(tmp_path: Path) -> None:
    """``vector_snapshot`` takes ``auto`` or ``off`` only, in the URL and the constructor."""
    from agents.memory.exceptions import InvalidStoreURLError, StoreArgumentError
    from agents.memory.stores import SQLiteStore

    with pytest.raises(InvalidStoreURLError, match="vector_snapshot"):
        open_store(f"sqlite://{tmp_path / 'a.db'}?vector_snapshot=on")
    with pytest.raises(StoreArgumentError, match="vector_snapshot"):
        SQLiteStore(tmp_path / "b.db", vector_snapshot="always")  # type: ignore[arg-type]
    with open_store(f"sqlite://{tmp_path / 'c.db'}?vector_snapshot=off") as store:
        assert store.vector_snapshot == "off"  # type: ignore[attr-defined]


# -- a stale file caught up through the vector change log ------------------------------------


def planned(
    items: list[MemoryItem], seqs: list[int], ops: list[tuple[str, int]]
) -> tuple[list[Action], list[MemoryItem]]:
    """Return the actions ``ops`` make on the stored ``items`` (of ``seqs``), and the items they leave: appends of 1-3 steps, deletes of a step and re-embeds of a stored vector, each past the first 16 items (the file's key)."""
    now = list(items)
    actions: list[Action] = []
    for at, (op, pick) in enumerate(ops):
        later = [i for i, item in enumerate(now) if i >= 16 and item in items]
        if op == "append" or not later:
            added = [
                MemoryItem(**{**item.to_dict(), "step": 2000 + 10 * at + i})
                for i, item in enumerate(steps(1 + pick % 3, pick))
            ]
            now.extend(added)
            actions.append(("append", [item.to_dict() for item in added]))
        elif op == "delete":
            item = now.pop(later[pick % len(later)])
            actions.append(("delete", item.step))
        else:
            actions.append(("re-embed", seqs[items.index(now[later[pick % len(later)]])]))
    return actions, now


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(48, 110),
    seed=st.integers(0, 1000),
    ops=st.lists(
        st.tuples(st.sampled_from(["append", "delete", "re-embed"]), st.integers(0, 1000)),
        min_size=1,
        max_size=4,
    ),
    process=st.booleans(),
    k=st.integers(1, 40),
    query=st.sampled_from(QUERIES),
    mode=st.sampled_from(["semantic", "hybrid"]),
    where=st.sampled_from([None, {"team": "red"}]),
)
def test_a_stale_file_is_caught_up_and_ranks_as_memory_search(
    n: int,
    seed: int,
    ops: list[tuple[str, int]],
    process: bool,
    k: int,
    query: str,
    mode: str,
    where: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Steps appended, deleted and re-embedded after the save, by another handle or another process: a fresh handle's first query loads the stale file, catches it up, and answers with Memory.search's hits and floats, as later queries do."""
    items = steps(n, seed)
    with tempfile.TemporaryDirectory() as folder:
        db = str(Path(folder) / "store.db")
        url = f"sqlite://{db}"
        seqs = written(url, items)
        saved(url, items, monkeypatch)
        actions, now = planned(items, seqs, ops)
        if process:
            script = f"""
                import sys
                sys.path.insert(0, {str(Path(__file__).parent)!r})
                from test_stores_coded_file import acted
                acted({db!r}, {actions!r})
            """
            subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True)
        else:
            acted(db, actions)
        with open_store(url) as store:
            # Below the float32 table still (4 bytes a coordinate), with room for the coded
            # table grown by the catch-up: a table grown past the budget is not kept.
            coded_budget(store, now, monkeypatch)
            monkeypatch.setattr(
                store._vectors._cache, "_budget", store._vectors._cache._budget * 3 // 2
            )
            want = expected(now, query, k, mode, where)
            assert found(store, query, k, mode, where) == want
            assert kept_types(store) == [CompactVectors]
            assert found(store, query, k, mode, where) == want
            assert found(store, QUERIES[0], 60, "semantic") == expected(
                now, QUERIES[0], 60, "semantic", None
            )


@pytest.mark.parametrize(("added", "caught"), [(15, True), (16, False)])
def test_a_file_is_caught_up_up_to_a_quarter_of_its_items_changed(
    added: int, caught: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 items saved, then 15 appended (a quarter): caught up; 16: the table is built (and saved) as without a file, the hits right either way."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(60, 21)
    coded_session(url, items, monkeypatch)
    more = [
        MemoryItem(**{**item.to_dict(), "step": 500 + i}) for i, item in enumerate(steps(added, 22))
    ]
    written(url, more)
    every = [*items, *more]
    assert first_loads(url, every, monkeypatch) == caught
    if not caught:
        saved(url, every, monkeypatch)
        assert first_loads(url, every, monkeypatch)


def test_a_backend_that_cannot_name_the_changes_builds_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``vector_changes`` answers ``None`` (a pruned log), the stale file is not used: the table is built, the hits right."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(60, 23)
    coded_session(url, items, monkeypatch)
    more = [MemoryItem(step=700, thought=QUERIES[1])]
    written(url, more)
    with open_store(url) as store:
        monkeypatch.setattr(type(store.backend), "vector_changes", lambda *_: None)
    assert not first_loads(url, [*items, *more], monkeypatch)


@pytest.mark.parametrize("row", ["updated", "deleted"])
def test_a_file_whose_first_rows_changed_is_refused(
    row: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One of the first 16 vector rows (the file's key) rewritten in SQL or deleted with its step: the file fails its HMAC, the table is built from the rows and saved again."""
    db = tmp_path / "store.db"
    url = f"sqlite://{db}"
    items = steps(60, 24)
    seqs = written(url, items)
    saved(url, items, monkeypatch)
    if row == "deleted":
        with open_store(url) as store:
            assert store.delete_seqs("s", [seqs[5]]) == 1
        items = [*items[:5], *items[6:]]
    else:
        with sqlite3.connect(db) as con:
            con.execute(
                "UPDATE kvmemory_vectors SET vector = (SELECT vector FROM kvmemory_vectors"
                " WHERE seq = ?) WHERE seq = ?",
                (seqs[-1], seqs[5]),
            )
        con.close()
    with coded_handle(url, items, monkeypatch) as store:
        found(store, QUERIES[0], 5, "semantic")
        assert kept_tables(store) == []  # read page by page, as without a file
    want = rows_read(url, tmp_path / "store.db.vectors", items, monkeypatch)
    saved(url, items, monkeypatch)
    with coded_handle(url, items, monkeypatch) as store:
        assert [found(store, query, len(items), "semantic") for query in QUERIES] == want
        assert kept_types(store) == [CompactVectors]
