"""A PostgreSQL handle's coded part vectors saved in a local folder (``vector_cache``): a fresh handle's first query loads them where current, with Memory.search's hits and floats; a stale, damaged, cut or foreign file is ignored."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg")

from coded_sessions import (  # noqa: E402  # below the skip, as the imports after it
    EMBEDDER,
    FIELDS,
    QUERIES,
    budget_of,
    closed_saves,
    coded_budget,
    coded_handle,
    coded_path,
    coded_session,
    coded_up,
    expected,
    first_loads,
    found,
    harm_file,
    kept_tables,
    kept_types,
    saved,
    steps,
    write_and_close,
    written,
)

from agents.memory import MemoryItem  # noqa: E402
from agents.memory.exceptions import (  # noqa: E402
    InvalidStoreURLError,
    StoreArgumentError,
    VectorCacheWarning,
)
from agents.memory.stores import PostgresStore, open_store  # noqa: E402
from agents.memory.stores._postgres.coded_folder import (  # noqa: E402
    cache_root,
    trim_folder,
    vector_cache_folder,
)
from agents.memory.stores._search import snapshot  # noqa: E402
from agents.memory.stores._search.compact import CompactVectors  # noqa: E402

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("int8_kernel")]


def cached(url: str, folder: Path | str) -> str:
    """Return ``url`` with the option ``vector_cache`` naming ``folder``."""
    return f"{url}{'&' if '?' in url else '?'}vector_cache={quote(str(folder))}"


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(2, 100),
    seed=st.integers(0, 1000),
    k=st.integers(1, 40),
    query=st.sampled_from(QUERIES),
    mode=st.sampled_from(["semantic", "hybrid"]),
    where=st.sampled_from([None, {"team": "red"}]),
    named=st.booleans(),
)
def test_a_fresh_handle_loads_the_coded_file_and_ranks_as_memory_search(
    n: int,
    seed: int,
    k: int,
    query: str,
    mode: str,
    where: Any,
    named: bool,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first query of a fresh handle answers from the file in the folder (one named, or this user's cache folder by default), with Memory.search's hits and floats."""
    items = steps(n, seed)
    with tempfile.TemporaryDirectory() as folder:
        url = cached(postgres_url, folder) if named else postgres_url
        with open_store(url) as store:
            store.delete_session("s")  # the example before's
        assert os.path.exists(coded_session(url, items, monkeypatch))
        with coded_handle(url, items, monkeypatch) as store:
            want = expected(items, query, k, mode, where)
            assert found(store, query, k, mode, where) == want
            assert kept_types(store) == [CompactVectors]
            assert found(store, query, k, mode, where) == want


def test_the_file_is_caught_up_once_another_handle_writes(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write since the save (another handle, without the folder) makes the file stale: loaded and caught up through the change log, as Memory.search."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(60)
    coded_session(url, items, monkeypatch)
    with open_store(postgres_url) as other:
        added = MemoryItem(step=500, thought="pay the invoice for March", team="red")
        other.append("s", [added])
        other.index_embeddings("s", EMBEDDER)
    items = [*items, added]
    assert first_loads(url, items, monkeypatch)
    with coded_handle(url, items, monkeypatch) as store:
        assert found(store, QUERIES[0], 1, "semantic")[0][0] == 500


@pytest.mark.parametrize("at", [40, 3])
def test_a_step_deleted_by_another_process_is_caught_up_unless_among_the_first_rows(
    at: int, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step deleted by another process since the save: caught up; among the first 16 vector rows (the file's key): the file fails, the table is built."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(60)
    seqs = written(url, items)
    saved(url, items, monkeypatch)
    script = f"""
        from agents.memory.stores import open_store
        with open_store({postgres_url!r}) as store:
            assert store.delete_seqs("s", [{seqs[at]}]) == 1
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True)
    assert first_loads(url, [*items[:at], *items[at + 1 :]], monkeypatch) == (at >= 16)


def test_a_file_saved_by_another_process_is_loaded(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process codes the session and saves the file in the folder; this process's fresh handle loads it and ranks as Memory.search."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(70, 4)
    written(url, items)
    script = f"""
        from agents.memory.search import HashingEmbedder
        from agents.memory.stores import open_store
        with open_store({url!r}) as store:
            store._vectors._cache._budget = {budget_of(items)}
            for _ in range(3):
                store.search("s", "chart saved OK", 5, mode="semantic", embedder=HashingEmbedder(64))
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True)
    assert first_loads(url, items, monkeypatch)


def test_threads_first_queries_on_one_handle_rank_as_memory_search(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads ask a fresh handle's first queries at once with the file there: each gets Memory.search's hits and floats from the file, none reads the session's vectors."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(90, 6)
    coded_session(url, items, monkeypatch)
    asked = [(QUERIES[i % 3], 3 + i, "semantic" if i % 2 else "hybrid") for i in range(4)]
    with coded_handle(url, items, monkeypatch) as store:
        pages: list[int] = []  # the page sizes of every vector read: 16 rows for the file's key
        read = store.backend.vector_pages

        def vector_pages(sid: str, fields: str, size: int) -> Any:
            pages.append(size)
            return read(sid, fields, size)

        monkeypatch.setattr(store.backend, "vector_pages", vector_pages)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda q: found(store, *q), asked))
        assert kept_types(store) == [CompactVectors]
        # No thread read the session's vectors (pages of 4,096): the file answered.
        assert set(pages) == {16}
    assert got == [expected(items, query, k, mode, None) for query, k, mode in asked]


def test_a_vector_rewritten_in_place_is_caught_up(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vector row rewritten in SQL (same first rows): the log names it, the file is loaded and that item re-coded; the hits are those of a handle without the folder (the rows read)."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(60)
    seqs = written(url, items)
    saved(url, items, monkeypatch)
    with psycopg.connect(postgres_url, autocommit=True) as con:  # the schema's search path
        con.execute(
            "UPDATE kvmemory_vectors SET vector ="
            " (SELECT vector FROM kvmemory_vectors WHERE seq = %s) WHERE seq = %s",
            (seqs[0], seqs[-1]),
        )
    with coded_handle(postgres_url, items, monkeypatch) as store:
        want = [found(store, query, 60, "semantic") for query in QUERIES]
    assert want[0] != expected(items, QUERIES[0], 60, "semantic", None)
    with coded_handle(url, items, monkeypatch) as store:
        assert [found(store, query, 60, "semantic") for query in QUERIES] == want
        assert kept_types(store) == [CompactVectors]


@pytest.mark.parametrize("harm", ["flip", "cut", "empty", "magic"])
def test_a_damaged_or_cut_file_is_ignored(
    harm: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte changed anywhere in the file, a cut file, an empty one: not loaded, and the hits stay right."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(80, 5)
    path = coded_session(url, items, monkeypatch)
    assert first_loads(url, items, monkeypatch)
    harm_file(path, harm)
    assert not first_loads(url, items, monkeypatch)


def test_another_schema_never_shares_a_file_nor_takes_one(
    postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two schemas of one server, one folder: each session s has a file of its own; one schema's file copied over the other's (other steps) is not loaded."""
    folder = tmp_path / "cache"
    schemas = ["t_coded_a_" + os.urandom(4).hex(), "t_coded_b_" + os.urandom(4).hex()]
    sep = "&" if "?" in postgres_server else "?"
    urls = [
        cached(f"{postgres_server}{sep}options=-csearch_path%3D{schema}", folder)
        for schema in schemas
    ]
    with psycopg.connect(postgres_server, autocommit=True) as con:
        for schema in schemas:
            con.execute(f"CREATE SCHEMA {schema}")
    try:
        first, second = steps(70, 2), steps(70, 3)
        written(urls[0], first)
        written(urls[1], second)
        path = saved(urls[0], first, monkeypatch)
        with open_store(urls[1]) as store:
            other = coded_path(store)
        assert other != path
        assert not os.path.exists(other)
        os.makedirs(os.path.dirname(other), exist_ok=True)
        shutil.copyfile(path, other)
        assert not first_loads(urls[1], second, monkeypatch)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as con:
            for schema in schemas:
                con.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_file_of_another_session_is_ignored(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file of session s copied over that of session t (the same steps): not loaded."""
    url = cached(postgres_url, tmp_path / "cache")
    items = steps(70, 2)
    path = coded_session(url, items, monkeypatch)
    with open_store(url) as store:
        store.append("t", items)
        store.index_embeddings("t", EMBEDDER)
        other = coded_path(store, "t")
    shutil.copyfile(path, other)
    with coded_handle(url, items, monkeypatch) as store:
        hits = store.search("t", QUERIES[0], 5, mode="semantic", embedder=EMBEDDER)
        assert [(hit.item["step"], hit.score) for hit in hits] == expected(
            items, QUERIES[0], 5, "semantic", None
        )
        assert kept_tables(store) == []


def test_a_read_only_handle_saves_and_loads(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only handle saves the table it codes in its folder (the machine's, not the database's) and a later one loads it."""
    items = steps(60, 1)
    written(postgres_url, items)
    folder = tmp_path / "cache"
    with PostgresStore(postgres_url, read_only=True, vector_cache=str(folder)) as store:
        coded_budget(store, items, monkeypatch)
        coded_up(store, QUERIES[0], 5, "semantic")
        assert os.path.exists(coded_path(store))
    with PostgresStore(postgres_url, read_only=True, vector_cache=str(folder)) as store:
        coded_budget(store, items, monkeypatch)
        assert found(store, QUERIES[2], 9, "semantic") == expected(
            items, QUERIES[2], 9, "semantic", None
        )
        assert kept_types(store) == [CompactVectors]


def test_no_folder_keeps_none_and_delete_session_removes_the_file(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``vector_cache=off`` no file is named or written; ``delete_session`` removes the session's file from the folder."""
    items = steps(60, 1)
    written(postgres_url, items)
    with open_store(f"{postgres_url}&vector_cache=off") as store:
        assert store.vector_cache is None  # type: ignore[attr-defined]  # a PostgresStore
        assert store.backend.vector_snapshot_path("s", FIELDS) is None
        assert not store.backend.saves_vector_snapshots
    url = cached(postgres_url, tmp_path / "cache")
    path = saved(url, items, monkeypatch)
    assert os.path.exists(path)
    with open_store(url) as store:
        assert store.vector_cache == str(tmp_path / "cache")  # type: ignore[attr-defined]
        assert store.delete_session("s")
    assert not os.path.exists(path)


def test_a_bad_vector_cache_option_is_refused(postgres_url: str) -> None:
    """``vector_cache`` names a folder: an empty one in the URL, or a value not a string, is refused before connecting."""
    with pytest.raises(InvalidStoreURLError, match="vector_cache"):
        open_store(f"{postgres_url}&vector_cache=")
    with pytest.raises(StoreArgumentError, match="vector_cache"):
        PostgresStore(postgres_url, vector_cache=3)  # type: ignore[arg-type]
    with pytest.raises(StoreArgumentError, match="vector_cache"):
        PostgresStore(postgres_url, vector_cache="")


def files_under(folder: Path) -> list[Path]:
    """Return the files under ``folder`` (none where it is missing)."""
    return sorted(path for path in folder.rglob("*") if path.is_file())


def test_by_default_the_file_is_kept_in_the_users_cache_folder(
    postgres_url: str, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the option a handle keeps the file in ``postgres`` of this user's cache folder (``KVMEMORY_CACHE_DIR``), its folders owner-only; a fresh handle's first query loads it."""
    items = steps(70, 7)
    written(postgres_url, items)
    path = Path(saved(postgres_url, items, monkeypatch))
    assert path.is_relative_to(cache_dir / "postgres")
    with PostgresStore(postgres_url) as store:
        assert store.vector_cache == str(cache_dir / "postgres")
    with open_store(f"{postgres_url}&vector_cache=auto") as store:
        assert store.vector_cache == str(cache_dir / "postgres")  # type: ignore[attr-defined]
    if os.name == "posix":
        for folder in (cache_dir / "postgres", path.parent):
            assert folder.stat().st_mode & 0o777 == 0o700
        assert path.stat().st_mode & 0o777 == 0o600
    assert first_loads(postgres_url, items, monkeypatch)


def test_by_default_a_writer_saves_the_file_as_it_closes(
    postgres_url: str, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle that embeds the session and closes without a query saves the coded file in this user's cache folder; a fresh handle's first query loads it, as Memory.search."""
    items = steps(90, 8)
    write_and_close(postgres_url, items, monkeypatch)
    with open_store(postgres_url) as store:
        assert os.path.exists(coded_path(store))
    assert first_loads(postgres_url, items, monkeypatch)


def test_the_cache_folder_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KVMEMORY_CACHE_DIR`` names the cache folder, else an absolute ``XDG_CACHE_HOME`` or ``~/.cache``; no home at all: none."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("KVMEMORY_CACHE_DIR", str(tmp_path / "named"))
    assert vector_cache_folder("auto") == str(tmp_path / "named" / "postgres")
    assert vector_cache_folder("off") is None
    assert vector_cache_folder("./off") == os.path.abspath("off")  # a folder called off
    monkeypatch.delenv("KVMEMORY_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == str(tmp_path / "xdg" / "kvmemory")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == str(tmp_path / "home" / ".cache" / "kvmemory")
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # no home found
    assert cache_root() is None
    assert vector_cache_folder("auto") is None


@pytest.mark.parametrize("off", ["argument", "option"])
def test_none_or_off_keeps_no_file(
    off: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vector_cache=None`` or ``?vector_cache=off``: nothing is written in the cache folder, by queries nor by a writer's close."""
    monkeypatch.setenv("KVMEMORY_CACHE_DIR", str(tmp_path / "cache"))
    items = steps(70, 3)

    def opened() -> Any:
        if off == "argument":
            return PostgresStore(postgres_url, vector_cache=None)
        return open_store(f"{postgres_url}&vector_cache=off")

    with opened() as store:
        coded_budget(store, items, monkeypatch)
        store.append("s", items)
        store.index_embeddings("s", EMBEDDER)
        assert store.vector_cache is None
    closed_saves()
    with opened() as store:
        coded_budget(store, items, monkeypatch)
        assert (
            coded_up(store, QUERIES[0], 5, "semantic")
            == [expected(items, QUERIES[0], 5, "semantic", None)] * 3
        )
    closed_saves()
    assert not (tmp_path / "cache").exists()


class _FullDisk:
    """The ``os`` module, but a file opened for writing takes 100 bytes and then finds the disk full."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def fdopen(fd: int, mode: str) -> Any:
        out = os.fdopen(fd, mode)

        class Full:
            def __enter__(self) -> Full:
                return self

            def __exit__(self, *exc: object) -> None:
                out.close()

            def write(self, data: Any) -> None:
                out.write(bytes(memoryview(data).cast("B")[:100]))
                raise OSError(28, "No space left on device")

        return Full()


@pytest.mark.parametrize("harm", ["a file in the way", "a full disk"])
def test_a_cache_folder_that_cannot_be_written_leaves_queries_right(
    harm: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache folder that cannot be made (a file where a folder should be) or a disk that fills up: writes, a writer's close and queries go on without error, with Memory.search's hits, and no file is left; one VectorCacheWarning, naming the folder and the fix, tells of it (once for the process, over every handle)."""
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    cache = blocked / "cache" if harm == "a file in the way" else tmp_path / "cache"
    monkeypatch.setenv("KVMEMORY_CACHE_DIR", str(cache))
    if harm == "a full disk":
        monkeypatch.setattr(snapshot, "os", _FullDisk())
    items = steps(80, 9)

    def run() -> None:
        write_and_close(postgres_url, items, monkeypatch)
        for _ in range(2):  # a fresh handle each time: none has a file to load
            with coded_handle(postgres_url, items, monkeypatch) as store:
                for query, mode in [(QUERIES[0], "semantic"), (QUERIES[1], "hybrid")] * 2:
                    assert found(store, query, 6, mode) == expected(items, query, 6, mode, None)
                assert kept_types(store) == [CompactVectors]
        closed_saves()

    with pytest.warns(VectorCacheWarning) as told:
        run()
    [warning] = [w for w in told if issubclass(w.category, VectorCacheWarning)]
    text = str(warning.message)
    assert repr(str(cache / "postgres")) in text
    assert "KVMEMORY_CACHE_DIR" in text
    assert "vector_cache='off'" in text
    assert ("Not a directory" if harm == "a file in the way" else "No space left") in text
    assert files_under(tmp_path / "cache") == []


def test_a_writable_cache_folder_gives_no_warning(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that is made and written warns of nothing (warnings are errors here): saves, loads and a writer's close."""
    monkeypatch.setenv("KVMEMORY_CACHE_DIR", str(tmp_path / "cache"))
    items = steps(70, 12)
    write_and_close(postgres_url, items, monkeypatch)
    assert first_loads(postgres_url, items, monkeypatch)
    closed_saves()


def hexes(at: int) -> str:
    """Return a name such as a coded file's (two sha1 digests)."""
    return f"{at:040x}-{at:040x}"


def aged_file(path: Path, size: int, age: float, now: float | None = None) -> Path:
    """Write ``size`` bytes at ``path``, last used ``age`` seconds before ``now`` (the time where ``None``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    at = (time.time() if now is None else now) - age
    os.utime(path, (at, at))
    return path


def test_a_save_past_the_cap_removes_the_files_used_least_recently(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KVMEMORY_CACHE_MAX_BYTES``: a save that passes it removes the other files least recently used first, until they fit; a file larger than the cap alone is not kept, and the queries stay right."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KVMEMORY_CACHE_DIR", str(cache))
    items = steps(70, 10)
    written(f"{postgres_url}&vector_cache=off", items)
    with TemporaryDirectory() as sizing:
        size = os.path.getsize(saved(cached(postgres_url, sizing), items, monkeypatch))
    folder = cache / "postgres"
    other, another = folder / ("a" * 40), folder / ("b" * 40)
    aged_file(other / hexes(1), 1000, 300)
    old = aged_file(other / hexes(2), 1000, 200)
    recent = aged_file(another / hexes(3), 1000, 100)
    foreign = [aged_file(folder / "notes", 10**6, 900), aged_file(other / "notes", 10**6, 900)]
    monkeypatch.setenv("KVMEMORY_CACHE_MAX_BYTES", str(size + 2000))
    path = Path(saved(postgres_url, items, monkeypatch))
    assert files_under(folder) == sorted([old, recent, path, *foreign])
    long_ago = time.time() - 1000
    os.utime(path, (long_ago, long_ago))
    assert first_loads(postgres_url, items, monkeypatch)  # marks it used now
    monkeypatch.setenv("KVMEMORY_CACHE_MAX_BYTES", str(size + 1000))
    new = aged_file(another / hexes(4), 500, 0)
    with open_store(postgres_url) as store:
        store.backend.vector_snapshot_saved(str(new))
    assert files_under(folder) == sorted([new, path, *foreign])
    monkeypatch.setenv("KVMEMORY_CACHE_MAX_BYTES", str(size - 1))
    with open_store(postgres_url) as store:
        store.delete_session("s")
    written(postgres_url, items)
    with coded_handle(postgres_url, items, monkeypatch) as store:
        assert (
            coded_up(store, QUERIES[0], 5, "semantic")
            == [expected(items, QUERIES[0], 5, "semantic", None)] * 3
        )
    closed_saves()
    assert files_under(folder) == sorted(foreign)  # never a file not named as a coded file


@settings(max_examples=40, deadline=None)
@given(
    files=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), max_size=8),
    most=st.integers(0, 400),
    saved_at=st.integers(0, 8),
)
def test_trim_keeps_the_files_used_most_recently_within_the_cap(
    files: list[tuple[int, int]], most: int, saved_at: int
) -> None:
    """``trim_folder`` removes files oldest first (the one just saved last) until the rest fit, and no more: as a plain model."""
    with TemporaryDirectory() as root:
        paths, now = [], time.time()
        ages = [age + at / 1000 for at, (_, age) in enumerate(files)]  # no two alike
        for at, (size, _) in enumerate(files):
            database = Path(root, f"{at % 2:040x}")
            paths.append(aged_file(database / hexes(at), size, ages[at], now))
        # Neither a save's file not renamed yet nor a file not named as coded ones is touched.
        others = [
            aged_file(Path(root, f"{0:040x}", ".snapshot-being-saved"), 10_000, 5000, now),
            aged_file(Path(root, f"{0:040x}", "notes"), 10_000, 5000, now),
            aged_file(Path(root, "elsewhere", hexes(99)), 10_000, 5000, now),
        ]
        saved_path = str(paths[saved_at]) if saved_at < len(paths) else ""
        trim_folder(root, most, saved_path)
        order = sorted(range(len(files)), key=lambda at: (str(paths[at]) == saved_path, -ages[at]))
        kept = set(range(len(files)))
        total = sum(size for size, _ in files)
        for at in order:
            if total <= most:
                break
            kept.discard(at)
            total -= files[at][0]
        assert {at for at, path in enumerate(paths) if path.exists()} == kept
        assert all(path.exists() for path in others)


def test_a_file_that_cannot_be_removed_stays_and_the_next_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the trim cannot remove (in use on Windows, not ours) stays, and the next least recently used goes in its place."""
    database = tmp_path / ("c" * 40)
    held, gone, newer = (aged_file(database / hexes(at), 100, 30 - at) for at in range(3))
    unlink = os.unlink

    def refused(path: Any) -> None:
        if Path(path) == held:
            raise PermissionError(13, "in use", str(path))
        unlink(path)

    monkeypatch.setattr(os, "unlink", refused)
    trim_folder(str(tmp_path), 200, str(newer))
    assert files_under(tmp_path) == sorted([held, newer])
    assert not gone.exists()


def test_the_cache_cap_is_an_option_too(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vector_cache_max_bytes`` (an argument, a URL option) caps the folder as ``KVMEMORY_CACHE_MAX_BYTES`` does, and wins over it: 0 keeps no file, a large cap keeps the one saved."""
    items = steps(70, 13)
    written(f"{postgres_url}&vector_cache=off", items)
    monkeypatch.setenv("KVMEMORY_CACHE_MAX_BYTES", "0")
    kept = tmp_path / "kept"
    with PostgresStore(postgres_url, vector_cache=str(kept), vector_cache_max_bytes=1 << 30) as one:
        assert one.backend.vector_cache_bytes == 1 << 30
    path = Path(
        saved(f"{cached(postgres_url, kept)}&vector_cache_max_bytes={1 << 30}", items, monkeypatch)
    )
    assert files_under(kept) == [path]
    assert first_loads(
        f"{cached(postgres_url, kept)}&vector_cache_max_bytes=1073741824", items, monkeypatch
    )
    monkeypatch.setenv("KVMEMORY_CACHE_MAX_BYTES", str(1 << 30))
    none = tmp_path / "none"
    saved(f"{cached(postgres_url, none)}&vector_cache_max_bytes=0", items, monkeypatch)
    closed_saves()
    assert files_under(none) == []


def test_a_bad_cache_cap_option_is_refused(postgres_url: str) -> None:
    """``vector_cache_max_bytes`` not a whole number of bytes >= 0 (or empty in the URL) is refused before connecting, the option named."""
    for value in ("", "4GB", "-1"):
        with pytest.raises(InvalidStoreURLError, match="vector_cache_max_bytes"):
            open_store(f"{postgres_url}&vector_cache_max_bytes={value}")
    for bad in (-1, True, 1.5, "4096"):
        with pytest.raises(StoreArgumentError, match=f"vector_cache_max_bytes .*got {bad!r}"):
            PostgresStore(postgres_url, vector_cache_max_bytes=bad)  # type: ignore[arg-type]


def test_a_bad_cache_cap_is_refused(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``KVMEMORY_CACHE_MAX_BYTES`` not a whole number of bytes: the store is refused before connecting, the variable named."""
    monkeypatch.setenv("KVMEMORY_CACHE_MAX_BYTES", "4GB")
    with pytest.raises(StoreArgumentError, match="KVMEMORY_CACHE_MAX_BYTES='4GB'"):
        open_store(postgres_url)
