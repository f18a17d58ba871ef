"""Foreign data at the edges: hostile files, URLs, contexts and arguments get named errors and change nothing.

Covers the SQLite file checks at open, the search ``k`` bound on every store,
store URL options, and the context -> session id mapping of conversations.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import (
    Conversation,
    CorruptSessionError,
    CorruptStoreError,
    InvalidQueryError,
    InvalidSessionIdError,
    InvalidStoreURLError,
    Memory,
    MemoryItem,
    context_session_id,
)
from agents.memory.stores import SESSION_ID_MAX_LENGTH, open_memory, open_store

ROOT = Path(__file__).resolve().parent.parent


def _store_with_rows(path: Path, n: int = 40) -> bytes:
    """Write a SQLite store of ``n`` items, close it, and return the file's bytes."""
    with open_memory(f"sqlite:///{path}", "s") as memory:
        for step in range(n):
            memory.add_memory_item(MemoryItem(step=step, thought="hello world " * 20))
    assert not Path(f"{path}-wal").exists()
    return path.read_bytes()


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f"{path.name}-"))


# -- search k -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2**63, 2**64 + 5, 10**400])
def test_search_k_beyond_64_bits_is_named_on_every_store(store_url: str, k: int) -> None:
    """search(sid, q, k) with k past 2**63 - 1 raises InvalidQueryError naming k, on every store and in Memory."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1, thought="hello world"))
        store = memory.store
        with pytest.raises(
            InvalidQueryError,
            match=r"k must be at most 2\*\*63 - 1 \(how many hits\), got an int of \d+ bits",
        ):
            store.search("s", "hello", k=k)
        with pytest.raises(
            InvalidQueryError,
            match=r"k must be at most 2\*\*63 - 1 \(how many hits\), got an int of \d+ bits",
        ):
            store.ranking("s", "hello", k=k)
        with pytest.raises(InvalidQueryError, match=r"k must be at most 2\*\*63 - 1"):
            Memory(list(memory)).search("hello", k=k)
        assert [hit.item["step"] for hit in store.search("s", "hello", k=2**63 - 1)] == [1]
        with pytest.raises(
            InvalidQueryError, match=r"k must be an int >= 1 \(how many hits\), got "
        ):
            store.search("s", "hello", k=-k)


# -- SQLite files ---------------------------------------------------------------------------------


def _break_schema(path: Path, how: str) -> None:
    con = sqlite3.connect(path)
    try:
        if how == "extra table name":
            con.execute("CREATE TABLE zz(a)")
        con.execute("PRAGMA writable_schema=ON")
        if how == "table name":
            con.execute(
                "UPDATE sqlite_master SET name = CAST(X'6BFF' AS TEXT) WHERE name = 'kvmemory_sessions'"
            )
        elif how == "sql text":
            con.execute(
                "UPDATE sqlite_master SET sql = sql || CAST(X'202D2DFF' AS TEXT) "
                "WHERE name = 'kvmemory_sessions'"
            )
        else:
            con.execute(
                "UPDATE sqlite_master SET name = CAST(X'7AFF' AS TEXT), "
                "tbl_name = CAST(X'7AFF' AS TEXT) WHERE name = 'zz'"
            )
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize("how", ["table name", "sql text", "extra table name"])
@pytest.mark.parametrize("read_only", [False, True])
def test_schema_text_that_is_not_utf8_is_a_corrupt_store(
    tmp_path: Path, how: str, read_only: bool
) -> None:
    """A SQLite store whose schema holds invalid UTF-8 raises CorruptStoreError naming the file; its bytes stay the same."""
    path = tmp_path / "a.db"
    _store_with_rows(path, 3)
    _break_schema(path, how)
    before = path.read_bytes()
    with pytest.raises(CorruptStoreError, match=r"a\.db' is damaged: its schema .*not UTF-8"):
        open_store(str(path), read_only=read_only)
    assert path.read_bytes() == before
    assert _leftovers(path) == []


def test_cli_sessions_on_a_schema_that_is_not_utf8_prints_no_traceback(tmp_path: Path) -> None:
    """kvmemory sessions FILE on such a store prints one error line and exits 1, without a traceback."""
    path = tmp_path / "a.db"
    _store_with_rows(path, 3)
    _break_schema(path, "table name")
    before = path.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "kvmemory", "sessions", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("kvmemory: error: SQLite file")
    assert "not UTF-8" in done.stderr
    assert path.read_bytes() == before


@pytest.mark.parametrize("column", ["session_id", "step_key"])
def test_row_text_that_is_not_utf8_is_a_corrupt_store(tmp_path: Path, column: str) -> None:
    """A session row whose text is not UTF-8 raises CorruptStoreError naming the store, not a bare StoreError."""
    path = tmp_path / "a.db"
    _store_with_rows(path, 2)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE kvmemory_sessions SET {column} = CAST(X'73FF' AS TEXT)")
    con.commit()
    con.close()
    before = path.read_bytes()
    read = (lambda s: s.sessions()) if column == "session_id" else (lambda s: open_memory(s, "s"))
    store = open_store(f"sqlite:///{path}")
    with pytest.raises(CorruptStoreError, match=r"a\.db': the database is damaged .*UTF-8"):
        read(store)
    store.close()
    assert path.read_bytes() == before


@pytest.mark.parametrize("read_only", [False, True])
def test_a_file_cut_short_is_refused_before_anything_is_written(
    tmp_path: Path, read_only: bool
) -> None:
    """Every cut of 1 to 4095 bytes off a SQLite store raises CorruptStoreError and leaves the file as it was."""
    data = _store_with_rows(tmp_path / "whole.db")
    path = tmp_path / "cut.db"
    for cut in range(1, 4096, 13 if read_only else 1):
        path.write_bytes(data[:-cut])
        with pytest.raises(CorruptStoreError, match=r"not a whole number of its 4096-byte pages"):
            open_memory(open_store(f"sqlite:///{path}", read_only=read_only), "s")
        assert path.read_bytes() == data[:-cut], cut
        assert _leftovers(path) == [], cut


@pytest.mark.parametrize("start", [b"SQLite format 3\x00", b"x"])
def test_a_file_shorter_than_an_sqlite_header_is_left_alone(tmp_path: Path, start: bytes) -> None:
    """A file of 1 to 99 bytes (SQLite took a 1-byte file for an empty database and wrote a store over it) raises CorruptStoreError, unchanged."""
    path = tmp_path / "short.db"
    for size in range(1, 100):
        data = (start * 100)[:size]
        path.write_bytes(data)
        with pytest.raises(
            CorruptStoreError, match=rf"is {size} bytes long, shorter than an SQLite header"
        ):
            open_store(f"sqlite:///{path}")
        assert path.read_bytes() == data
        assert _leftovers(path) == []


def test_a_store_of_whole_pages_still_opens(tmp_path: Path) -> None:
    """The page check refuses only cut files: a whole store, an empty file and a new path open."""
    path = tmp_path / "whole.db"
    _store_with_rows(path, 5)
    with open_memory(f"sqlite:///{path}", "s") as memory:
        assert len(memory) == 5
    (tmp_path / "empty.db").write_bytes(b"")
    with open_memory(f"sqlite:///{tmp_path / 'empty.db'}", "s") as memory:
        assert len(memory) == 0


# -- store URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e309", "inf", "-inf", "nan", "Infinity"])
def test_timeout_that_is_not_finite_is_refused(tmp_path: Path, value: str) -> None:
    """?timeout=1e309 (infinity) and other non-finite values raise InvalidStoreURLError and create no file."""
    path = tmp_path / "a.db"
    with pytest.raises(InvalidStoreURLError, match=rf"timeout={value!r}.*finite number of seconds"):
        open_store(f"sqlite:///{path}?timeout={value}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("postgresql://kvmemory@127.0.0.1:1/postgres?foo=bar", "foo"),
        (
            "postgresql://kvmemory:s3cret@127.0.0.1:1/postgres?connect_timeout=1&sslmod=off",
            "sslmod",
        ),
        ("postgres://127.0.0.1:1/postgres?pgvector=off&bogus_option=1", "bogus_option"),
    ],
)
def test_unknown_libpq_option_is_named_not_unreachable(url: str, name: str) -> None:
    """A PostgreSQL URL with an option libpq does not know raises InvalidStoreURLError naming it, before any connection."""
    pytest.importorskip("psycopg")
    with pytest.raises(
        InvalidStoreURLError, match=rf'cannot be parsed by libpq: .*"{name}"'
    ) as info:
        open_store(url)
    assert "s3cret" not in str(info.value)


# -- contexts ----------------------------------------------------------------------------------------


def test_a_surrogate_pair_does_not_share_the_conversation_of_its_character() -> None:
    """{"u": "\\U0001F600"} has an id; {"u": "\\ud83d\\ude00"} (two lone surrogates) is refused, not mapped to it."""
    assert context_session_id({"u": "\U0001f600"}).startswith("chat-")
    with pytest.raises(
        InvalidSessionIdError, match=r"Context key 'u' has a value holding a lone surrogate"
    ):
        context_session_id({"u": "\ud83d\ude00"})
    with pytest.raises(InvalidSessionIdError, match=r"holds a lone surrogate"):
        context_session_id({"\ud83d": 1})


def _as_surrogates(text: str) -> str:
    """Write each character beyond U+FFFF as the two UTF-16 surrogates that stand for it."""
    return "".join(
        chr(0xD800 + ((ord(c) - 0x10000) >> 10)) + chr(0xDC00 + ((ord(c) - 0x10000) & 0x3FF))
        if ord(c) > 0xFFFF
        else c
        for c in text
    )


# Hypothesis never draws surrogates from st.characters(): add them, lone, on purpose.
_ANY_CHARACTER = st.characters(min_codepoint=0, max_codepoint=0x10FFFF) | st.integers(
    0xD800, 0xDFFF
).map(chr)


@given(st.text(_ANY_CHARACTER, max_size=12), st.text(_ANY_CHARACTER, max_size=12))
def test_two_accepted_strings_never_share_an_id(a: str, b: str) -> None:
    """Over arbitrary strings (lone surrogates included): a string is accepted iff it is UTF-8 text, and accepted strings map to distinct ids."""
    ids = {}
    for text in {a, b, _as_surrogates(a), _as_surrogates(b)}:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            with pytest.raises(InvalidSessionIdError):
                context_session_id({"u": text})
            with pytest.raises(InvalidSessionIdError):
                context_session_id({text: "v"})
        else:
            ids[text] = context_session_id({"u": text})
    assert len(set(ids.values())) == len(ids)


def test_an_int_of_more_than_4300_digits_is_named() -> None:
    """context_session_id({"a": 10**5000}) raises InvalidSessionIdError naming the key; 4300 digits are accepted."""
    with pytest.raises(
        InvalidSessionIdError, match=r"Context key 'a' has an int of more than 4300 digits"
    ):
        context_session_id({"a": 10**5000})
    with pytest.raises(InvalidSessionIdError, match=r"more than 4300 digits"):
        context_session_id({"a": -(10**4300)})
    assert context_session_id({"a": 10**4300 - 1}).startswith("chat-")


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(length=st.integers(1, 60), keep_steps=st.booleans())
def test_every_documented_prefix_works_with_and_without_kept_steps(
    tmp_path: Path, length: int, keep_steps: bool
) -> None:
    """Prefixes of 1 to 60 characters open, with keep_steps too: both ids within the limit, distinct, stable."""
    url = f"sqlite:///{tmp_path / f'c{length}-{keep_steps}.db'}"
    prefix = "p" * length
    with Conversation.for_context(url, {"a": 1}, prefix=prefix, keep_steps=keep_steps) as chat:
        chat.add_user("hi")
        chat.scratchpad.add_memory_item(MemoryItem(step=1, action="search"))
        history_id = chat.history.session_id
        assert history_id == context_session_id({"a": 1}, prefix=prefix)
        if keep_steps:
            steps_id = chat.scratchpad.session_id
            assert steps_id.startswith(history_id[: len(prefix) + 62])
            assert steps_id.endswith(".steps")
            assert len(steps_id) <= SESSION_ID_MAX_LENGTH
    with Conversation.for_context(url, {"a": 1}, prefix=prefix, keep_steps=keep_steps) as chat:
        assert chat.history.session_id == history_id
        assert len(chat.scratchpad) == (1 if keep_steps else 0)


@pytest.mark.parametrize("prefix", ["p" * 61, "bad prefix", ".dot", ""])
@pytest.mark.parametrize("keep_steps", [False, True])
def test_a_refused_prefix_creates_no_store(tmp_path: Path, prefix: str, keep_steps: bool) -> None:
    """A prefix beyond the documented limits raises InvalidSessionIdError before the store file is created."""
    path = tmp_path / "chats.db"
    with pytest.raises(InvalidSessionIdError):
        Conversation.for_context(str(path), {"a": 1}, prefix=prefix, keep_steps=keep_steps)
    assert list(tmp_path.iterdir()) == []


def test_rows_orjson_refuses_are_read_by_the_codec_or_named(tmp_path: Path) -> None:
    """A row only json reads (NaN) loads; b'\\x000' (UTF-16 to json, an error to orjson) raises a library error, not orjson's."""
    path = tmp_path / "a.db"
    with open_memory(f"sqlite:///{path}", "s") as memory:
        memory.add_memory_items([MemoryItem(step=1), MemoryItem(step=2)])
    con = sqlite3.connect(path)
    con.execute("UPDATE kvmemory_items SET data = ? WHERE seq = 2", (b'{"step": 2, "x": NaN}',))
    con.commit()
    with open_memory(f"sqlite:///{path}", "s") as memory:
        assert memory[1]["step"] == 2
        assert memory[1]["x"] != memory[1]["x"]  # NaN
    con.execute("UPDATE kvmemory_items SET data = ? WHERE seq = 2", (b"\x000",))
    con.commit()
    con.close()
    with pytest.raises(CorruptSessionError, match=r"item 2 of session 's'.* is a JSON int"):
        open_memory(f"sqlite:///{path}", "s")
