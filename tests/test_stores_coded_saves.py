"""The coded file a closing handle saves for the sessions whose part vectors it wrote, and the file's chunked HMAC: a fresh handle of another process loads it with Memory.search's hits and floats; nothing is saved where it is not due; a flipped byte in any chunk, chunks swapped, and a file of the first format are refused."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from coded_sessions import (
    EMBEDDER,
    FIELDS,
    QUERIES,
    budget_of,
    closed_saves,
    coded_handle,
    coded_path,
    coded_session,
    coded_up,
    expected,
    file_of,
    first_loads,
    found,
    kept_types,
    more_steps,
    saved,
    steps,
    write_and_close,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import MemoryItem
from agents.memory.search import EmbedParts
from agents.memory.stores import open_store
from agents.memory.stores._search import coded_file
from agents.memory.stores._search.coded_saves import rebuild_rows
from agents.memory.stores._search.compact import CompactVectors

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = pytest.mark.usefixtures("int8_kernel")

ROOT = Path(__file__).resolve().parent.parent


def test_a_writer_process_that_exits_after_close_leaves_the_file_a_reader_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer process that embeds the session, never queries, closes and exits at once leaves a coded file; this process's fresh handle answers its first query from it, as Memory.search."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(90, 11)
    script = f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from coded_sessions import EMBEDDER, steps
        from agents.memory.stores import open_store
        store = open_store({url!r})
        store._vectors._cache._budget = {budget_of(items)}
        store.append("s", steps(90, 11))
        store.index_embeddings("s", EMBEDDER)
        store.close()
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, env=env)
    with coded_handle(url, items, monkeypatch) as store:
        assert os.path.exists(coded_path(store))
        for query, mode in [(QUERIES[0], "semantic"), (QUERIES[1], "hybrid")]:
            assert found(store, query, 6, mode) == expected(items, query, 6, mode, None)
            assert kept_types(store) == [CompactVectors]


def test_a_few_later_steps_leave_the_file_stale_and_too_many_save_it_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle that appends and embeds one short step closes without coding: the file stays stale and a fresh handle catches it up, as Memory.search; a handle that writes more steps than a reader catches up (and ``rebuild_rows``) closes with the file current again."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(70, 4)
    write_and_close(url, items, monkeypatch)
    assert first_loads(url, items, monkeypatch)
    added = [MemoryItem(step=900, thought=QUERIES[2])]
    with coded_handle(url, [*items, *added], monkeypatch) as store:
        store.append("s", added)
        store.index_embeddings("s", EMBEDDER)
        before = coded_file.saved_tag(coded_path(store))
        assert rebuild_rows(store.backend.vector_count("s", FIELDS)) == 64 < len(items)
    closed_saves()
    with open_store(url) as store:
        assert coded_file.saved_tag(coded_path(store)) == before
    assert first_loads(url, [*items, *added], monkeypatch)
    more = more_steps(70, 5)
    every = [*items, *added, *more]
    with coded_handle(url, every, monkeypatch) as store:
        store.append("s", more)
        store.index_embeddings("s", EMBEDDER)
    closed_saves()
    with open_store(url) as store:
        assert coded_file.saved_tag(coded_path(store)) != before
    assert first_loads(url, every, monkeypatch)
    with coded_handle(url, every, monkeypatch) as store:
        assert found(store, QUERIES[2], 5, "semantic") == expected(
            every, QUERIES[2], 5, "semantic", None
        )


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(2, 100),
    seed=st.integers(0, 1000),
    k=st.integers(1, 30),
    query=st.sampled_from(QUERIES),
    mode=st.sampled_from(["semantic", "hybrid"]),
    where=st.sampled_from([None, {"team": "red"}]),
)
def test_the_file_a_close_saved_answers_a_fresh_handle_as_memory_search(
    n: int, seed: int, k: int, query: str, mode: str, where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the steps, the file a writer's close saved gives a fresh handle's first and later queries Memory.search's hits and floats."""
    items = steps(n, seed)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{Path(folder) / 'store.db'}"
        write_and_close(url, items, monkeypatch)
        with coded_handle(url, items, monkeypatch) as store:
            assert os.path.exists(coded_path(store))
            want = expected(items, query, k, mode, where)
            assert found(store, query, k, mode, where) == want
            assert kept_types(store) == [CompactVectors]
            assert found(store, query, k, mode, where) == want


@pytest.mark.parametrize("case", ["read-only", "off", "under the budget", "no vectors written"])
def test_a_close_saves_no_file_where_none_is_due(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file at close: a read-only handle, ``vector_snapshot=off``, a session a fresh handle keeps as float32, a handle that wrote no vectors."""
    db = tmp_path / "store.db"
    items = steps(60, 3)
    if case == "under the budget":
        with open_store(f"sqlite://{db}") as store:
            store.append("s", items)
            store.index_embeddings("s", EMBEDDER)
    elif case == "off":
        write_and_close(f"sqlite://{db}?vector_snapshot=off", items, monkeypatch)
    else:
        with open_store(f"sqlite://{db}") as store:
            store.append("s", items)
            if case == "no vectors written":  # by the handle below, which only queries once
                store.index_embeddings("s", EMBEDDER)
        url = f"sqlite://{db}" + ("?mode=ro" if case == "read-only" else "")
        with coded_handle(url, items, monkeypatch) as store:
            # The read-only handle embeds the steps at each query without storing them.
            assert found(store, QUERIES[0], 5, "semantic") == expected(
                items, QUERIES[0], 5, "semantic", None
            )
    closed_saves()
    assert not (tmp_path / "store.db.vectors").exists()


def test_a_close_saves_nothing_for_stores_without_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``memory://`` closes with its vectors over the budget and writes nothing; a JSONL close saves the file of the vectors its query stored, in the store directory, and a fresh handle loads it."""
    items = steps(60, 2)
    with coded_handle("memory://coded-saves-test", items, monkeypatch) as store:
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
    url = f"jsonl://{tmp_path / 'folder'}"
    with coded_handle(url, items, monkeypatch) as store:
        store.append("s", items)
        assert found(store, QUERIES[0], 5, "semantic") == expected(
            items, QUERIES[0], 5, "semantic", None
        )
    closed_saves()
    assert sorted(os.listdir(tmp_path)) == ["folder"]
    assert len(os.listdir(tmp_path / "folder" / "kvmemory-coded")) == 1
    assert first_loads(url, items, monkeypatch)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_the_folder_of_coded_files_is_its_owners_only(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder a store makes for its coded files (SQLite's ``<file>.vectors``, JSONL's ``kvmemory-coded``) is made 0700 and each file in it 0600, as the store's own files: the coded rows are the session's vectors."""
    url = f"sqlite://{tmp_path / 'store.db'}" if kind == "sqlite" else f"jsonl://{tmp_path / 'j'}"
    previous = os.umask(0o022)
    try:
        write_and_close(url, steps(60, 5), monkeypatch)
    finally:
        os.umask(previous)
    with open_store(url) as store:
        folder = Path(coded_path(store)).parent
    assert os.stat(folder).st_mode & 0o777 == 0o700
    names = os.listdir(folder)
    assert names
    for name in names:
        assert os.stat(folder / name).st_mode & 0o777 == 0o600, name


def files_coded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Return a list that gets the path of each coded file saved from now on."""
    coded: list[str] = []
    original = coded_file.save_coded

    def counted(*args: Any) -> bool:
        coded.append(args[0])
        return original(*args)

    monkeypatch.setattr(coded_file, "save_coded", counted)
    return coded


def test_a_current_file_is_not_coded_again_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose own queries saved the file after its last write closes without coding the session again."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(60, 6)
    coded = files_coded(monkeypatch)
    with coded_handle(url, items, monkeypatch) as store:
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
        coded_up(store, QUERIES[0], 5, "semantic")
        assert len(coded) == 1
    closed_saves()
    assert len(coded) == 1


def _body(path: str) -> tuple[bytearray, int]:
    """Return the file's bytes and where its body starts."""
    return bytearray(Path(path).read_bytes()), coded_file._START


def _load(path: str, store_url: str) -> Any:
    """Return what ``load_coded`` gives for the file of session ``s`` at the store's version now."""
    with open_store(store_url) as store:
        file = file_of(store)
        loaded = coded_file.load_coded(
            path, file.subject, file.key(), 1 << 30, EMBEDDER.name, EmbedParts(), 64, dict
        )
        return None if loaded is None else loaded[0]


@pytest.mark.parametrize("threads", [1, 3])
def test_a_flipped_byte_in_any_chunk_or_swapped_chunks_are_refused(
    threads: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With small chunks, a byte flipped in each chunk in turn, and two chunks swapped, fail the HMAC; the file as saved loads."""
    monkeypatch.setattr(coded_file, "CHUNK", 256)
    monkeypatch.setattr(coded_file, "MAC_THREADS", threads)
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(40, 8)
    write_and_close(url, items, monkeypatch)
    with open_store(url) as store:
        path = coded_path(store)
    data, start = _body(path)
    assert isinstance(_load(path, url), CompactVectors)
    chunks = -(-(len(data) - start) // 256)
    assert chunks > 8
    for chunk in range(chunks):
        flipped = bytearray(data)
        flipped[min(start + chunk * 256 + 100, len(data) - 1)] ^= 0x10
        Path(path).write_bytes(bytes(flipped))
        assert _load(path, url) is None, chunk
    swapped = bytearray(data)
    one, two = start + 256 * (chunks - 3), start + 256 * (chunks - 2)
    swapped[one : one + 256], swapped[two : two + 256] = (
        data[two : two + 256],
        data[one : one + 256],
    )
    assert swapped != data
    Path(path).write_bytes(bytes(swapped))
    assert _load(path, url) is None
    Path(path).write_bytes(bytes(data))
    assert isinstance(_load(path, url), CompactVectors)


@pytest.mark.parametrize("magic", [b"kvmvcod1", b"kvmvcod2"])
def test_a_file_of_an_earlier_format_is_refused_and_saved_again(
    magic: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of format 1 (``kvmvcod1``, one HMAC over the body) or 2 (``kvmvcod2``), right for its key: not loaded; the table is coded again and saved in format 3."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(70, 9)
    path = coded_session(url, items, monkeypatch)
    with open_store(url) as store:
        key = file_of(store).key()
    data, start = _body(path)
    if magic == b"kvmvcod1":
        old = magic + hmac.new(key, bytes(data[start:]), hashlib.sha256).digest()
    else:  # the body and chunked HMAC as saved now, under the older magic
        old = magic + bytes(data[len(magic) : start])
    Path(path).write_bytes(old + bytes(data[start:]))
    assert not first_loads(url, items, monkeypatch)
    saved(url, items, monkeypatch)
    assert Path(path).read_bytes()[:8] == coded_file.MAGIC == b"kvmvcod3"
    assert first_loads(url, items, monkeypatch)


def test_a_stale_file_of_a_session_that_no_longer_codes_is_removed_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle whose budget keeps the session as float32 writes 70 steps and closes: the stale file goes (no close codes it again)."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(50, 12)
    write_and_close(url, items, monkeypatch)
    with open_store(url) as store:
        path = coded_path(store)
        assert os.path.exists(path)
        store.append("s", more_steps(70, 13))
        store.index_embeddings("s", EMBEDDER)
    closed_saves()
    assert not os.path.exists(path)


def test_a_close_leaves_a_file_a_reader_catches_up_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer of 70 steps (past ``rebuild_rows``) to a session of 300 saved: few enough for a reader to catch up (a quarter), so the close codes nothing; a fresh handle's first query catches the file up, as Memory.search, and its close saves the table back (70 items caught up, past ``rebuild_rows``), once."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(300, 14)
    write_and_close(url, items, monkeypatch)
    coded = files_coded(monkeypatch)
    more = more_steps(70, 15)
    every = [*items, *more]
    with coded_handle(url, every, monkeypatch) as store:
        store.append("s", more)
        store.index_embeddings("s", EMBEDDER)
        assert rebuild_rows(store.backend.vector_count("s", FIELDS)) == 64 < len(more)
    closed_saves()
    assert coded == []
    assert first_loads(url, every, monkeypatch)
    closed_saves()
    # The reader caught up 70 items (past rebuild_rows): its close saved the table back.
    assert len(coded) == 1
    assert first_loads(url, every, monkeypatch)
    closed_saves()
    assert len(coded) == 1
