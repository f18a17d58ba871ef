"""A keyword snapshot saved beside an SQLite store answers the first queries of a ``Memory`` read from it (``Store.save_keyword_snapshot``, ``_search.snapshot``)."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_checks import QUERY, TEXT, built, hits, item_dicts, snapshot_reads

from agents.memory import Memory, MemoryItem
from agents.memory.search._scan import TextScan
from agents.memory.stores import Store, open_async_store, open_memory, open_store
from agents.memory.stores._search import snapshot as snapshot_module

pytest.importorskip("numpy")

ITEMS = item_dicts(TEXT, min_size=1, max_size=30)


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for each ``read_snapshot`` of ``Store.read_memory``, whether it gave a snapshot."""
    return snapshot_reads(monkeypatch)


def snapshot_file(folder: str | Path) -> Path:
    """Return the one snapshot file kept beside ``<folder>/s.db``."""
    [path] = (Path(folder) / "s.db.keywords").iterdir()
    return path


def _write(store: Store, rows: list[dict[str, Any]], what: str, at: int, text: str) -> None:
    """Apply one write to session ``s`` and to ``rows``, its model."""
    if what == "add":
        step = max((row["step"] for row in rows), default=-1) + 1
        rows.append({"step": step, "a": text})
        store.append("s", [MemoryItem(**rows[-1])])
    elif what == "delete" and rows:
        store.delete_steps("s", [rows.pop(at % len(rows))["step"]])
    elif what == "field" and rows:
        text = f"{text} q{next(_FRESH)}"  # a word no row held: the row's terms change
        rows[at % len(rows)]["b"] = text
        with open_memory(store, "s") as stored:
            stored.content[at % len(rows)].set_value("b", text)


_FRESH = itertools.count()

WRITES = st.lists(
    st.tuples(
        st.sampled_from(["add", "delete", "field", "save", "reopen", "damage", "cut", "unlink"]),
        st.integers(0, 40),
        TEXT,
    ),
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ITEMS, WRITES, st.lists(QUERY, min_size=1, max_size=3))
def test_a_memory_read_ranks_as_its_items_whatever_the_snapshot(
    loaded: list[bool],
    data: list[dict[str, Any]],
    writes: list[tuple[str, int, str]],
    queries: list[str],
) -> None:
    """After appends, deletes, field changes, saves and reopens, with the snapshot stale, damaged, cut short or gone, a memory a new handle reads ranks as one built from the rows; the snapshot is used exactly where the rows it was saved from are still the first, unchanged."""
    rows = [{"step": i, **row} for i, row in enumerate(data)]
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{folder}/s.db"
        store = open_store(url)
        try:
            store.append("s", [MemoryItem(**row) for row in rows])
            # The rows the snapshot was saved from (None: none saved, or its file damaged or gone).
            snap = copy.deepcopy(rows) if store.save_keyword_snapshot("s") else None
            for what, at, text in writes:
                if what == "save":
                    snap = copy.deepcopy(rows) if store.save_keyword_snapshot("s") else None
                elif what == "reopen":
                    store.close()
                    store = open_store(url)
                elif what in ("damage", "cut", "unlink") and snap is not None:
                    path = snapshot_file(folder)
                    blob = bytearray(path.read_bytes())
                    if what == "damage":
                        blob[at * 7919 % len(blob)] ^= 0x55
                    path.write_bytes(bytes(blob[: len(blob) // 2] if what == "cut" else blob))
                    if what == "unlink":
                        path.unlink()
                    snap = None
                else:
                    _write(store, rows, what, at, text)
        finally:
            store.close()
        loaded.clear()
        with open_store(url) as reader:
            memory = reader.read_memory("s")
            model = built(rows)
            for query in queries:
                if any(word.isalnum() for word in query.split()):
                    assert hits(memory, query) == hits(model, query)
        # Used where the rows it was saved from are still the first rows, unchanged.
        usable = snap is not None and rows[: len(snap)] == snap
        assert loaded == ([usable] if rows else [])


@pytest.fixture
def saved(tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """An SQLite store holding session ``s`` of 60 rows with its snapshot saved, and those rows."""
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(60)]
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows])
        assert store.save_keyword_snapshot("s")
    return url, rows


def _unscanned(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the kept terms were scanned")


def test_the_first_queries_read_the_snapshot_not_the_kept_terms(
    saved: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a snapshot saved, the memory read neither joins nor scans the kept terms, and its queries (new words too) rank as a memory built from the items."""
    monkeypatch.setattr(TextScan, "kept", _unscanned)
    monkeypatch.setattr(TextScan, "find", _unscanned)
    monkeypatch.setattr(Store, "ranking_at", _unscanned)
    url, rows = saved
    model = built(rows)
    with open_store(url) as store:
        memory = store.read_memory("s")
        for query in ("report 3", "window 1 opened", "report 3", "nothing here"):
            assert hits(memory, query) == hits(model, query)


def _other_process(url: str, code: str) -> None:
    """Run ``code`` with ``store`` open on ``url`` in another process."""
    script = (
        "from agents.memory import MemoryItem\n"
        "from agents.memory.stores import open_memory, open_store\n"
        f"with open_store({url!r}) as store:\n"
        + "".join(f"    {line}\n" for line in code.split("\n"))
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parent.parent)


APPEND = "store.append('s', [MemoryItem(step=100 + i, thought='report 3 ' + 'filler ' * 40) for i in range(5)])"
UPDATE = "with open_memory(store, 's') as stored:\n    stored.content[10].set_value('thought', 'report 3 report 3')"


@pytest.mark.parametrize(
    ("how", "write", "used"),
    [
        ("handle", "append", True),
        ("process", "append", True),
        ("handle", "update", False),
        ("process", "update", False),
        ("handle", "delete", False),
    ],
)
def test_writes_by_another_handle_or_process_are_caught_up_or_stale_the_snapshot(
    saved: tuple[str, list[dict[str, Any]]], loaded: list[bool], how: str, write: str, used: bool
) -> None:
    """Rows appended after the save are caught up from their terms; an update or delete leaves the snapshot unused. Either way the hits are those of a memory built from the rows."""
    url, _ = saved
    code = {"append": APPEND, "update": UPDATE, "delete": "store.delete_steps('s', [4])"}[write]
    if how == "process":
        _other_process(url, code)
    else:
        with open_store(url) as store:
            exec(code, {"store": store, "MemoryItem": MemoryItem, "open_memory": open_memory})
    with open_store(url) as reader:
        model = built([item.to_dict() for item in reader.read("s")])
        memory = reader.read_memory("s")
        for query in ("report 3", "filler window 2", "report 3 filler"):
            assert hits(memory, query, 8) == hits(model, query, 8)
    assert loaded == [used]


def test_a_write_after_the_read_drops_the_snapshot_with_the_memory(
    saved: tuple[str, list[dict[str, Any]]],
) -> None:
    """A change of the memory after its read ranks the changed items (the snapshot holds the rows read)."""
    url, rows = saved
    with open_store(url) as store:
        memory = store.read_memory("s")
        model = Memory([MemoryItem(**row) for row in rows])
        assert hits(memory, "report 3") == hits(model, "report 3")
        for target in (memory, model):
            target.add_memory_item(MemoryItem(step=60, thought="report 3 report 3"))
            target.content[10].set_value("thought", "report 3 report 3")
        assert hits(memory, "report 3") == hits(model, "report 3")


def test_another_sessions_snapshot_is_not_taken(tmp_path: Path, loaded: list[bool]) -> None:
    """A snapshot file put in place of another session's (same folder) does not vouch for its rows."""
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=0, thought="report 3 window")])
        store.append("t", [MemoryItem(step=0, thought="report 3 window")])
        assert store.save_keyword_snapshot("s")
        assert store.save_keyword_snapshot("t")
        first, second = sorted((tmp_path / "s.db.keywords").iterdir())
        second.write_bytes(first.read_bytes())  # both now hold the snapshot of one session
        model = Memory([MemoryItem(step=0, thought="report 3 window")])
        for sid in ("s", "t"):
            assert hits(store.read_memory(sid), "report window") == hits(model, "report window")
    assert sorted(loaded) == [False, True]


def _forged(data: bytes, how: str) -> bytes:
    """Return the snapshot ``data`` with its postings bent ``how``, its body's digest made again to match (as anyone can)."""
    start = len(snapshot_module.MAGIC) + 40
    body = bytearray(data[start:])
    n_rows, n_words, n_text = struct.unpack_from("<QQQ", body)
    starts = 24 + n_text
    places = starts + 8 * (n_words + 1) + 4 * n_rows
    n_postings = struct.unpack_from("<Q", body, starts + 8 * n_words)[0]
    counts = places + 4 * n_postings
    if how == "place past the rows":
        struct.pack_into("<I", body, places, n_rows + 5)
    elif how == "a row twice":  # the first term's second place made its first
        struct.pack_into("<I", body, places + 4, struct.unpack_from("<I", body, places)[0])
    elif how == "a count of none":
        struct.pack_into("<I", body, counts, 0)
    elif how == "starts falling":
        struct.pack_into("<Q", body, starts + 8, n_postings + 1)
    digest = hashlib.sha1(bytes(body), usedforsecurity=False).digest()
    return data[: start - 20] + digest + bytes(body)


@pytest.mark.parametrize(
    "how", ["place past the rows", "a row twice", "a count of none", "starts falling"]
)
def test_a_snapshot_forged_to_match_its_digests_is_not_taken(
    tmp_path: Path, loaded: list[bool], how: str
) -> None:
    """A snapshot whose digests match but whose postings are not such as a save writes (a file is untrusted) is not used: the memory ranks as its items, no query fails."""
    rows = [{"step": i, "a": "report window", "b": f"open {i % 3} report"} for i in range(12)]
    with open_store(f"sqlite://{tmp_path}/s.db") as store:
        store.append("s", [MemoryItem(**row) for row in rows])
        assert store.save_keyword_snapshot("s")
        path = snapshot_file(tmp_path)
        path.write_bytes(_forged(path.read_bytes(), how))
        memory = store.read_memory("s")
        for query in ("0", "report", "open 1", "window report 2"):
            assert hits(memory, query) == hits(built(rows), query)
    assert loaded == [False]


def test_deleting_a_session_removes_its_snapshot_only(tmp_path: Path) -> None:
    """``delete_session`` removes the session's snapshot file and leaves another session's."""
    with open_store(f"sqlite://{tmp_path}/s.db") as store:
        for sid in ("s", "t"):
            store.append(sid, [MemoryItem(step=0, thought=f"report {sid} window")])
            assert store.save_keyword_snapshot(sid)
        assert len(list((tmp_path / "s.db.keywords").iterdir())) == 2
        assert store.delete_session("s")
        assert hits(store.read_memory("t"), "report t") == hits(
            Memory([MemoryItem(step=0, thought="report t window")]), "report t"
        )
        assert len(list((tmp_path / "s.db.keywords").iterdir())) == 1
        assert store.delete_session("s") is False  # gone already, its snapshot too: no error


def test_only_a_writable_sqlite_file_saves_one(tmp_path: Path) -> None:
    """JSONL, memory:// and a read-only SQLite handle save none (False, or the read-only error); an async store saves as the store does."""
    item = MemoryItem(step=0, thought="report 3")
    for url in (f"jsonl://{tmp_path}/j", "memory://snapshot-test"):
        with open_store(url) as store:
            store.append("s", [item])
            assert store.save_keyword_snapshot("s") is False
    url = f"sqlite://{tmp_path}/s.db"
    with open_store(url) as store:
        store.append("s", [item])
    with open_store(url + "?mode=ro") as reader, pytest.raises(Exception, match="read-only"):
        reader.save_keyword_snapshot("s")
    assert not (tmp_path / "s.db.keywords").exists()

    async def save() -> bool:
        async with open_async_store(url) as store:
            return await store.save_keyword_snapshot("s")

    assert asyncio.run(save()) is True
    with open_store(url + "?mode=ro") as reader:  # a read-only handle reads it
        memory = reader.read_memory("s")
        assert hits(memory, "report") == hits(Memory([item]), "report")


def test_a_snapshot_far_behind_is_not_caught_up(tmp_path: Path, loaded: list[bool]) -> None:
    """A snapshot saved before more than 1,000 rows (and a fiftieth of its own) were appended is not used (catching up would cost more than the scan); 1,000 are caught up."""
    url = f"sqlite://{tmp_path}/s.db"
    rows = [{"step": i, "thought": f"report {i % 11} window {i % 5}"} for i in range(1_002)]
    with open_store(url) as store:
        store.append("s", [MemoryItem(**rows[0])])
        assert store.save_keyword_snapshot("s")
        store.append("s", [MemoryItem(**row) for row in rows[1:1_001]])
        model = built(rows[:1_001])
        assert hits(store.read_memory("s"), "report 3 window") == hits(model, "report 3 window")
        store.append("s", [MemoryItem(**rows[1_001])])
        model = built(rows)
        assert hits(store.read_memory("s"), "report 3 window") == hits(model, "report 3 window")
    assert loaded == [True, False]
