"""A plain ``Memory`` read by ``Store.read_memory`` asks the store's keyword ranking while both are unchanged (``_search.handoff``, ``SearchIndex.take_ranking``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_checks import ITEMS, QUERY, TEXT, built, hits

from agents.memory import Memory, MemoryItem
from agents.memory.search import SearchIndex, search_index
from agents.memory.search import _index as index_module
from agents.memory.stores import JSONLStore, PostgresStore, Store, open_memory, open_store
from agents.memory.stores._jsonl import keywords as keywords_module
from agents.memory.stores._jsonl.keyword_index import KeywordIndex


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Count each answer of ``Store.ranking_at`` (``None`` included), the terms SQLite keeps not taken (as without numpy, or from PostgreSQL): the store's ranking answers."""
    monkeypatch.setattr(SearchIndex, "take_terms", _untaken)
    answers: list[object] = []
    ranking_at = Store.ranking_at

    def counted(self: Store, *args: Any, **kwargs: Any) -> Any:
        answer = ranking_at(self, *args, **kwargs)
        answers.append(answer)
        return answer

    monkeypatch.setattr(Store, "ranking_at", counted)
    return answers


@pytest.fixture(params=["sqlite", "jsonl"])
def session(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    """A SQLite or JSONL store holding session ``s`` of 60 rows, and those rows."""
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(60)]
    url = f"sqlite://{tmp_path}/store.db" if request.param == "sqlite" else f"jsonl://{tmp_path}/s"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows])
    return url, rows


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ITEMS, st.lists(QUERY, min_size=1, max_size=4), st.sampled_from(["sqlite", "memory", "jsonl"])
)
def test_a_memory_read_ranks_by_the_store_as_one_built_from_its_items(
    asked: list[object], data: list[dict[str, Any]], queries: list[str], scheme: str
) -> None:
    """The store answers the keyword queries of a memory it read, with the hits, floats and fields of a memory built from the same items."""
    rows = [{"step": i, **row} for i, row in enumerate(data)]
    asked.clear()
    with tempfile.TemporaryDirectory() as folder:
        url = {
            "sqlite": f"sqlite://{folder}/s.db",
            "memory": f"memory://handoff-{id(rows)}",
            "jsonl": f"jsonl://{folder}/s",
        }[scheme]
        with open_store(url) as store:
            store.append("s", [MemoryItem(**row) for row in rows])
            memory = store.read_memory("s")
            model = built(rows)
            for query in queries:
                if not any(word.isalnum() for word in query.split()):
                    continue
                assert hits(memory, query) == hits(model, query)
            assert asked
            assert asked[0] is not None
            store.delete_session("s")


WRITES = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "delete", "field", "search", "compact", "reopen", "unlink", "damage"]
        ),
        st.integers(0, 40),
        TEXT,
    ),
    max_size=12,
)


def _write(store: Store, rows: list[dict[str, Any]], write: tuple[str, int, str]) -> None:
    """Apply one write to session ``s`` of a JSONL store and to ``rows``, its model."""
    what, at, text = write
    if what == "add":
        step = max((row["step"] for row in rows), default=-1) + 1
        rows.append({"step": step, "a": text})
        store.append("s", [MemoryItem(**rows[-1])])
    elif what == "delete" and rows:
        store.delete_steps("s", [rows.pop(at % len(rows))["step"]])
    elif what == "field" and rows:
        rows[at % len(rows)]["b"] = text
        with open_memory(store, "s") as stored:
            stored.content[at % len(rows)].set_value("b", text)
    elif what == "search":
        store.search("s", "a b 1")  # builds, follows and saves the keyword file
    elif what == "compact":
        assert isinstance(store, JSONLStore)
        store.compact("s")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ITEMS,
    WRITES,
    st.lists(QUERY, min_size=1, max_size=3),
    st.sampled_from(["none", "unlink", "damage", "append", "compact"]),
)
def test_a_memory_read_from_jsonl_ranks_as_its_items_whatever_its_keyword_file(
    asked: list[object],
    data: list[dict[str, Any]],
    writes: list[tuple[str, int, str]],
    queries: list[str],
    after: str,
) -> None:
    """After appends, deletes, field changes and compactions, with the keyword file saved stale, missing or damaged, a memory a new JSONL handle reads ranks by the store as one built from the rows.

    Also when, after the read (which loads a current keyword file), the
    file is removed or damaged in place, or a second handle appends to the
    session or compacts it: the memory ranks as its items, asking the store
    unless the session changed.
    """
    rows = [{"step": i, **row} for i, row in enumerate(data)]
    with tempfile.TemporaryDirectory() as folder:
        url = f"jsonl://{folder}/s"
        keywords = Path(folder) / "s" / "s.keywords"
        store = open_store(url)
        try:
            store.append("s", [MemoryItem(**row) for row in rows])
            for write in writes:
                if write[0] == "reopen":
                    store.close()
                    store = open_store(url)
                elif write[0] == "unlink":
                    keywords.unlink(missing_ok=True)
                elif write[0] == "damage" and keywords.exists():
                    blob = bytearray(keywords.read_bytes())
                    blob[len(blob) // 2] ^= 0x55
                    keywords.write_bytes(bytes(blob))
                else:
                    _write(store, rows, write)
        finally:
            store.close()
        asked.clear()
        with open_store(url) as reader:
            memory = reader.read_memory("s")
            model = built(rows)
            _after_the_read(url, keywords, after)
            for query in queries:
                if any(word.isalnum() for word in query.split()):
                    assert hits(memory, query) == hits(model, query)
            if rows:  # every query holds a word: the store was asked, and answered
                assert asked
                assert (asked[0] is None) == (after in ("append", "compact"))


def _after_the_read(url: str, keywords: Path, after: str) -> None:
    """Change session ``s``'s keyword file in place, or the session by a second handle (``after``)."""
    if after == "unlink":
        keywords.unlink(missing_ok=True)
    elif after == "damage" and keywords.exists():
        blob = bytearray(keywords.read_bytes())
        for at in range(len(blob) // 3, len(blob), max(1, len(blob) // 7)):
            blob[at] ^= 0x55
        keywords.write_bytes(bytes(blob))  # the same file, rewritten: the postings no longer check
    elif after in ("append", "compact"):
        with open_store(url) as other:
            if after == "append":
                other.append("s", [MemoryItem(step=10_000, a="a b 1 c")])
            else:
                assert isinstance(other, JSONLStore)
                other.compact("s")  # written anew (a new generation), deletions or none


@pytest.mark.parametrize("change", ["add", "delete", "field"])
def test_a_change_of_the_memory_drops_the_store_ranking(
    asked: list[object], session: tuple[str, list[dict[str, Any]]], change: str
) -> None:
    """After an add, a delete or a field change of the memory the store is not asked, and the hits are those of the changed items."""
    url, rows = session
    with open_store(url) as store:
        memory = store.read_memory("s")
        model = Memory([MemoryItem(**row) for row in rows])
        assert hits(memory, "report 3") == hits(model, "report 3")
        assert len(asked) == 1
        for target in (memory, model):
            if change == "add":
                target.add_memory_item(MemoryItem(step=60, thought="report 3 report 3"))
            elif change == "delete":
                target.delete_memory_item(3)
            else:
                target.content[10].set_value("thought", "report 3 report 3")
        assert hits(memory, "report 3") == hits(model, "report 3")
        assert len(asked) == 1


def _untaken(index: SearchIndex, items: object, terms: object) -> bool:
    """Take no kept terms."""
    return False


def _unbuilt(index: SearchIndex, **options: Any) -> None:
    """Start no build ahead."""


def _write_another_way(url: str, how: str) -> None:
    """Append rows holding "report 3" (far down the ranking, but counted in its statistics) by a second handle or process."""
    long = " ".join(["filler"] * 60)
    fields = [{"step": 100 + i, "thought": f"report 3 {long}"} for i in range(5)]
    if how == "handle":
        with open_store(url) as other:
            other.append("s", [MemoryItem(**row) for row in fields])
        return
    code = (
        "import sys\n"
        "from agents.memory import MemoryItem\n"
        "from agents.memory.stores import open_store\n"
        f"with open_store({url!r}) as store:\n"
        f"    store.append('s', [MemoryItem(**row) for row in {fields!r}])\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


@pytest.mark.parametrize("how", ["handle", "process", "handle, after a first query"])
def test_a_write_to_the_session_elsewhere_drops_the_store_ranking(
    asked: list[object],
    session: tuple[str, list[dict[str, Any]]],
    how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows another handle or process appended to the session change the store's statistics: the memory ranks its own items, as one built from them."""
    url, rows = session
    model = built(rows)
    monkeypatch.setattr(SearchIndex, "build_ahead", _unbuilt)  # the store answers till the write
    with open_store(url) as store:
        memory = store.read_memory("s")
        if how.endswith("first query"):
            assert hits(memory, "window 2") == hits(model, "window 2")
            assert asked[-1] is not None
        _write_another_way(url, how.split(",")[0])
        assert hits(memory, "report 3", 8) == hits(model, "report 3", 8)
        assert asked[-1] is None  # asked, and it could not vouch for the rows read
        count = len(asked)
        assert hits(memory, "window 1") == hits(model, "window 1")
        assert len(asked) == count  # dropped for good


def test_a_closed_store_is_not_asked(session: tuple[str, list[dict[str, Any]]]) -> None:
    """A memory read from a store closed since ranks its own items, as one built from them."""
    url, rows = session
    with open_store(url) as store:
        memory = store.read_memory("s")
    assert hits(memory, "report 3 window") == hits(built(rows), "report 3 window")


def test_queries_from_threads_rank_alike(
    asked: list[object], session: tuple[str, list[dict[str, Any]]]
) -> None:
    """Queries from several threads, while the store answers and the build runs, each give the hits of a memory built from the items."""
    url, rows = session
    model = built(rows)
    queries = ["report 3", "window 1", "opened report 5 window", "report 0 window 2"]
    expected = {query: hits(model, query) for query in queries}
    found: list[bool] = []
    with open_store(url) as store:
        memory = store.read_memory("s")

        def ask() -> None:
            found.extend(hits(memory, query) == expected[query] for query in queries * 5)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert found == [True] * 80
    assert asked
    assert asked[0] is not None


def test_the_terms_sqlite_keeps_answer_before_its_ranking(
    session: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kept terms are scanned (SQLite, numpy), the first query reads them, not the store's ranking (which costs more at 100,000 steps)."""
    pytest.importorskip("numpy")
    monkeypatch.setattr(index_module, "_SCAN_ITEMS", 1)
    url, rows = session
    if not url.startswith("sqlite"):
        pytest.skip("only SQLite keeps each row's terms")

    def unasked(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the store's ranking was asked")

    with open_store(url) as store:
        memory = store.read_memory("s")
        monkeypatch.setattr(Store, "ranking_at", unasked)
        assert hits(memory, "report 3 window") == hits(built(rows), "report 3 window")


def _same_length_update(url: str) -> None:
    """Change one item's words by a second handle, keeping their number (the session's counts stay)."""
    with open_store(url) as other, open_memory(other, "s") as stored:
        stored.content[10].set_value("thought", "opened report 3 window 3")


@pytest.mark.postgres
def test_postgres_hands_its_ranking_till_a_second_handle_writes(
    asked: list[object], postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory read from PostgreSQL ranks by the store, as one built from its items, till a second handle's update that keeps the counts: then by itself."""
    monkeypatch.setattr(SearchIndex, "build_ahead", _unbuilt)
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(60)]
    with open_store(postgres_url) as store:
        store.append("s", [MemoryItem(**row) for row in rows])
        memory = store.read_memory("s")
        model = built(rows)
        assert hits(memory, "report 3 window") == hits(model, "report 3 window")
        assert asked[-1] is not None
        _same_length_update(postgres_url)
        assert hits(memory, "report 3 window 2") == hits(model, "report 3 window 2")
        assert asked[-1] is None
        _write_another_way(postgres_url, "process")  # after the drop: ranked in RAM all the same
        assert hits(memory, "report 3", 8) == hits(model, "report 3", 8)


def test_a_second_handles_update_that_keeps_the_counts_drops_the_store_ranking(
    asked: list[object],
    session: tuple[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An update by a second handle that keeps the row's number of terms drops the store's ranking: the hits are the memory's own."""
    monkeypatch.setattr(SearchIndex, "build_ahead", _unbuilt)
    url, rows = session
    model = built(rows)
    with open_store(url) as store:
        memory = store.read_memory("s")
        assert hits(memory, "window 2") == hits(model, "window 2")
        _same_length_update(url)
        assert hits(memory, "report 3 window 2") == hits(model, "report 3 window 2")
        assert asked[-1] is None


@pytest.mark.postgres
def test_v9_postgres_tables_tell_no_version_read_only_and_one_once_migrated(
    postgres_url: str,
) -> None:
    """Tables of version 9 (an update keeping its counts wrote no session row) opened read-only give no keyword_version; opened writable they are migrated, and such an update then changes it."""
    psycopg = pytest.importorskip("psycopg")
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(60)]
    with open_store(postgres_url) as store:
        store.append("s", [MemoryItem(**row) for row in rows])
    with psycopg.connect(postgres_url, autocommit=True) as con:
        old = con.execute(
            "SELECT pg_get_functiondef('kvmemory_count_updated'::regproc)"
        ).fetchone()[0]
        con.execute(
            old.replace(
                "WHERE s.session_id = d.session_id",
                "WHERE s.session_id = d.session_id AND d.t <> 0",
            )
        )
        con.execute("UPDATE kvmemory_schema SET version = 9")
    with open_store(postgres_url, read_only=True) as reader:
        assert reader.keyword_version("s") is None
        memory = reader.read_memory("s")
        assert hits(memory, "report 3 window") == hits(built(rows), "report 3 window")
    with open_store(postgres_url) as store:
        before = store.keyword_version("s")
        _same_length_update(postgres_url)
        assert store.keyword_version("s") != before
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]


def _jsonl_session(tmp_path: Path, *, saved: bool) -> tuple[str, Path, list[dict[str, Any]]]:
    """A JSONL store holding session ``s`` of 60 rows (its keyword file saved by a search, if ``saved``): url, keyword file, rows."""
    rows = [{"step": i, "thought": f"opened report {i % 7} window {i % 3}"} for i in range(60)]
    url = f"jsonl://{tmp_path}/s"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**row) for row in rows])
        if saved:
            store.search("s", "report")  # builds the keyword index and saves its file
    keywords = tmp_path / "s" / "s.keywords"
    assert keywords.exists() == saved
    return url, keywords, rows


def _no_build(*args: object) -> None:
    raise AssertionError("the keyword index was built")


def _no_follow(*args: object) -> None:
    raise AssertionError("the keyword index followed the log")


def test_a_memory_read_from_jsonl_takes_its_current_keyword_file_with_the_read(
    asked: list[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_memory`` loads a current ``<session>.keywords``: the first query reads only postings, even with the file gone since (it builds nothing)."""
    url, keywords, rows = _jsonl_session(tmp_path, saved=True)
    monkeypatch.setattr(SearchIndex, "build_ahead", _unbuilt)  # the store answers every query
    with open_store(url) as store:
        memory = store.read_memory("s")
        keywords.unlink()  # the index was loaded (and holds the file open): not needed again
        monkeypatch.setattr(keywords_module, "build", _no_build)
        monkeypatch.setattr(KeywordIndex, "follow", _no_follow)
        model = built(rows)
        for query in ("report 3", "window 1 opened", "report 5 window"):
            assert hits(memory, query) == hits(model, query)
        assert len(asked) == 3
        assert all(answer is not None for answer in asked)
    assert not keywords.exists()  # nothing was built, so nothing saved


@pytest.mark.parametrize("keyword_file", ["missing", "damaged", "stale", "another log"])
def test_read_memory_never_builds_or_follows_a_jsonl_keyword_index(
    asked: list[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyword_file: str
) -> None:
    """With the keyword file missing, damaged, covering part of the log or made for another log, ``read_memory`` neither builds nor follows an index (the first query does), and the memory ranks as its items."""
    url, keywords, rows = _jsonl_session(tmp_path, saved=keyword_file != "missing")
    if keyword_file == "damaged":
        blob = bytearray(keywords.read_bytes())
        blob[len(blob) // 2] ^= 0x55
        keywords.write_bytes(bytes(blob))
    elif keyword_file in ("stale", "another log"):
        with open_store(url) as other:  # appends without a search: the file is not saved again
            more = [{"step": 60 + i, "thought": f"report {i} filed"} for i in range(300)]
            other.append("s", [MemoryItem(**row) for row in more])
            rows.extend(more)
            if keyword_file == "another log":
                assert isinstance(other, JSONLStore)
                other.delete_steps("s", [0])
                other.compact("s")  # a new log: the file names the old one
                rows.pop(0)
    with open_store(url) as store:
        with monkeypatch.context() as patched:
            patched.setattr(keywords_module, "build", _no_build)
            patched.setattr(KeywordIndex, "follow", _no_follow)
            memory = store.read_memory("s")
        model = built(rows)
        for query in ("report 3", "window 1 opened", "filed report 7"):
            assert hits(memory, query) == hits(model, query)
        assert asked
        assert all(answer is not None for answer in asked)


def test_the_first_query_finishes_before_the_build_it_starts_runs(
    asked: list[object],
    session: tuple[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The build ahead a first query starts waits for that query to return: the query's time is not the build's (with a switch interval too long for the scheduler to hand the interpreter back)."""
    url, rows = session
    returned: list[bool] = []
    seen: list[bool] = []
    filed = index_module.BuiltPostings

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(bool(returned))
        return filed(*args, **kwargs)

    monkeypatch.setattr(index_module, "BuiltPostings", watched)
    with open_store(url) as store:
        memory = store.read_memory("s")
        model = Memory([MemoryItem(**row) for row in rows])
        interval = sys.getswitchinterval()
        sys.setswitchinterval(30.0)
        try:
            found = hits(memory, "report 3")
            returned.append(True)
            search_index(memory).build_ahead(wait=True)
        finally:
            sys.setswitchinterval(interval)
        assert found == hits(model, "report 3")
        assert asked
        assert asked[0] is not None
        assert seen == [True]
