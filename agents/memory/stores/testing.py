"""The store contract suite: run it on a backend to check it means what every kvmemory store means.

Every store kvmemory ships runs this suite in the project's own tests. To
check a backend of your own, subclass :class:`StoreContract` in a test module
and give it a ``make_store`` fixture: a function that opens a new handle on
one fresh store each time it is called (the same store for every call within
a test, so that tests can close and reopen it, or hold two handles at once)::

    import pytest
    from agents.memory.stores.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda read_only=False: MyStore(tmp_path / "db", read_only=read_only)

Then run ``pytest``. A backend that keeps vectors (``Backend.keeps_vectors``)
subclasses :class:`VectorStoreContract` instead, which adds the tests of
vectors stored with the items. :class:`AsyncStoreContract` runs the same
tests through the async API (``open_async_store``), from a
``make_async_store`` fixture; :class:`BackendContract` checks the backend's
operations one by one, from a ``make_backend`` fixture.

The module needs pytest (and uses numpy when it is installed; the semantic
search tests skip without it); importing :mod:`agents.memory` or
:mod:`agents.memory.stores` does not import it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import enum
import math
import pathlib
import random
import threading
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Hashable,
    Iterator,
    Sequence,
)
from decimal import Decimal
from typing import Any, Final, Protocol, TypeVar

import pytest

from agents.memory._item import MemoryItem, field
from agents.memory._text import Tokenizer, item_texts
from agents.memory._vectors import EmbedParts, SearchMode
from agents.memory.exceptions import (
    EmbedderMismatchError,
    EmbeddingError,
    InvalidQueryError,
    InvalidSessionIdError,
    SerializationError,
    StoreArgumentError,
    StoreError,
)
from agents.memory.memory import Memory
from agents.memory.stores._async.store import AsyncStore
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.values import SessionInfo, SessionSummary
from agents.memory.stores._store import Store

__all__ = [
    "AWAITED",
    "PLAIN",
    "AsyncStoreContract",
    "AwaitedBatch",
    "AwaitedStore",
    "BackendContract",
    "BrokenEmbedder",
    "CountingEmbedder",
    "KeyedRecordContract",
    "LoopThread",
    "MakeAsyncStore",
    "MakeStore",
    "StoreContract",
    "VectorStoreContract",
    "assert_ranks_as_memory",
    "every_codec_type",
    "fill_sessions",
    "ranking_corpus",
    "same",
    "search_session",
    "session_hits",
    "summary_session",
    "union_hits",
    "vector_session",
]

T = TypeVar("T")


class MakeStore(Protocol):
    """Open a new handle on the store under test (read-only when asked)."""

    def __call__(self, *, read_only: bool = False) -> Store:
        """Return an open store; the caller closes it."""
        ...


class Color(enum.Enum):
    """An enum for the round-trip tests."""

    RED = "red"


class Step(MemoryItem):
    """A typed item for the round-trip tests."""

    step: int
    cost: float = field(default=0.0)


def summary_session() -> list[MemoryItem]:
    """Return items that exercise the counts: typed and tagged items, bool and missing costs, text steps."""
    return [
        MemoryItem(step=1, action="open", cost=0.25),
        Step(step=2, cost=0.5, when=dt.date(2024, 5, 1)),
        MemoryItem(note="no step", cost=True),
        MemoryItem(step=1, action="again", cost=2),
        MemoryItem(step="plan", action="think", cost="free"),
        MemoryItem(step=3, extra=None),
    ]


def search_session() -> list[MemoryItem]:
    """Return five items whose keyword ranking the contract suite pins (one without text)."""
    return [
        MemoryItem(step=0, action="open the file"),
        MemoryItem(step=1, action="save file", note="file saved"),
        MemoryItem(step=2, action="click button"),
        MemoryItem(step=3, obs={"text": ["error dialog", "click retry"]}),
        MemoryItem(step=4),
    ]


def ranking_corpus() -> list[MemoryItem]:
    """Return items whose keyword ranking the contract compares with ``Memory.search``.

    Repeated words, nested strings, texts of several lengths, items without
    text, Unicode that NFKC and case folding change, ``_`` splitting words,
    and a word longer than any index's lexeme limit.
    """
    long_word = "x" * 3000
    return [
        MemoryItem(step=0, action="open the file", note="the file is large"),
        MemoryItem(step=1, action="save file", obs={"text": ["file saved", "ok"]}),
        MemoryItem(step=2, action="click_input button", thought="the button is grey"),
        MemoryItem(step=3),
        MemoryItem(step=4, thought="STRASSE and Straße and ﬁle", tags=("café", "CAFÉ")),
        MemoryItem(step=5, thought=f"{long_word} file", n=3, when=dt.date(2024, 5, 1)),
        MemoryItem(step=6, action="open", args={"x": 1, "label": "Open the report"}),
        MemoryItem(step=7, thought="report report report on the dialog " * 5),
        MemoryItem(step=8, action="type", text="会议 记录 file"),
        MemoryItem(step=9, action="the the the the"),
    ]


COMMON_WORDS = ("the", "dialog", "report", "file", "open", "ok")


def common_words_session(
    *, seed: int = 1, items: int = 120, length: tuple[int, int] = (2, 14)
) -> list[MemoryItem]:
    """Return items made mostly of a few words that most items hold, of varied lengths.

    Every item holds "the"; one in twenty holds the rare "zeta". A second
    session made with other lengths has other statistics, so that the
    store-wide ranking of SQLite FTS5 differs from the session's own.
    """
    rng = random.Random(seed)
    out = []
    for n in range(items):
        words = ["the"] + [rng.choice(COMMON_WORDS) for _ in range(rng.randint(*length))]
        if n % 20 == 7:
            words.append("zeta")
        rng.shuffle(words)
        out.append(MemoryItem(step=n, n=n, note=" ".join(words)))
    return out


COMMON_WORD_QUERIES = (
    "the",
    "the dialog",
    "report file open the ok dialog",
    "the the dialog",
    "zeta the",
    "zeta report file",
    "open ok missing",
)

RANKING_QUERIES = (
    "file",
    "the file",
    "open report",
    "the report",
    "file open button",
    "strasse CAFE",
    "click",
    "button grey input",
    "file file",
    "x" * 3000,
    "会议",
    "the",
    "nothing matches this",
)


def assert_ranks_as_memory(
    store: Store, session_id: str, queries: Iterator[str] | tuple[str, ...] = RANKING_QUERIES
) -> None:
    """Assert that ``store.search`` ranks the session as ``Memory.search`` ranks its items read back.

    Every hit is asked for (``k`` = the session's length), so the lists match
    whole: the same items in the same order, scores equal to float rounding;
    items whose scores differ by rounding alone may come in either order.
    """
    items = store.read(session_id)
    memory = Memory()
    memory.add_memory_items(items)
    k = max(len(items), 1)
    for query in queries:
        got = [(hit.item.to_dict(), hit.score) for hit in store.search(session_id, query, k)]
        want = [(hit.item.to_dict(), hit.score) for hit in memory.search(query, k)]
        assert len(got) == len(want), (query, got, want)
        for (_, score), (_, expected) in zip(got, want, strict=True):
            assert score == pytest.approx(expected, rel=1e-9), (query, got, want)
        assert _tie_groups(got) == _tie_groups(want), (query, got, want)
        ranked = store.ranking(session_id, query, k)
        assert [score for _, score in ranked] == [score for _, score in got]


def _tie_groups(hits: list[tuple[dict[str, Any], float]]) -> list[list[str]]:
    """Group hits whose scores are equal to rounding; each group as sorted item texts."""
    groups: list[list[str]] = []
    last: float | None = None
    for fields, score in hits:
        if last is None or score != pytest.approx(last, rel=1e-9):
            groups.append([])
        groups[-1].append(repr(fields))
        last = score
    return [sorted(group) for group in groups]


def every_codec_type() -> list[MemoryItem]:
    """Return items holding every value type the codec round-trips (numpy ones when numpy is installed)."""
    items = [
        MemoryItem(step=1, text="héllo \u2603", n=2**70, f=1.5, none=None, flag=True),
        MemoryItem(
            step=2,
            when=dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc),
            day=dt.date(2024, 5, 1),
            at=dt.time(8, 15),
            span=dt.timedelta(days=1, seconds=3),
            pair=(1, "a"),
            tags={"x", "y"},
            frozen=frozenset({3}),
            raw=b"\x00\xff",
            buf=bytearray(b"ab"),
        ),
        MemoryItem(
            step=3,
            id=uuid.UUID(int=7),
            price=Decimal("1.10"),
            z=complex(1, -2),
            path=pathlib.PurePosixPath("/a/b.png"),
            color=Color.RED,
            nan=math.nan,
            inf=-math.inf,
            nested={"k": [1, (2, 3)], "$kv": "literal"},
            intkeys={1: "one"},
            nul="a\x00b",
        ),
        Step(step=5, cost=2.5, extra="dynamic"),
        MemoryItem(note="an item without a step"),
    ]
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is installed where the project tests run
        return items
    items.insert(
        3,
        MemoryItem(
            step=4, array=np.arange(6, dtype=np.int32).reshape(2, 3), scalar=np.float32(0.5)
        ),
    )
    return items


def same(a: Any, b: Any) -> bool:
    """Return whether two items (or values) are equal in class and value (NaN and arrays by value)."""
    if isinstance(a, MemoryItem):
        if type(a) is not type(b) or list(a.keys()) != list(b.keys()):
            return False
        return all(same(a[key], b[key]) for key in a)
    if type(a).__module__ == "numpy":
        import numpy as np

        return (
            type(b) is type(a)
            and getattr(a, "dtype", None) == getattr(b, "dtype", None)
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, float) and a == 0.0:
        return type(b) is float and math.copysign(1, a) == math.copysign(1, b)
    if type(a) in (list, tuple):
        return type(b) is type(a) and len(a) == len(b) and all(map(same, a, b))
    if type(a) is dict:
        return type(b) is dict and list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    return type(a) is type(b) and bool(a == b)


def steps_of(items: list[MemoryItem]) -> list[Any]:
    """Return the step field of each item."""
    return [item.get_value("step") for item in items]


class BackendContract:
    """The row operations of a :class:`~agents.memory.stores.Backend`, checked directly.

    Subclass it and provide a ``make_backend`` fixture: a function that opens
    a new backend on one fresh store each time it is called (the same store
    for every call within a test). Run :class:`StoreContract` on
    ``Store(backend)`` as well: this suite names the operation that breaks,
    that one checks the meaning of every store call built on them.
    """

    ROWS: Sequence[tuple[str | None, float, bytes]] = (
        ("1", 1.0, b'{"step":1}'),
        (None, 2.0, b'{"note":"x"}'),
        ("2", 3.0, b'{"step":2}'),
    )

    @pytest.fixture
    def backend(self, make_backend: Callable[[], Backend]) -> Iterator[Backend]:
        """Yield a backend on a fresh store, closed after the test."""
        opened = make_backend()
        try:
            yield opened
        finally:
            opened.close()

    def _insert(self, backend: Backend, sid: str, rows: Sequence[Any] | None = None) -> list[int]:
        rows = list(self.ROWS if rows is None else rows)
        with backend.transaction(sid) as tx:
            if backend.lock_session(tx, sid) is None:
                backend.create_session(tx, sid, "step", 100.0)
            return backend.insert_rows(tx, sid, rows, [("", 0)] * len(rows))

    def test_inserted_rows_read_back_in_seq_order(self, backend: Backend) -> None:
        """insert_rows gives increasing seqs; read_rows, read_seqs and read_last give the rows back in that order."""
        seqs = self._insert(backend, "s")
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 3
        assert backend.read_rows("s") == [
            (q, row[2]) for q, row in zip(seqs, self.ROWS, strict=True)
        ]
        assert backend.read_seqs("s", [seqs[2], seqs[0], 10**12]) == [
            (seqs[0], self.ROWS[0][2]),
            (seqs[2], self.ROWS[2][2]),
        ]
        assert backend.read_last("s", 2) == [(seqs[1], self.ROWS[1][2]), (seqs[2], self.ROWS[2][2])]
        assert [row for page in backend.read_pages("s", 2) for row in page] == backend.read_rows(
            "s"
        )
        assert backend.count("s") == 3
        assert backend.read_session("s") == ("step", 100.0, b"{}")
        assert backend.sessions() == ["s"]

    def test_last_step_is_the_row_count_and_the_last_rows_step(self, backend: Backend) -> None:
        """last_step in a transaction gives the session's row count and its last row's step text, after deletes too."""
        with backend.transaction("s") as tx:
            backend.create_session(tx, "s", "step", 100.0)
            assert backend.last_step(tx, "s") == (0, None)
        seqs = self._insert(backend, "s")
        with backend.transaction("s") as tx:
            assert backend.last_step(tx, "s") == (3, "2")
            backend.delete_rows(tx, "s", [seqs[2]])
            assert backend.last_step(tx, "s") == (2, None)

    def test_step_and_after_filters(self, backend: Backend) -> None:
        """read_rows with steps keeps the rows filed under them, with after those above that seq."""
        seqs = self._insert(backend, "s")
        assert [seq for seq, _ in backend.read_rows("s", steps=["2", "1"])] == [seqs[0], seqs[2]]
        assert [seq for seq, _ in backend.read_rows("s", steps=["1"], after=seqs[0])] == []
        assert [seq for seq, _ in backend.read_rows("s", after=seqs[0])] == seqs[1:]
        assert backend.read_rows("s", steps=[]) == []

    def test_a_transaction_that_raises_changes_nothing(self, backend: Backend) -> None:
        """Everything done in a transaction left by an exception is undone, for this and other handles."""
        seqs = self._insert(backend, "s")

        class Abort(Exception):
            pass

        def write_then_fail() -> None:
            with backend.transaction("s") as tx:
                backend.delete_rows(tx, "s", seqs[:1])
                backend.insert_rows(tx, "s", [("9", 9.0, b"{}")], [("", 0)])
                backend.set_metadata(tx, "s", b'{"a":1}')
                raise Abort

        with pytest.raises(Abort):
            write_then_fail()
        assert [seq for seq, _ in backend.read_rows("s")] == seqs
        assert backend.read_session("s") == ("step", 100.0, b"{}")

    def test_updates_deletes_clears_and_row_index(self, backend: Backend) -> None:
        """update_rows and delete_rows report the seqs that existed; clear_rows how many went."""
        seqs = self._insert(backend, "s")
        with backend.transaction("s") as tx:
            assert backend.update_rows(
                tx, "s", [(seqs[1], "7", b'{"step":7}'), (10**12, None, b"{}")], [("", 0)] * 2
            ) == [seqs[1]]
            assert backend.delete_rows(tx, "s", [seqs[0], 10**12]) == [seqs[0]]
            assert backend.row_index(tx, "s") == [(seqs[1], "7", 2.0), (seqs[2], "2", 3.0)]
        assert backend.read_rows("s", steps=["7"]) == [(seqs[1], b'{"step":7}')]
        with backend.transaction("s") as tx:
            assert backend.clear_rows(tx, "s") == 2
        assert backend.read_rows("s") == []
        assert backend.sessions() == ["s"]

    def test_a_deleted_session_never_gives_a_seq_again(self, backend: Backend) -> None:
        """A session deleted and created again continues above every seq it had."""
        seqs = self._insert(backend, "s")
        assert backend.delete_session("s") is True
        assert backend.delete_session("s") is False
        assert backend.read_session("s") is None
        assert backend.sessions() == []
        again = self._insert(backend, "s")
        assert min(again) > max(seqs)

    def test_other_handles_see_committed_writes(
        self, backend: Backend, make_backend: Callable[[], Backend]
    ) -> None:
        """A second backend on the same store reads what the first committed."""
        seqs = self._insert(backend, "s")
        other = make_backend()
        try:
            assert [seq for seq, _ in other.read_rows("s")] == seqs
            with other.transaction("s") as tx:
                other.delete_rows(tx, "s", seqs[:1])
            assert [seq for seq, _ in backend.read_rows("s")] == seqs[1:]
        finally:
            other.close()

    def test_keyword_version_changes_with_each_write_of_the_rows_by_another_handle(
        self, backend: Backend, make_backend: Callable[[], Backend]
    ) -> None:
        """Where keyword_version gives a value, an insert, an update that keeps the row's terms and a delete of the session's rows, each by another handle, change it."""
        seqs = self._insert(backend, "s")
        since = backend.keyword_version("s")
        if since is None:
            pytest.skip("the backend tells no keyword version (Backend.keyword_version)")
        assert backend.keyword_version("s") == since
        step, _, data = self.ROWS[0]
        other = make_backend()
        try:
            for write in ("insert", "update", "delete"):
                if write == "insert":
                    self._insert(other, "s", self.ROWS[:1])
                else:
                    with other.transaction("s") as tx:
                        other.lock_session(tx, "s")
                        if write == "update":
                            other.update_rows(tx, "s", [(seqs[0], step, data)], [("", 0)])
                        else:
                            other.delete_rows(tx, "s", seqs[1:2])
                now = backend.keyword_version("s")
                assert now != since, write
                since = now
        finally:
            other.close()

    def _put_vectors(self, backend: Backend, sid: str, seqs: Sequence[int], blob: bytes) -> None:
        """Write ``blob`` as the vector over ``*`` of each of ``seqs`` (the model claimed first)."""
        rows = [(seq, data, blob) for seq, data in backend.read_seqs(sid, seqs)]
        with backend.transaction(sid) as tx:
            backend.lock_session(tx, sid)
            backend.claim_vector_model(tx, sid, "contract-model", len(blob) // 4)
            assert backend.put_vectors(tx, sid, "*", rows) == len(rows)

    def _vectored(self, backend: Backend, embedded: slice) -> tuple[list[int], Hashable]:
        """Insert the rows of session ``s``, give the ``embedded`` ones a vector, and return the seqs and the vectors' version (skip a backend without them)."""
        if not backend.keeps_vectors:
            pytest.skip("the backend keeps no vectors (Backend.keeps_vectors)")
        seqs = self._insert(backend, "s")
        self._put_vectors(backend, "s", seqs[embedded], b"\x00\x00\x80\x3f" * 2)
        since = backend.vectors_version("s", "*")
        if since is None:
            pytest.skip("the backend keeps no version of its vectors (Backend.vectors_version)")
        return seqs, since

    def _written_by_another(self, make_backend: Callable[[], Backend], seqs: Sequence[int]) -> None:
        """Give ``seqs`` of session ``s`` a new vector through another handle."""
        other = make_backend()
        try:
            self._put_vectors(other, "s", seqs, b"\x00\x00\x00\x40" * 2)
        finally:
            other.close()

    def test_a_backend_that_ranks_its_vectors_answers_nearest(self, backend: Backend) -> None:
        """Where ranks_vectors says so, nearest ranks the session's vectors (not None): the store keeps no copy of them to score."""
        seqs, _ = self._vectored(backend, slice(None))
        if not backend.ranks_vectors("s", "*"):
            pytest.skip("the backend has the store score its vectors (Backend.ranks_vectors)")
        query = b"\x00\x00\x80\x3f" * 2
        ranked = backend.nearest("s", "*", query, len(seqs), [])
        assert ranked is not None
        assert sorted(seq for seq, _, _ in ranked) == sorted(seqs)

    def test_vector_changes_name_every_vector_written_by_this_or_another_handle(
        self, backend: Backend, make_backend: Callable[[], Backend]
    ) -> None:
        """Between two vectors_version values, vector_changes names (at least) every seq whose vector row another handle or this one wrote or deleted (with its item); None is always allowed."""
        seqs, since = self._vectored(backend, slice(None))
        self._insert(backend, "t")
        assert backend.vector_changes("s", "*", since, since) in (set(), None)
        self._written_by_another(make_backend, seqs[:1])
        with backend.transaction("s") as tx:  # as a store deletes an item: its vectors go with it
            backend.delete_rows(tx, "s", seqs[1:2])
            backend.delete_vectors(tx, "s", seqs[1:2])
        now = backend.vectors_version("s", "*")
        assert now != since
        changed = backend.vector_changes("s", "*", since, now)
        assert changed is None or {seqs[0], seqs[1]} <= changed

    def test_vectors_version_and_changes_follow_a_write_by_another_handle_alone(
        self, backend: Backend, make_backend: Callable[[], Backend]
    ) -> None:
        """A vector write by another handle alone changes this handle's vectors_version, and vector_changes names its seq (or answers None)."""
        seqs, since = self._vectored(backend, slice(0, 2))
        self._written_by_another(make_backend, seqs[2:])
        now = backend.vectors_version("s", "*")
        assert now != since
        changed = backend.vector_changes("s", "*", since, now)
        assert changed is None or seqs[2] in changed

    def test_vector_changes_from_a_version_of_numbers_no_backend_gives_is_none(
        self, backend: Backend
    ) -> None:
        """A version whose numbers no backend gives (each int of a real one made negative, past 64 bits, or a bool) makes vector_changes answer None (or the seqs), never raise: a coded file's tag read unchecked may hold it."""
        seqs, since = self._vectored(backend, slice(0, 2))
        self._put_vectors(backend, "s", seqs[2:], b"\x00\x00\x00\x40" * 2)
        now = backend.vectors_version("s", "*")

        def mangled(version: Hashable) -> list[Hashable]:
            if type(version) is int:
                return [-(2**70), 2**70, -1, True]
            if type(version) is tuple:
                return [
                    (*version[:at], other, *version[at + 1 :])
                    for at in range(len(version))
                    for other in mangled(version[at])
                ]
            return []

        for odd in [*mangled(since), *mangled(now)]:
            for pair in ((odd, now), (since, odd), (odd, odd)):
                changed = backend.vector_changes("s", "*", *pair)
                assert changed is None or isinstance(changed, set), pair


class KeyedRecordContract:
    """Keyed records (``put_record`` and friends) on a store whose backend keeps keyed rows; subclass it and provide ``make_store``.

    Every store kvmemory ships runs it beside :class:`StoreContract`. A
    backend without the keyed-row operations passes :class:`StoreContract`
    and not this suite: its record calls raise a ``StoreError`` naming the
    operations to implement.
    """

    @pytest.fixture
    def store(self, make_store: MakeStore) -> Iterator[Store]:
        """Yield an open handle on the store under test."""
        with make_store() as opened:
            yield opened

    def test_put_record_then_get_record(self, store: Store) -> None:
        """A record put under a key reads back by key, carrying the key in its "key" field."""
        store.put_record("s", "lang", MemoryItem(value="fr"))
        assert store.get_record("s", "lang") == MemoryItem(key="lang", value="fr")
        assert store.get_record("s", "other") is None

    def test_put_record_takes_a_mapping(self, store: Store) -> None:
        """A mapping is stored as a MemoryItem with the key first."""
        store.put_record("s", "lang", {"value": "fr"})
        item = store.get_record("s", "lang")
        assert item is not None
        assert list(item.to_dict().items()) == [("key", "lang"), ("value", "fr")]

    def test_put_record_leaves_the_callers_item_unchanged(self, store: Store) -> None:
        """put_record stores a copy with the key; the item passed in gets no "key" field."""
        item = MemoryItem(value="fr")
        store.put_record("s", "lang", item)
        assert item.to_dict() == {"value": "fr"}

    def test_put_record_creates_the_session(self, store: Store) -> None:
        """A put into a session that does not exist creates it."""
        store.put_record("new", "k", {"v": 1})
        assert "new" in store.sessions()

    def test_replace_gives_a_new_seq_at_the_end(self, store: Store) -> None:
        """A replaced record leaves its old seq and gets a new one after every item of the session."""
        first = store.put_record("s", "lang", {"value": "fr"})
        middle = store.append("s", [MemoryItem(step=1)])
        second = store.put_record("s", "lang", {"value": "de"})
        assert first < middle[0] < second
        records = store.records("s")
        assert [record.seq for record in records] == [middle[0], second]
        assert store.read("s", after=middle[0]) == [MemoryItem(key="lang", value="de")]

    def test_replaced_record_appears_once_to_a_follower(self, store: Store) -> None:
        """A reader following after a seq sees the new version once, and the old seq is gone."""
        store.put_record("s", "a", {"v": 1})
        seen = store.records("s")[-1].seq
        store.put_record("s", "a", {"v": 2})
        new = store.records("s", after=seen)
        assert [record.item["v"] for record in new] == [2]
        assert [record.item["v"] for record in store.records("s")] == [2]

    def test_replace_takes_the_new_items_step(self, store: Store) -> None:
        """The replaced record is filed under the new item's step, not the old one's."""
        store.put_record("s", "k", {"step": 1, "v": "old"})
        store.put_record("s", "k", {"step": 2, "v": "new"})
        assert store.read("s", steps=[1]) == []
        assert store.read("s", steps=[2]) == [MemoryItem(key="k", step=2, v="new")]

    def test_put_records_returns_the_seqs_in_order(self, store: Store) -> None:
        """put_records writes every record and returns their seqs, increasing in the mapping's order."""
        seqs = store.put_records("s", {"b": {"v": 1}, "a": {"v": 2}})
        assert list(seqs) == ["b", "a"]
        assert seqs["b"] < seqs["a"]
        assert store.get_records("s", ["a", "b"]) == {
            "a": MemoryItem(key="a", v=2),
            "b": MemoryItem(key="b", v=1),
        }

    def test_put_records_with_a_bad_item_writes_nothing(self, store: Store) -> None:
        """A put_records whose later item cannot be encoded leaves the session as it was."""
        store.put_record("s", "a", {"v": 1})
        before = store.records("s")
        with pytest.raises(SerializationError, match="cannot be encoded"):
            store.put_records("s", {"a": {"v": 2}, "b": {"v": object()}})
        assert store.records("s") == before
        assert store.record_keys("s") == ["a"]

    def test_put_records_with_a_bad_key_writes_nothing(self, store: Store) -> None:
        """A put_records with an empty key among good ones writes none of them."""
        with pytest.raises(StoreArgumentError, match="must not be empty"):
            store.put_records("s", {"a": {"v": 1}, "": {"v": 2}})
        assert store.sessions() == []

    def test_put_records_keep_passes_fields_on_to_the_replacement(self, store: Store) -> None:
        """put_records(keep=...) gives a replacing item the kept fields of the record it replaces."""
        store.put_records("s", {"a": {"v": 1, "born": 10.0}})
        item = MemoryItem(v=2, born=20.0)
        store.put_records("s", {"a": item, "b": {"v": 3, "born": 30.0}}, keep=("born", "gone"))
        assert store.get_records("s", ["a", "b"]) == {
            "a": MemoryItem(key="a", v=2, born=10.0),
            "b": MemoryItem(key="b", v=3, born=30.0),
        }
        assert item.to_dict() == {"v": 2, "born": 20.0}

    def test_put_records_keep_must_name_fields(self, store: Store) -> None:
        """A keep that is a single str is refused before anything is written."""
        with pytest.raises(StoreArgumentError, match="keep must be a collection of field names"):
            store.put_records("s", {"a": {"v": 1}}, keep="born")
        assert store.sessions() == []

    def test_get_records_returns_only_the_found_ones(self, store: Store) -> None:
        """get_records leaves out the keys that hold no record."""
        store.put_records("s", {"a": {"v": 1}, "b": {"v": 2}})
        assert store.get_records("s", ["b", "zz"]) == {"b": MemoryItem(key="b", v=2)}
        assert store.get_records("s", []) == {}
        assert store.get_records("nowhere", ["a"]) == {}

    def test_delete_record(self, store: Store) -> None:
        """delete_record removes the record and says whether there was one."""
        store.put_record("s", "a", {"v": 1})
        assert store.delete_record("s", "a") is True
        assert store.delete_record("s", "a") is False
        assert store.get_record("s", "a") is None
        assert store.read("s") == []

    def test_delete_records_counts_those_that_existed(self, store: Store) -> None:
        """delete_records removes the records under the keys and returns how many there were."""
        store.put_records("s", {"a": {"v": 1}, "b": {"v": 2}, "c": {"v": 3}})
        assert store.delete_records("s", ["a", "c", "zz"]) == 2
        assert store.record_keys("s") == ["b"]
        assert store.delete_records("nowhere", ["a"]) == 0

    def test_record_keys_are_sorted_and_filtered_by_prefix(self, store: Store) -> None:
        """record_keys lists the keys by code point, those starting with the prefix when one is given."""
        keys = ["b", "a/2", "a/1", "é", "a", "ab", "a\U0010ffff", "z"]
        store.put_records("s", {key: {"v": 1} for key in keys})
        assert store.record_keys("s") == sorted(keys)
        assert store.record_keys("s", prefix="a") == sorted(k for k in keys if k.startswith("a"))
        assert store.record_keys("s", prefix="a/") == ["a/1", "a/2"]
        assert store.record_keys("s", prefix="q") == []
        assert store.record_keys("nowhere") == []

    def test_read_records_gives_keys_seqs_and_times(self, store: Store) -> None:
        """read_records returns every record sorted by key, with its seq and the time of its put."""
        before = time.time()
        seqs = store.put_records("s", {"b": {"v": 1}, "a": {"v": 2}})
        store.append("s", [MemoryItem(step=1, key="not a record")])
        records = store.read_records("s")
        assert [(r.key, r.seq, r.item) for r in records] == [
            ("a", seqs["a"], MemoryItem(key="a", v=2)),
            ("b", seqs["b"], MemoryItem(key="b", v=1)),
        ]
        assert all(before - 1 <= r.created <= time.time() + 1 for r in records)
        assert [r.key for r in store.read_records("s", ["b", "q"])] == ["b"]
        assert [r.key for r in store.read_records("s", prefix="a")] == ["a"]

    def test_replace_updates_the_created_time(self, store: Store) -> None:
        """A replaced record's created time is that of the later put."""
        store.put_record("s", "a", {"v": 1})
        (first,) = store.read_records("s")
        store.put_record("s", "a", {"v": 2})
        (second,) = store.read_records("s")
        assert second.created >= first.created
        assert second.seq > first.seq

    def test_appended_items_with_a_key_field_are_not_records(self, store: Store) -> None:
        """An item appended with a "key" field is an item, not a record."""
        store.append("s", [MemoryItem(key="lang", value="fr")])
        assert store.get_record("s", "lang") is None
        assert store.record_keys("s") == []
        store.put_record("s", "lang", {"value": "de"})
        assert [item["value"] for item in store.read("s")] == ["fr", "de"]
        assert store.get_record("s", "lang") == MemoryItem(key="lang", value="de")

    def test_records_survive_close_and_reopen(self, make_store: MakeStore) -> None:
        """Records read back by key from a new handle after the first is closed."""
        with make_store() as first:
            first.put_records("s", {"a": {"v": 1}, "b": {"v": 2}})
            first.put_record("s", "a", {"v": 3})
            first.delete_record("s", "b")
        with make_store() as again:
            assert again.record_keys("s") == ["a"]
            assert again.get_record("s", "a") == MemoryItem(key="a", v=3)

    def test_a_second_handle_sees_a_put(self, make_store: MakeStore) -> None:
        """A put through one handle is read by key through another handle open at the same time."""
        with make_store() as writer, make_store(read_only=True) as reader:
            writer.put_record("s", "a", {"v": 1})
            assert reader.get_record("s", "a") == MemoryItem(key="a", v=1)
            writer.put_record("s", "a", {"v": 2})
            assert reader.get_record("s", "a") == MemoryItem(key="a", v=2)
            assert [r.seq for r in reader.records("s")] == [r.seq for r in writer.records("s")]

    def test_keyword_search_after_replace_finds_only_the_new_text(self, store: Store) -> None:
        """After a replace, keyword search finds the new text and not the old."""
        store.put_record("s", "note", {"text": "giraffes eat leaves"})
        store.append("s", [MemoryItem(step=1, text="zebras run")])
        store.put_record("s", "note", {"text": "penguins swim"})
        assert store.search("s", "giraffes") == []
        assert [hit.item["text"] for hit in store.search("s", "penguins")] == ["penguins swim"]
        ram = Memory(store.read("s"))
        for query in ("penguins", "zebras", "swim run"):
            got = [(hit.item.to_dict(), hit.score) for hit in store.search("s", query, 5)]
            want = [(hit.item.to_dict(), hit.score) for hit in ram.search(query, 5)]
            assert got == want

    def test_replace_drops_the_old_vectors(self, store: Store) -> None:
        """A replaced record's vector goes with its old seq; the new one is embedded from the new text."""
        pytest.importorskip("numpy")
        embedder = CountingEmbedder()
        old = store.put_record("s", "note", {"text": "giraffes eat leaves"})
        store.index_embeddings("s", embedder)
        assert old in store.read_vectors("s", embedder)
        new = store.put_record("s", "note", {"text": "penguins swim"})
        assert store.read_vectors("s", embedder) == {}
        hits = store.search("s", "penguins", 3, mode="semantic", embedder=embedder)
        assert [hit.seq for hit in hits] == [new]
        assert list(store.read_vectors("s", embedder)) == [new]

    def test_delete_steps_and_clear_free_the_keys(self, store: Store) -> None:
        """Deleting a record's row by step, or clearing the session, removes the record."""
        store.put_records("s", {"a": {"step": 1}, "b": {"step": 2}})
        store.delete_steps("s", [1])
        assert store.record_keys("s") == ["b"]
        store.clear("s")
        assert store.record_keys("s") == []
        store.put_record("s", "b", {"v": 1})
        assert store.record_keys("s") == ["b"]

    def test_deleted_session_has_no_records(self, store: Store) -> None:
        """A session deleted and created again starts without records."""
        store.put_record("s", "a", {"v": 1})
        store.delete_session("s")
        assert store.get_record("s", "a") is None
        store.put_record("s", "b", {"v": 1})
        assert store.record_keys("s") == ["b"]

    def test_read_only_store_refuses_puts(self, make_store: MakeStore) -> None:
        """put_record and delete_record on a read-only handle raise and change nothing."""
        with make_store() as writer:
            writer.put_record("s", "a", {"v": 1})
        with make_store(read_only=True) as reader:
            with pytest.raises(StoreError, match="read-only"):
                reader.put_record("s", "a", {"v": 2})
            with pytest.raises(StoreError, match="read-only"):
                reader.delete_record("s", "a")
            assert reader.get_record("s", "a") == MemoryItem(key="a", v=1)

    def test_empty_key_is_refused(self, store: Store) -> None:
        """An empty key raises naming the rule, and nothing is written."""
        with pytest.raises(StoreArgumentError, match="A record key must not be empty"):
            store.put_record("s", "", {"v": 1})
        with pytest.raises(StoreArgumentError, match="A record key must not be empty"):
            store.get_record("s", "")
        assert store.sessions() == []

    def test_non_str_key_is_refused(self, store: Store) -> None:
        """A key that is not a str raises naming it and its type."""
        with pytest.raises(StoreArgumentError, match=r"A record key must be a str, got 5 \(int\)"):
            store.put_record("s", 5, {"v": 1})  # type: ignore[arg-type]  # the error under test
        with pytest.raises(StoreArgumentError, match=r"got 5 \(int\)"):
            store.delete_record("s", 5)  # type: ignore[arg-type]  # the error under test
        with pytest.raises(StoreArgumentError, match="wrap it"):
            store.get_records("s", "ab")

    def test_conflicting_key_field_is_refused(self, store: Store) -> None:
        """An item whose own "key" field holds another key raises naming both, and nothing is written."""
        store.put_record("s", "lang", {"value": "fr"})
        with pytest.raises(
            StoreArgumentError,
            match=r"put under key 'lang' .* holds another key in its own 'key' field \('city'\)",
        ):
            store.put_record("s", "lang", MemoryItem(key="city", value="de"))
        assert store.get_record("s", "lang") == MemoryItem(key="lang", value="fr")

    def test_matching_key_field_is_kept(self, store: Store) -> None:
        """An item that already holds its key in "key" is stored as it is."""
        store.put_record("s", "lang", MemoryItem(value="fr", key="lang"))
        item = store.get_record("s", "lang")
        assert item is not None
        assert list(item.to_dict()) == ["value", "key"]

    def test_keys_with_any_text_round_trip(self, store: Store) -> None:
        """Keys with spaces, quotes, slashes, percent signs and non-ASCII text are kept exactly."""
        keys = ["a b", "it's", 'say "hi"', "a/b\\c", "50%_off", "日本語", "🙂", "x" * 300]
        store.put_records("s", {key: {"n": n} for n, key in enumerate(keys)})
        assert store.record_keys("s") == sorted(keys)
        assert {key: item["n"] for key, item in store.get_records("s", keys).items()} == {
            key: n for n, key in enumerate(keys)
        }
        assert store.record_keys("s", prefix="50%") == ["50%_off"]
        assert store.record_keys("s", prefix="a_") == []

    def test_unwritable_keys_are_refused(self, store: Store) -> None:
        """Keys with a NUL character, a lone surrogate or over 1024 UTF-8 bytes are refused."""
        with pytest.raises(StoreArgumentError, match="NUL character"):
            store.put_record("s", "a\x00b", {"v": 1})
        with pytest.raises(StoreArgumentError, match="lone surrogate"):
            store.put_record("s", "a\ud800", {"v": 1})
        with pytest.raises(StoreArgumentError, match="1025 UTF-8 bytes long; the limit is 1024"):
            store.put_record("s", "k" * 1025, {"v": 1})
        assert store.sessions() == []


class StoreContract:
    """The calls every store answers the same way; subclass it and provide ``make_store``.

    ``make_store(read_only=False)`` opens a new handle on the one store of the
    test. Pass ``read_only`` on to ``Store.__init__``, which then refuses
    every write call; the read-only tests check that, and that reads work.
    """

    @pytest.fixture
    def store(self, make_store: MakeStore) -> Iterator[Store]:
        """Yield an open handle on the store under test."""
        with make_store() as opened:
            yield opened

    def test_store_is_a_store(self, store: Store) -> None:
        """Every store is a Store over a Backend."""
        assert isinstance(store, Store)
        assert isinstance(store.backend, Backend)

    def test_round_trip_of_every_codec_type(self, store: Store) -> None:
        """Items come back with the same classes, values and field order."""
        items = every_codec_type()
        store.append("s", items)
        back = store.read("s")
        assert len(back) == len(items)
        for original, loaded in zip(items, back, strict=True):
            assert same(original, loaded), (original, loaded)

    def test_order_is_append_order_across_calls(self, store: Store) -> None:
        """Single appends and batches read back in the order they were made."""
        store.append("s", [MemoryItem(step=1)])
        store.append("s", [MemoryItem(step=2), MemoryItem(step=3)])
        store.append("s", [MemoryItem(step=0)])
        assert steps_of(store.read("s")) == [1, 2, 3, 0]

    def test_seqs_increase_and_after_reads_only_newer(self, store: Store) -> None:
        """append returns increasing seqs and read(after=) returns only later items."""
        first = store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        second = store.append("s", [MemoryItem(step=3)])
        assert first[0] < first[1] < second[0]
        assert steps_of(store.read("s", after=first[1])) == [3]

    def test_append_steps_numbers_the_items_without_a_step(self, store: Store) -> None:
        """append_steps gives 1, 2, ... in a new session, goes on after a whole-number step, and keeps given steps."""
        first = store.append_steps("s", [MemoryItem(a=1), MemoryItem(a=2)])
        assert [(r.item["step"], r.item["a"]) for r in first] == [(1, 1), (2, 2)]
        given = store.append_steps("s", [MemoryItem(step=10, a=3), MemoryItem(a=4)])
        assert [r.item["step"] for r in given] == [10, 11]
        assert [r.seq for r in first + given] == [r.seq for r in store.records("s")]
        assert [r.item for r in store.records("s")] == [r.item for r in first + given]
        assert list(given[1].item.keys()) == ["step", "a"]

    def test_append_steps_counts_after_a_step_that_is_not_a_number(self, store: Store) -> None:
        """After a text step or an item without one, the next step is the item count plus one."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step="1b")])
        assert store.append_steps("s", [MemoryItem()])[0].item["step"] == 3
        store.append("s", [MemoryItem(note="no step")])
        assert store.append_steps("s", [MemoryItem()])[0].item["step"] == 5

    def test_append_steps_leaves_the_callers_items_alone(self, store: Store) -> None:
        """The items passed in keep their fields; the records hold numbered copies."""
        mine = [MemoryItem(text="t"), MemoryItem(note="n")]
        records = store.append_steps("s", mine)
        assert mine == [MemoryItem(text="t"), MemoryItem(note="n")]
        assert [r.item["step"] for r in records] == [1, 2]
        assert records[0].item is not mine[0]

    def test_append_steps_under_the_sessions_step_key(self, store: Store) -> None:
        """A session named by another step key is numbered under that key."""
        store.append("s", [MemoryItem(Step=4)], step_key="Step")
        (record,) = store.append_steps("s", [MemoryItem(x=1)], step_key="Step")
        assert record.item.to_dict() == {"Step": 5, "x": 1}

    def test_a_batch_numbers_after_its_own_deletes(self, store: Store) -> None:
        """In a batch, numbering follows the rows left after the batch's deletes and clears."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        with store.batch("s") as batch:
            batch.clear()
            batch.append([MemoryItem(a=1)], number_steps=True)
        assert [r.item["step"] for r in store.records("s")] == [1]
        assert batch.numbered == [MemoryItem(step=1, a=1)]

    def test_sessions_are_isolated(self, store: Store) -> None:
        """Items of one session never show in another, even one whose id is a prefix."""
        store.append("run", [MemoryItem(step=1)])
        store.append("run-2", [MemoryItem(step=2)])
        assert steps_of(store.read("run")) == [1]
        assert steps_of(store.read("run-2")) == [2]
        assert store.read("ru") == []

    def test_step_filter_matches_like_memory(self, store: Store) -> None:
        """Step filters match equal numbers (1 and 1.0), strings exactly, and never stepless items."""
        store.append(
            "s",
            [
                MemoryItem(step=1, a=1),
                MemoryItem(step="1", a=2),
                MemoryItem(step=2, a=3),
                MemoryItem(a=4),
                MemoryItem(step=1, a=5),
            ],
        )
        assert [i["a"] for i in store.read("s", steps=[1.0])] == [1, 5]
        assert [i["a"] for i in store.read("s", steps=["1", 2])] == [2, 3]
        assert store.read("s", steps=[]) == []

    def test_step_filter_follows_updates_deletes_and_clears(self, store: Store) -> None:
        """A step filter finds an item under its new step after an update, and no deleted item."""
        seqs = store.append("s", [MemoryItem(step=i % 5, n=i) for i in range(20)])
        with store.batch("s") as batch:
            batch.update({seqs[0]: MemoryItem(step=9, n=0), seqs[6]: MemoryItem(n=6)})
            batch.delete([seqs[1], seqs[11]])
        for steps in ([0], [1], [9], [0, 9, 4], [7], list(range(10))):
            want = [i["n"] for i in store.read("s") if i.get_value("step") in steps]
            assert [i["n"] for i in store.read("s", steps=steps)] == want
            assert [r.item["n"] for r in store.tail("s", 2, steps=steps)] == want[-2:]
            assert [f["n"] for f in store.project("s", ["n"], steps=steps)] == want
            assert [r.item["n"] for r in store.records("s", steps=steps, after=seqs[9])] == [
                n for n in want if n > 9
            ]
        store.clear("s")
        store.append("s", [MemoryItem(step=0, n=100)])
        assert [i["n"] for i in store.read("s", steps=[0])] == [100]

    def test_delete_steps_removes_only_those_steps(self, store: Store) -> None:
        """delete_steps deletes every item of the steps and reports how many."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=1)])
        store.append("other", [MemoryItem(step=1)])
        assert store.delete_steps("s", [1]) == 2
        assert steps_of(store.read("s")) == [2]
        assert store.count("other") == 1

    def test_delete_seqs_removes_those_items(self, store: Store) -> None:
        """delete_seqs deletes exactly the given items and counts only those that existed."""
        seqs = store.append("s", [MemoryItem(step=i) for i in range(4)])
        assert store.delete_seqs("s", [seqs[1], seqs[3], 10**9]) == 2
        assert steps_of(store.read("s")) == [0, 2]

    def test_clear_empties_session_but_keeps_it_listed(self, store: Store) -> None:
        """clear deletes the items, returns their number, and the session stays listed."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        assert store.clear("s") == 2
        assert store.count("s") == 0
        assert store.sessions() == ["s"]

    def test_sessions_are_listed_sorted_and_deleted(self, store: Store) -> None:
        """sessions() lists every session sorted; delete_session removes one with its items."""
        for sid in ("b", "a", "c"):
            store.append(sid, [MemoryItem(step=1)])
        assert store.sessions() == ["a", "b", "c"]
        assert store.delete_session("b") is True
        assert store.delete_session("b") is False
        assert store.sessions() == ["a", "c"]
        assert store.read("b") == []

    def test_keep_last_trims_oldest(self, store: Store) -> None:
        """keep_last(n) deletes all but the newest n items."""
        store.append("s", [MemoryItem(step=i) for i in range(5)])
        assert store.keep_last("s", 2) == 3
        assert steps_of(store.read("s")) == [3, 4]
        assert store.keep_last("s", 0) == 2
        assert store.count("s") == 0

    def test_expire_deletes_only_items_older_than_age(self, store: Store) -> None:
        """expire keeps items younger than the age and deletes the older ones."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        assert store.expire("s", dt.timedelta(hours=1)) == 0
        assert store.count("s") == 2
        assert store.expire("s", 0) == 2
        assert store.count("s") == 0

    def test_reopen_gives_back_the_same_session(self, make_store: MakeStore) -> None:
        """Closing and reopening the store gives back the same items in the same order."""
        items = every_codec_type()
        with make_store() as first:
            first.append("s", items[:3])
            first.append("s", items[3:])
        with make_store() as again:
            back = again.read("s")
        assert all(same(a, b) for a, b in zip(items, back, strict=True))

    def test_unknown_session_reads_empty(self, store: Store) -> None:
        """An unknown session reads as empty with count 0."""
        assert store.read("never") == []
        assert store.count("never") == 0

    @pytest.mark.parametrize(
        "bad", ["", "../x", "a/b", "a\\b", "it's", 'say"hi', "a b", ".hidden", "x" * 129]
    )
    def test_invalid_session_id_is_refused_and_changes_nothing(
        self, store: Store, bad: str
    ) -> None:
        """A session id with separators, quotes, spaces or bad length is refused before any write."""
        store.append("good", [MemoryItem(step=1)])
        with pytest.raises(InvalidSessionIdError, match="ession id"):
            store.append(bad, [MemoryItem(step=2)])
        assert store.sessions() == ["good"]

    def test_reading_without_session_id_is_an_error(self, store: Store) -> None:
        """Passing None as the session id raises instead of reading every session."""
        store.append("s", [MemoryItem(step=1)])
        with pytest.raises(InvalidSessionIdError, match="must be a string"):
            store.read(None)  # type: ignore[arg-type]

    def test_other_step_key_is_refused_and_writes_nothing(self, store: Store) -> None:
        """Appending with a step key other than the session's raises and writes nothing."""
        store.append("s", [MemoryItem(Step=1)], step_key="Step")
        with pytest.raises(StoreError, match="step_key='Step'"):
            store.append("s", [MemoryItem(step=2)], step_key="step")
        assert store.count("s") == 1

    def test_unencodable_value_writes_nothing(self, store: Store) -> None:
        """A batch with an unencodable value raises and none of the batch is written."""
        with pytest.raises(SerializationError, match="'obj' of step 2"):
            store.append("s", [MemoryItem(step=1), MemoryItem(step=2, obj=object())])
        assert store.count("s") == 0

    def test_closed_store_refuses_calls(self, make_store: MakeStore) -> None:
        """Calls on a closed store raise StoreError naming the store."""
        opened = make_store()
        opened.close()
        opened.close()
        with pytest.raises(StoreError, match="is closed"):
            opened.read("s")

    def test_project_returns_chosen_keys_in_key_order(self, store: Store) -> None:
        """project() gives one dict per item with the asked keys in the asked order, {} for none."""
        store.append(
            "s",
            [
                MemoryItem(step=1, action="click", image="x" * 5000, cost=0.30000000000000004),
                Step(step=2, when=dt.date(2024, 5, 1), pair=(1, 2)),
                MemoryItem(note="no step"),
            ],
        )
        assert store.project("s", ["cost", "step", "when", "pair"]) == [
            {"cost": 0.30000000000000004, "step": 1},
            {"cost": 0.0, "step": 2, "when": dt.date(2024, 5, 1), "pair": (1, 2)},
            {},
        ]

    def test_project_with_steps_matches_step_filter(self, store: Store) -> None:
        """project(steps=...) keeps the items read(steps=...) keeps."""
        store.append("s", [MemoryItem(step=s, action=f"a{s}", big="y" * 100) for s in range(5)])
        assert store.project("s", ["action"], steps=[1, 3]) == [{"action": "a1"}, {"action": "a3"}]
        assert store.project("s", ["action"], steps=[]) == []

    def test_project_keeps_exact_values(self, store: Store) -> None:
        """Projected values equal the stored ones: big ints, nested JSON, unicode, keys with quotes."""
        item = MemoryItem(
            step=1,
            pad="p" * 5000,  # a large row, which PostgreSQL cuts down on the server
            n=2**70,
            nested={"a": [1, {"b": None}], "t": True},
            text='héllo \u2603 "quoted"',
            **{'we"ird key': 1.5e300},
        )
        store.append("s", [item])
        plain = MemoryItem(step=2, pad="p" * 5000, f=0.1 + 0.2, ok=False, none=None, e=1e-7)
        store.append("s", [plain])
        keys = ["n", "nested", "text", 'we"ird key', "f", "ok", "none", "e"]
        assert store.project("s", keys) == [item.filter(keys), plain.filter(keys)]

    def test_project_rejects_non_string_keys(self, store: Store) -> None:
        """A non-string key is refused by name."""
        with pytest.raises(StoreArgumentError, match=r"string keys, got 3 \(int\)"):
            store.project("s", ["step", 3])  # type: ignore[list-item]  # the wrong type is the point

    def test_tail_returns_the_last_items_oldest_first(self, store: Store) -> None:
        """tail(n) gives the newest n items with their seqs, in seq order, as read() would end."""
        store.append("s", [MemoryItem(step=s, action=f"a{s}") for s in range(6)])
        store.delete_steps("s", [4])
        tail = store.tail("s", 3)
        assert [r.item for r in tail] == store.read("s")[-3:]
        assert [r.seq for r in tail] == [r.seq for r in store.records("s")][-3:]

    def test_tail_of_steps_keeps_the_last_of_those_steps(self, store: Store) -> None:
        """tail(n, steps=...) keeps the newest n items among those steps."""
        store.append("s", [MemoryItem(step=s % 3, n=s) for s in range(9)])
        assert [r.item["n"] for r in store.tail("s", 2, steps=[0, 1])] == [6, 7]
        assert store.tail("s", 2, steps=[]) == []

    def test_tail_beyond_the_session_and_of_zero(self, store: Store) -> None:
        """tail() longer than the session gives all of it; tail(0) and an unknown session give none."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        assert [r.item for r in store.tail("s", 10)] == store.read("s")
        assert store.tail("s", 0) == []
        assert store.tail("unknown", 3) == []

    def test_tail_of_any_count_beyond_64_bits_gives_the_session(self, store: Store) -> None:
        """tail(n) and pages(size=n) for n up to and past 2**63 (a caller's "all", sys.maxsize) give every item, filtered or not."""
        store.append("s", [MemoryItem(step=s) for s in range(3)])
        whole = store.read("s")
        for n in (2**62, 2**63 - 1, 2**63, 10**30):
            assert [r.item for r in store.tail("s", n)] == whole
            assert [r.item for r in store.tail("s", n, where={"step": {"$gte": 1}})] == whole[1:]
            assert [[r.item for r in page] for page in store.pages("s", size=n)] == [whole]

    def test_tail_refuses_a_negative_count(self, store: Store) -> None:
        """tail(-1) is refused with a message naming the count."""
        with pytest.raises(StoreArgumentError, match=r"0 or more, got -1"):
            store.tail("s", -1)

    def test_pages_cover_the_session_in_order(self, store: Store) -> None:
        """pages(size) yields every record once, in seq order, in pages of at most size."""
        store.append("s", [MemoryItem(step=s) for s in range(7)])
        store.delete_steps("s", [2])
        pages = list(store.pages("s", size=3))
        assert [len(page) for page in pages] == [3, 3]
        assert [r for page in pages for r in page] == store.records("s")
        assert list(store.pages("unknown")) == []

    def test_pages_refuse_a_size_below_one(self, store: Store) -> None:
        """pages(size=0) is refused with a message naming the size."""
        with pytest.raises(StoreArgumentError, match=r"1 or more items, got 0"):
            store.pages("s", size=0)

    def test_summary_counts_what_the_items_say(self, store: Store) -> None:
        """summary() says what SessionSummary.of the session's items says."""
        store.append("s", summary_session())
        assert store.summary("s") == SessionSummary.of([summary_session()])
        assert store.summary("s") == SessionSummary(
            items=6,
            steps=4,
            first_step=1,
            last_step=3,
            cost=2.75,
            fields={"step": 5, "cost": 5, "action": 3, "when": 1, "note": 1, "extra": 1},
        )

    def test_summary_after_deletes_and_of_an_unknown_session(self, store: Store) -> None:
        """summary() follows deletes, and an unknown session counts as empty."""
        store.append("s", summary_session())
        store.delete_steps("s", [1, 3])
        assert store.summary("s") == SessionSummary.of([store.read("s")])
        assert store.summary("nobody") == SessionSummary(0, 0, None, None, 0.0, {})

    def test_summary_reads_steps_by_the_session_step_key(self, store: Store) -> None:
        """summary() counts steps under the key the session was created with, and sums cost_key."""
        store.append("s", [MemoryItem(turn=n % 2, price=n / 2) for n in range(4)], step_key="turn")
        counts = store.summary("s", cost_key="price")
        assert (counts.steps, counts.first_step, counts.last_step, counts.cost) == (2, 0, 1, 3.0)

    def test_threads_sharing_one_handle_get_every_write_and_distinct_seqs(
        self, store: Store
    ) -> None:
        """Four threads appending and reading through one handle at once: every item lands once, under its own seq."""

        def work(thread: int) -> list[int]:
            seqs: list[int] = []
            for n in range(8):
                seqs += store.append("s", [MemoryItem(step=n, thread=thread)])
                assert len(store.read("s")) >= len(seqs)
            return seqs

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            written = [seq for seqs in pool.map(work, range(4)) for seq in seqs]
        assert len(set(written)) == 32
        records = store.records("s")
        assert [record.seq for record in records] == sorted(written)
        assert sorted((r.item["thread"], r.item["step"]) for r in records) == [
            (thread, n) for thread in range(4) for n in range(8)
        ]

    def test_batch_applies_its_writes_in_one_go(self, make_store: MakeStore) -> None:
        """A write batch stages clear, deletes, updates and appends and applies them on exit."""
        with make_store() as store:
            first = store.append("s", [MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=3)])
            with store.batch("s") as batch:
                batch.delete([first[0]])
                batch.update({first[1]: MemoryItem(step=2, note="changed")})
                batch.append([MemoryItem(step=4)])
                assert batch.appended == []
            assert len(batch.appended) == 1
            assert [item.to_dict() for item in store.read("s")] == [
                {"step": 2, "note": "changed"},
                {"step": 3},
                {"step": 4},
            ]

    def test_batch_left_by_an_exception_writes_nothing(self, make_store: MakeStore) -> None:
        """A batch whose with-block raises leaves the session as it was."""
        with make_store() as store:
            store.append("s", [MemoryItem(step=1)])

            def stage_then_fail() -> None:
                with store.batch("s") as batch:
                    batch.clear()
                    batch.append([MemoryItem(step=9)])
                    raise RuntimeError("stop")

            with pytest.raises(RuntimeError, match="stop"):
                stage_then_fail()
            assert steps_of(store.read("s")) == [1]

    def test_batch_reports_updated_and_deleted_seqs(self, store: Store) -> None:
        """After a batch, updated and deleted hold the seqs that existed, appended the new ones."""
        first = store.append("s", [MemoryItem(step=i) for i in range(4)])
        with store.batch("s") as batch:
            batch.delete([first[0], 10**9])
            batch.update({first[1]: MemoryItem(step=1, note="x"), 10**9 + 1: MemoryItem(step=9)})
            batch.append([MemoryItem(step=4)])
            batch.keep_last(3)
        assert batch.updated == [first[1]]
        assert batch.deleted == [first[0], first[1]]
        assert len(batch.appended) == 1
        assert batch.appended[0] > first[-1]
        assert steps_of(store.read("s")) == [2, 3, 4]

    # -- keyword search -----------------------------------------------------------------

    def test_search_ranks_by_bm25_best_first(self, store: Store) -> None:
        """search ranks the items holding a query word by BM25: more occurrences in a shorter text first."""
        store.append("s", search_session())
        hits = store.search("s", "file")
        assert [hit.item["step"] for hit in hits] == [1, 0]
        assert hits[0].score > hits[1].score > 0

    def test_search_keys_limit_the_fields_searched(self, store: Store) -> None:
        """With keys, only those fields (nested strings included) are searched."""
        store.append("s", search_session())
        assert [hit.item["step"] for hit in store.search("s", "click")] == [2, 3]
        assert [hit.item["step"] for hit in store.search("s", "click", keys=["obs"])] == [3]

    def test_search_returns_at_most_k_hits_with_seqs(self, store: Store) -> None:
        """k caps the hits, and each hit carries the seq the store gave its item."""
        seqs = store.append("s", search_session())
        hits = store.search("s", "file click", k=1)
        assert [(hit.seq, hit.item["step"]) for hit in hits] == [(seqs[1], 1)]

    def test_search_ties_keep_session_order(self, store: Store) -> None:
        """Items with equal scores come in the order they were appended."""
        store.append("s", [MemoryItem(step=i, action="same words") for i in (5, 3, 4)])
        assert [hit.item["step"] for hit in store.search("s", "words")] == [5, 3, 4]

    def test_search_sees_updates_deletes_and_clears(self, store: Store) -> None:
        """Changed, deleted and cleared items are searched as they are now, never as they were."""
        seqs = store.append("s", search_session())
        with store.batch("s") as batch:
            batch.update({seqs[2]: MemoryItem(step=2, action="save the file")})
            batch.delete([seqs[1]])
        assert [hit.item["step"] for hit in store.search("s", "file")] == [0, 2]
        assert [hit.item["step"] for hit in store.search("s", "click")] == [3]
        store.clear("s")
        assert store.search("s", "file") == []

    def test_search_of_an_unknown_session_has_no_hits(self, store: Store) -> None:
        """Searching a session that does not exist finds nothing."""
        assert store.search("nobody", "file") == []

    @pytest.mark.parametrize(
        ("query", "k", "message"),
        [
            ("", 5, "must not be empty"),
            ("?!", 5, "holds no word"),
            ("file", 0, "k must be an int >= 1"),
        ],
    )
    def test_search_refuses_a_bad_query(
        self, store: Store, query: str, k: int, message: str
    ) -> None:
        """An empty query, one without words and k below 1 are named errors."""
        store.append("s", search_session())
        with pytest.raises(InvalidQueryError, match=message):
            store.search("s", query, k)

    def test_search_ranks_as_memory_search(self, store: Store) -> None:
        """search ranks a session as Memory.search ranks the same items, query by query."""
        store.append("s", ranking_corpus())
        assert_ranks_as_memory(store, "s")

    def test_search_statistics_are_the_sessions_own(self, store: Store) -> None:
        """Item count, lengths and document frequencies come from the searched session alone."""
        store.append("a", ranking_corpus())
        store.append("b", [MemoryItem(step=i, note="file report the") for i in range(30)])
        store.append("c", ranking_corpus()[:3])
        for session in ("a", "b", "c"):
            assert_ranks_as_memory(store, session)

    @pytest.mark.parametrize("k", [1, 2, 3])
    def test_search_top_k_is_memory_search_top_k(self, store: Store, k: int) -> None:
        """The k best hits are Memory.search's k best, also when common words join rare ones."""
        items = [
            MemoryItem(step=i, note=f"the dialog {'report ' * (i % 4)}step {i % 3}", n=i)
            for i in range(40)
        ]
        store.append("s", items)
        store.append("other", items[:5])
        memory = Memory()
        memory.add_memory_items(store.read("s"))
        for query in ("the report", "report dialog step 2", "the dialog 1", "step"):
            got = [(hit.item["n"], hit.score) for hit in store.search("s", query, k)]
            want = [(hit.item["n"], hit.score) for hit in memory.search(query, k)]
            assert [n for n, _ in got] == [n for n, _ in want], query
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)

    @pytest.mark.parametrize("k", [1, 2, 5])
    def test_search_and_ranking_with_where_are_memory_search_with_where(
        self, store: Store, k: int
    ) -> None:
        """where= keeps the best k hits that pass the filter, as Memory.search(where=) does."""
        items = [
            MemoryItem(
                step=i,
                note=f"the dialog {'report ' * (i % 4)}step {i % 3}",
                n=i % 5,
                kind="ab"[i % 2],
            )
            for i in range(40)
        ]
        store.append("s", items)
        store.append("other", items[:5])
        memory = Memory()
        memory.add_memory_items(store.read("s"))
        wheres: list[dict[str, Any]] = [
            {"n": {"$gte": 3}},
            {"$or": [{"kind": "b", "n": {"$ne": 1}}, {"step": {"$in": [0, 38]}}]},
            {"step": {"$gt": 36}},
            {"missing": 1},
        ]
        for where in wheres:
            for query in ("the report", "report dialog step 2"):
                got = store.search("s", query, k, where=where)
                want = memory.search(query, k, where=where)
                assert [h.item["step"] for h in got] == [h.item["step"] for h in want], where
                assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-9)
                ranked = store.ranking("s", query, k, where=where)
                assert ranked == [(h.seq, h.score) for h in got]

    def test_search_with_a_rare_filter_is_memory_search(self, store: Store) -> None:
        """Filters that few of 1,200 items pass (where a backend may narrow the rows first) keep Memory.search's hits."""
        items = [
            MemoryItem(
                step=i,
                note=f"the dialog {'report ' * (i % 3)}",
                cost=i % 400,
                kind="ab"[i % 2],
                **({"tag": None} if i % 150 == 0 else {}),
            )
            for i in range(1200)
        ]
        store.append("s", items)
        memory = Memory()
        memory.add_memory_items(store.read("s"))
        wheres: list[dict[str, Any]] = [
            {"cost": 399},
            {"cost": {"$gt": 396}, "kind": "a"},
            {"cost": -1},
            {"$or": [{"cost": 7}, {"tag": None}]},
            {"cost": {"$in": [3, 5]}, "tag": {"$ne": None}},
        ]
        for where in wheres:
            for k in (1, 5):
                got = store.search("s", "report dialog", k, where=where)
                want = memory.search("report dialog", k, where=where)
                assert [h.item["step"] for h in got] == [h.item["step"] for h in want], where
                ranked = store.ranking("s", "report dialog", k, where=where)
                assert ranked == [(h.seq, h.score) for h in got]

    @pytest.mark.parametrize("k", [1, 3, 10])
    def test_search_of_common_words_across_sessions_is_memory_search(
        self, store: Store, k: int
    ) -> None:
        """Queries of common words (and rare words found in fewer than k items) give Memory.search's k best in sessions of different shapes."""
        store.append("short", common_words_session())
        store.append("long", common_words_session(seed=2, items=300, length=(30, 60)))
        for session in ("short", "long"):
            memory = Memory()
            memory.add_memory_items(store.read(session))
            for query in COMMON_WORD_QUERIES:
                got = [(hit.item["n"], hit.score) for hit in store.search(session, query, k)]
                want = [(hit.item["n"], hit.score) for hit in memory.search(query, k)]
                assert [n for n, _ in got] == [n for n, _ in want], (session, query)
                assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)

    def test_search_of_any_number_of_words_and_terms_ranks_as_memory(self, store: Store) -> None:
        """Queries of 2,500 distinct words and items of 30,000 distinct terms rank as Memory.search."""
        items = [
            MemoryItem(step=i, note=" ".join(f"w{(i * 13 + j) % 2500}" for j in range(30)))
            for i in range(40)
        ]
        items.append(MemoryItem(step=40, note=" ".join(f"big{j}" for j in range(30_000)) + " w7"))
        store.append("s", items)
        store.append("other", items[:5])  # statistics of several sessions in one index
        assert_ranks_as_memory(
            store,
            "s",
            (
                " ".join(f"w{j}" for j in range(2500)),
                " ".join(f"big{j}" for j in range(0, 30_000, 11)),
                "w7 big29999",
            ),
        )

    def test_search_follows_updates_deletes_and_trims(self, store: Store) -> None:
        """After updates, deletes, keep_last and expire the ranking is that of the items left."""
        seqs = store.append("s", ranking_corpus())
        store.append("other", ranking_corpus())
        with store.batch("s") as batch:
            batch.update(
                {seqs[0]: MemoryItem(step=0, note="report"), seqs[3]: MemoryItem(step=3, a="file")}
            )
            batch.delete([seqs[1], seqs[7]])
        assert_ranks_as_memory(store, "s")
        store.delete_steps("s", [2])
        assert_ranks_as_memory(store, "s")
        store.keep_last("s", 4)
        assert_ranks_as_memory(store, "s")
        store.append("s", [MemoryItem(step=10, thought="file report")])
        store.expire("s", 3600)
        assert_ranks_as_memory(store, "s")
        store.expire("s", 0)
        assert store.search("s", "file") == []
        assert_ranks_as_memory(store, "other")

    def test_search_follows_clear_and_a_recreated_session(self, store: Store) -> None:
        """A cleared session, and one deleted and created again, rank only their new items."""
        store.append("s", ranking_corpus())
        store.clear("s")
        assert store.search("s", "file") == []
        store.append("s", ranking_corpus()[:4])
        assert_ranks_as_memory(store, "s")
        store.delete_session("s")
        assert store.search("s", "file") == []
        store.append("s", ranking_corpus()[4:])
        assert_ranks_as_memory(store, "s")

    def test_search_is_the_same_from_another_and_a_reopened_handle(
        self, make_store: MakeStore
    ) -> None:
        """A second handle, and a handle opened after the first was closed, rank the same."""
        with make_store() as first:
            first.append("s", ranking_corpus())
            want = [(hit.seq, hit.score) for hit in first.search("s", "the file", 10)]
            with make_store() as second:
                assert [(hit.seq, hit.score) for hit in second.search("s", "the file", 10)] == want
                second.append("s", [MemoryItem(step=11, note="file file file")])
            assert first.search("s", "file", 1)[0].item["step"] == 11
        with make_store(read_only=True) as reopened:
            assert_ranks_as_memory(reopened, "s")

    def test_keyword_among_scores_chosen_rows_as_keyword_top_does(self, store: Store) -> None:
        """A backend that answers keyword_among gives chosen rows the (score, seq) keyword_top gives them, in its order."""
        store.append("s", ranking_corpus())
        seqs = [record.seq for record in store.records("s")]
        chosen = [*seqs[::3], max(seqs) + 1000]  # and a seq the session does not hold
        backend = store.backend
        for terms in (["file"], ["the", "file", "file"], ["missing"]):
            among = backend.keyword_among("s", terms, chosen)
            every = backend.keyword_top("s", terms, len(seqs))
            if among is None or every is None:
                continue  # the store ranks with keyword_top, or scores the session itself
            assert among == [(score, seq) for score, seq in every if seq in chosen], terms

    def test_search_scope_answers_as_the_calls_outside_it_and_keeps_nothing_past_it(
        self, make_store: MakeStore
    ) -> None:
        """Inside search_scope a ranking's later calls (frequencies, chosen rows' scores, count) answer as they do outside it; a scope after another handle's write sees the write."""
        terms = ["the", "file", "file", "report"]
        with make_store() as store, make_store() as other:
            store.append("s", ranking_corpus())
            backend = store.backend
            seqs = [record.seq for record in store.records("s")]

            def answers() -> tuple[object, ...]:
                return (
                    backend.keyword_top("s", terms, 3),
                    backend.keyword_frequencies("s", terms),
                    backend.keyword_among("s", terms, seqs[::2]),
                    backend.count("s"),
                )

            outside = answers()
            with backend.search_scope("s"):
                assert answers() == outside
            other.append("s", [MemoryItem(step=20, note="file report file")] * 3)
            with backend.search_scope("s"):
                after = answers()
            outside_after = answers()
        assert after == outside_after
        assert after[3] == len(seqs) + 3

    def test_keyword_frequencies_count_the_session_items_keyword_top_ranks(
        self, store: Store
    ) -> None:
        """A backend that answers keyword_frequencies counts, for each term, the session's items keyword_top ranks for it alone (not another session's)."""
        store.append("s", ranking_corpus())
        store.append("other", [*ranking_corpus(), MemoryItem(note="missing file")])
        store.append("s", [MemoryItem(step=10, note="file report")])  # a few rows after the first
        backend = store.backend
        terms = ["file", "the", "file", "report", "missing", "zzz"]
        for sid in ("s", "other", "unknown"):
            counted = backend.keyword_frequencies(sid, terms)
            if counted is None:
                continue  # the store ranks each term with keyword_top
            for term in dict.fromkeys(terms):  # a term no item holds may be left out
                ranked = backend.keyword_top(sid, [term], 10_000) or []
                assert counted.get(term, 0) == len(ranked), (sid, term)

    def test_keyword_held_tells_the_query_terms_each_row_holds_as_keyword_top_ranks_them(
        self, store: Store
    ) -> None:
        """A backend that answers keyword_held gives each chosen row the query terms keyword_top ranks it for, leaving out none it holds."""
        store.append("s", ranking_corpus())
        store.append("other", [MemoryItem(note="missing file report")])
        seqs = [record.seq for record in store.records("s")]
        chosen = [*seqs[::2], max(seqs) + 1000]  # and a seq the session does not hold
        backend = store.backend
        terms = ["file", "the", "file", "report", "missing", "zzz"]
        held = backend.keyword_held("s", terms, chosen)
        if held is None:
            return  # the store reads and tokenizes the hits itself
        for seq in chosen:
            expected = {
                term
                for term in terms
                if seq in {hit for _, hit in backend.keyword_top("s", [term], 10_000) or []}
            }
            assert held.get(seq, set()) == expected, seq

    def test_read_rows_terms_give_each_row_with_the_terms_keyword_search_counts(
        self, store: Store
    ) -> None:
        """A backend that answers read_rows_terms gives the session's rows in seq order, each with the default tokenizer's terms of its item, after an update too."""
        store.append(
            "s", [*ranking_corpus(), MemoryItem(step=9), MemoryItem(note="Ünïcode ß 中文")]
        )
        store.append("other", [MemoryItem(note="missing file report")])
        first = store.records("s")[0]
        with store.batch("s") as batch:
            batch.update({first.seq: MemoryItem(step=1, note="changed words")})
        rows = store.backend.read_rows_terms("s")
        if rows is None:
            return  # the backend keeps no terms: Store.read_memory reads the items alone
        records = store.records("s")
        assert [seq for seq, _, _ in rows] == [record.seq for record in records]
        tokenize = Tokenizer()
        for (_, _, terms), record in zip(rows, records, strict=True):
            texts = [text for _, text in item_texts(record.item.to_dict(), None)]
            assert (terms.split(" ") if terms else []) == tokenize("\n".join(texts)), record.seq
        assert store.backend.read_rows_terms("unknown") == []

    def test_keyword_top_where_ranks_the_rows_that_may_pass_as_keyword_top_does(
        self, store: Store
    ) -> None:
        """A backend that answers keyword_top_where gives keyword_top's (score, seq), in its order, to rows that may pass, leaving out none that passes."""
        from agents.memory.search import Filter

        store.append("s", ranking_corpus())
        records = store.records("s")
        backend = store.backend
        for where in ({"step": {"$gte": 5}}, {"action": "open"}, {"args.x": 1}, {"n": 99}):
            keep = Filter.of(where)
            assert keep is not None
            passing = {record.seq for record in records if keep(record.item)}
            for terms in (["file"], ["the", "file", "file"], ["missing"]):
                every = backend.keyword_top("s", terms, len(records))
                for k in (1, 2, len(records)):
                    ranked = backend.keyword_top_where("s", terms, k, keep.tree)
                    if ranked is None or every is None:
                        continue  # the store filters keyword_top's ranking, or scores itself
                    assert ranked == [hit for hit in every if hit in ranked], (where, terms, k)
                    kept = [hit for hit in ranked if hit[1] in passing]
                    best = [hit for hit in every if hit[1] in passing]
                    # The best rows that pass, all of them when the ranking holds every candidate.
                    assert kept == best[: len(best) if len(ranked) < k else len(kept)], (where, k)

    def test_filter_among_keeps_every_row_among_the_seqs_that_passes(self, store: Store) -> None:
        """A backend that answers filter_among keeps, among the seqs asked, every row that passes and no row outside them."""
        from agents.memory.search import Filter

        store.append("s", ranking_corpus())
        records = store.records("s")
        seqs = [record.seq for record in records]
        chosen = [*seqs[::2], max(seqs) + 1000]  # and a seq the session does not hold
        backend = store.backend
        for where in ({"step": {"$gte": 5}}, {"action": "open"}, {"args.x": 1}, {"n": 99}):
            keep = Filter.of(where)
            assert keep is not None
            passing = {record.seq for record in records if keep(record.item)}
            may = backend.filter_among("s", keep.tree, chosen)
            if may is None:
                continue  # the store reads and tests every row of the ranking
            assert passing & set(chosen) <= may, where
            assert may <= set(chosen), where
            assert backend.filter_among("s", keep.tree, []) in (None, set()), where

    def test_filter_among_rows_reads_the_rows_filter_among_answers(self, store: Store) -> None:
        """filter_among_rows gives (seq, data) of the rows filter_among answers, as read_seqs reads them (or None: asked apart)."""
        from agents.memory.search import Filter

        store.append("s", ranking_corpus())
        seqs = [record.seq for record in store.records("s")]
        chosen = [*seqs[::2], max(seqs) + 1000]  # and a seq the session does not hold
        backend = store.backend
        for where in ({"step": {"$gte": 5}}, {"action": "open"}, {"args.x": 1}, {"n": 99}):
            keep = Filter.of(where)
            assert keep is not None
            may = backend.filter_among("s", keep.tree, chosen)
            rows = backend.filter_among_rows("s", keep.tree, chosen)
            if rows is None:
                continue  # the store asks filter_among, then reads the rows that may pass
            assert may is not None, where
            assert sorted(rows) == backend.read_seqs("s", sorted(may)), where
            assert backend.filter_among_rows("s", keep.tree, []) in (None, []), where

    # -- search across sessions ------------------------------------------------------------

    def test_search_sessions_scores_equal_memory_search_over_the_union(self, store: Store) -> None:
        """Every hit of a store-wide keyword search equals Memory.search over the sessions' items joined in session-id order (scores ==)."""
        fill_sessions(store)
        if store.keyword_index:  # answered by the index, not by reading the sessions
            assert type(store.backend).keyword_top_sessions is not Backend.keyword_top_sessions
        for query in (*SESSION_QUERIES, *COMMON_WORD_QUERIES):
            for k in (1, 4, 1000):
                assert session_hits(store.search_sessions(query, k)) == union_hits(
                    store, store.sessions(), query, k
                ), (query, k)

    def test_search_sessions_weighs_a_word_by_every_session_searched(self, store: Store) -> None:
        """A word rare in a large session and better matched in a small one ranks the small one's item first, as over the union."""
        fill_sessions(store)
        # Each session's own statistics rank the large session's item first (scores not comparable).
        alone = store.search("a-large", "invoice format", 1)[0].score
        assert alone > store.search("b-small", "invoice format", 1)[0].score
        hits = store.search_sessions("invoice format", 3)
        assert [(hit.session_id, hit.item["note"]) for hit in hits] == [
            ("b-small", "the invoice format of ann"),
            ("b-small", "ann asked about the invoice total"),
            ("a-large", "invoice number 7 seen in the report"),
        ]
        assert session_hits(hits) == union_hits(store, store.sessions(), "invoice format", 3)

    @pytest.mark.parametrize(
        ("scope", "chosen"),
        [
            ({}, ["a-large", "a-mid", "b-small", "c-plain"]),
            ({"sessions": ["b-small", "a-mid", "nobody"]}, ["a-mid", "b-small"]),
            ({"prefix": "a-"}, ["a-large", "a-mid"]),
            ({"metadata": {"user": "ann"}}, ["a-mid", "b-small"]),
            ({"metadata": {"runs": {"$gte": 2}}}, ["a-large", "b-small"]),
            ({"prefix": "a-", "metadata": {"user": "ann"}}, ["a-mid"]),
            ({"sessions": ["a-large", "b-small"], "prefix": "b"}, ["b-small"]),
            ({"sessions": ["nobody"]}, []),
            ({"sessions": []}, []),
            ({"prefix": "zz"}, []),
        ],
    )
    def test_search_sessions_scope_forms_search_exactly_their_sessions(
        self, store: Store, scope: dict[str, Any], chosen: list[str]
    ) -> None:
        """Ids, prefix and metadata filter (combined with AND) choose the sessions, whose union alone gives the statistics."""
        fill_sessions(store)
        for query in SESSION_QUERIES:
            got = store.search_sessions(query, 1000, **scope)
            assert session_hits(got) == union_hits(store, chosen, query, 1000), (scope, query)
            assert {hit.session_id for hit in got} <= set(chosen)

    def test_search_sessions_with_where_and_keys_is_memory_search(self, store: Store) -> None:
        """A filter on items and a search of some fields give Memory.search's hits over the union."""
        fill_sessions(store)
        wheres: list[Any] = [{"step": {"$lt": 5}}, {"kind": "rare"}, lambda item: "n" in item]
        for where in wheres:
            for query in SESSION_QUERIES:
                for k in (1, 3, 1000):
                    got = store.search_sessions(query, k, where=where)
                    want = union_hits(store, store.sessions(), query, k, where=where)
                    assert session_hits(got) == want, (where, query, k)
        for query in SESSION_QUERIES:
            got = store.search_sessions(query, 50, keys=["note"], prefix="a")
            want = union_hits(store, ["a-large", "a-mid"], query, 50, keys=["note"])
            assert session_hits(got) == want, query

    def test_search_sessions_of_one_session_is_that_sessions_search(self, store: Store) -> None:
        """With one session in scope the hits are Store.search's, seqs and scores included."""
        fill_sessions(store)
        for query in SESSION_QUERIES:
            got = store.search_sessions(query, 10, sessions=["a-large"])
            want = store.search("a-large", query, 10)
            assert [(h.seq, h.item.to_dict(), h.score) for h in got] == [
                (h.seq, h.item.to_dict(), h.score) for h in want
            ]
            assert {hit.session_id for hit in got} <= {"a-large"}

    def test_search_sessions_follows_writes_to_any_session(self, store: Store) -> None:
        """After appends, updates and deletes in some sessions, the ranking is that of the items left."""
        fill_sessions(store)
        store.append("b-small", [MemoryItem(step=9, note="invoice invoice format")])
        store.delete_steps("a-large", [3, 4, 5])
        store.delete_session("c-plain")
        for query in SESSION_QUERIES:
            assert session_hits(store.search_sessions(query, 100)) == union_hits(
                store, store.sessions(), query, 100
            ), query

    def test_search_sessions_from_a_read_only_handle_sees_another_handles_writes(
        self, make_store: MakeStore
    ) -> None:
        """A read-only handle ranks the rows another handle just wrote (not yet folded into any index) as Memory.search does."""
        with make_store() as writer:
            fill_sessions(writer)
            writer.append("b-small", [MemoryItem(step=5, note="invoice again in the report")])
            with make_store(read_only=True) as reader:
                for query in SESSION_QUERIES:
                    assert session_hits(reader.search_sessions(query, 50)) == union_hits(
                        reader, reader.sessions(), query, 50
                    ), query

    def test_search_sessions_ties_go_by_session_id_then_seq(self, store: Store) -> None:
        """Equal scores rank by session id, then seq, whichever session was written first."""
        same = [
            MemoryItem(step=i, note=f"the report {'pdf' if i % 3 else 'doc'}") for i in range(90)
        ]
        for sid in ("s-c", "s-b", "s-a"):  # written in reverse id order
            store.append(sid, same)
        for k in (1, 2, 5, 40, 100):
            hits = store.search_sessions("report pdf", k)
            assert session_hits(hits) == union_hits(store, store.sessions(), "report pdf", k)
            assert [hit.session_id for hit in hits] == ["s-a"] * min(k, 60) + ["s-b"] * max(
                0, min(k, 120) - 60
            )

    def test_search_sessions_of_an_empty_store_has_no_hits(self, store: Store) -> None:
        """A store without sessions, or a scope of unknown sessions, gives no hit."""
        assert store.search_sessions("invoice") == []
        store.append("s", [MemoryItem(step=1, note="invoice")])
        assert store.search_sessions("invoice", sessions=["t"]) == []

    def test_search_sessions_refuses_bad_scopes_and_queries(self, store: Store) -> None:
        """A string for sessions, a prefix that is no string, a bad filter, query or id are refused before reading."""
        with pytest.raises(StoreArgumentError, match=r"pass \['run-1'\] for one session"):
            store.search_sessions("x", sessions="run-1")
        with pytest.raises(StoreArgumentError, match="prefix takes the start of a session id"):
            store.search_sessions("x", prefix=3)  # type: ignore[arg-type]  # the wrong type on purpose
        with pytest.raises(InvalidQueryError, match="metadata takes a filter"):
            store.search_sessions("x", metadata=3)  # type: ignore[arg-type]  # the wrong type on purpose
        with pytest.raises(InvalidQueryError, match=r"\$bogus"):
            store.search_sessions("x", metadata={"user": {"$bogus": 1}})
        with pytest.raises(InvalidQueryError, match="holds no word"):
            store.search_sessions("!!")
        with pytest.raises(InvalidSessionIdError):
            store.search_sessions("x", sessions=[""])
        with pytest.raises(InvalidQueryError, match="mode='keyword', 'semantic' or 'hybrid'"):
            store.search_sessions("x", mode="fuzzy")  # type: ignore[arg-type]  # the wrong mode on purpose

    def test_recall_sessions_of_one_session_is_stored_memory_recall(
        self, make_store: MakeStore
    ) -> None:
        """Recall over one session gives StoredMemory.recall's items; across sessions, hits and each session's window by session."""
        from agents.memory.prompt import Window
        from agents.memory.stores import StoredMemory

        with make_store() as store:
            fill_sessions(store)
            window = Window(max_items=2)
            for query in SESSION_QUERIES:
                got = store.recall_sessions(query, 3, sessions=["a-mid"], recent=window)
                want = StoredMemory(store, "a-mid").recall(query, 3, recent=window)
                assert {s: [i.to_dict() for i in items] for s, items in got.items()} == {
                    "a-mid": [item.to_dict() for item in want]
                }
            got = store.recall_sessions("invoice format", 2, prefix="b", recent=window)
            assert [item["note"] for item in got["b-small"]] == [
                "the invoice format of ann",
                "ann asked about the invoice total",
                "the report was sent",
            ]
            hits = store.recall_sessions("invoice format", 3, sessions=["a-large", "b-small"])
            assert {sid: [item["note"] for item in items] for sid, items in hits.items()} == {
                "a-large": ["invoice number 7 seen in the report"],
                "b-small": ["the invoice format of ann", "ann asked about the invoice total"],
            }

    @pytest.mark.usefixtures("numpy_installed")
    def test_search_sessions_semantic_and_hybrid_rank_as_memory_search(self, store: Store) -> None:
        """Semantic and hybrid hits across sessions are Memory.search's over the union (scores to float32 precision)."""
        items = vector_session()
        store.append("v1", items[:3])
        store.append("v2", items[3:])
        store.append("v3", [MemoryItem(step=1, thought="send the report by email today")])
        for mode in VECTOR_MODES:
            for query in VECTOR_QUERIES:
                for where in (None, {"step": {"$gte": 1}}):
                    got = store.search_sessions(query, 4, mode=mode, embedder=EMBEDDER, where=where)
                    want = union_hits(
                        store, store.sessions(), query, 4, mode=mode, embedder=EMBEDDER, where=where
                    )
                    assert [h[:3] for h in session_hits(got)] == [h[:3] for h in want]
                    assert [h[3] for h in session_hits(got)] == pytest.approx(
                        [h[3] for h in want], rel=1e-5, abs=1e-6
                    )

    def test_ranking_gives_the_seqs_and_scores_of_search(self, store: Store) -> None:
        """ranking returns (seq, score) of search's hits, best first, without the items."""
        store.append("s", ranking_corpus())
        hits = store.search("s", "the file report", 4)
        assert store.ranking("s", "the file report", 4) == [(hit.seq, hit.score) for hit in hits]
        assert store.ranking("nobody", "file") == []

    # -- session metadata -------------------------------------------------------------

    def test_unknown_session_has_no_info(self, store: Store) -> None:
        """session_info of a session that does not exist is None."""
        assert store.session_info("never") is None

    def test_appended_session_has_info_with_empty_metadata(self, store: Store) -> None:
        """A session created by an append records its step key, no metadata and a UTC time."""
        store.append("s", [MemoryItem(Step=1)], step_key="Step")
        info = store.session_info("s")
        assert isinstance(info, SessionInfo)
        assert (info.session_id, info.step_key, info.metadata) == ("s", "Step", {})
        assert info.created.tzinfo is dt.timezone.utc

    def test_set_metadata_creates_the_session(self, store: Store) -> None:
        """set_metadata on a new session creates it, listed, with no items."""
        store.set_metadata("s", {"agent": "planner"}, step_key="turn")
        info = store.session_info("s")
        assert info is not None
        assert (info.step_key, info.metadata) == ("turn", {"agent": "planner"})
        assert store.sessions() == ["s"]
        assert store.count("s") == 0

    def test_metadata_round_trips_every_codec_type(self, make_store: MakeStore) -> None:
        """Metadata of every codec type comes back equal, also after closing and reopening."""
        metadata: dict[str, Any] = {
            f"k{i}": item.to_dict() for i, item in enumerate(every_codec_type())
        }
        metadata["float"] = [1e16, -0.0, 0.1 + 0.2]
        with make_store() as store:
            store.set_metadata("s", metadata)
            info = store.session_info("s")
            assert info is not None
            assert same(info.metadata, metadata)
        with make_store() as again:
            info = again.session_info("s")
            assert info is not None
            assert same(info.metadata, metadata)

    def test_set_metadata_replaces_and_keeps_items(self, store: Store) -> None:
        """A second set_metadata replaces the metadata as a whole and leaves the items."""
        store.append("s", [MemoryItem(step=1)])
        store.set_metadata("s", {"a": 1, "b": 2})
        store.set_metadata("s", {"c": 3})
        info = store.session_info("s")
        assert info is not None
        assert info.metadata == {"c": 3}
        assert steps_of(store.read("s")) == [1]

    def test_set_metadata_with_other_step_key_is_refused(self, store: Store) -> None:
        """set_metadata checks the step key of an existing session and writes nothing."""
        store.set_metadata("s", {"a": 1}, step_key="Step")
        with pytest.raises(StoreError, match="step_key='Step'"):
            store.set_metadata("s", {"a": 2})
        info = store.session_info("s")
        assert info is not None
        assert info.metadata == {"a": 1}

    def test_unencodable_metadata_writes_nothing(self, store: Store) -> None:
        """Metadata holding a value the codec refuses raises and creates nothing."""
        with pytest.raises(SerializationError, match="Metadata of session 's'"):
            store.set_metadata("s", {"obj": object()})
        assert store.session_info("s") is None

    def test_metadata_with_a_non_string_key_is_refused(self, store: Store) -> None:
        """Metadata keys must be strings."""
        with pytest.raises(StoreArgumentError, match=r"key 1 \(int\)"):
            store.set_metadata("s", {1: "one"})  # type: ignore[dict-item]  # the wrong type is the point

    def test_deleted_session_loses_its_metadata(self, store: Store) -> None:
        """A session deleted and created again starts with empty metadata."""
        store.set_metadata("s", {"a": 1})
        store.delete_session("s")
        assert store.session_info("s") is None
        store.append("s", [MemoryItem(step=1)])
        info = store.session_info("s")
        assert info is not None
        assert info.metadata == {}

    # -- seqs and other handles ---------------------------------------------------------

    def test_recreated_session_never_reuses_a_seq(self, make_store: MakeStore) -> None:
        """A session deleted and created again gets seqs above every seq it had, also after reopening."""
        with make_store() as store:
            old = store.append("s", [MemoryItem(step=i) for i in range(3)])
            store.delete_session("s")
            new = store.append("s", [MemoryItem(step=9)])
            assert new[0] > old[-1]
        with make_store() as again:
            again.delete_session("s")
            newer = again.append("s", [MemoryItem(step=10)])
        assert newer[0] > new[0]

    def test_other_handle_sees_a_deleted_and_recreated_session(self, make_store: MakeStore) -> None:
        """A handle that read a session reads the new one after another handle deleted and recreated it."""
        with make_store() as reader, make_store() as writer:
            writer.append("s", [MemoryItem(step=i, pad="x" * 50) for i in range(5)])
            assert steps_of(reader.read("s")) == [0, 1, 2, 3, 4]
            writer.delete_session("s")
            writer.append("s", [MemoryItem(step=i) for i in range(7, 13)])
            assert steps_of(reader.read("s")) == [7, 8, 9, 10, 11, 12]
            assert reader.count("s") == 6

    def test_other_handle_sees_a_trimmed_session(self, make_store: MakeStore) -> None:
        """A handle that read a session sees another handle's deletes and later appends."""
        with make_store() as reader, make_store() as writer:
            writer.append("s", [MemoryItem(step=i) for i in range(100)])
            assert reader.count("s") == 100
            writer.keep_last("s", 2)
            writer.append("s", [MemoryItem(step=100)])
            assert steps_of(reader.read("s")) == [98, 99, 100]

    # -- arguments ------------------------------------------------------------------------

    @pytest.mark.parametrize("seq", [2**64, -(2**70), 2**63])
    def test_out_of_range_seq_is_a_named_error(self, store: Store, seq: int) -> None:
        """A seq beyond 64 bits raises StoreArgumentError and deletes nothing."""
        store.append("s", [MemoryItem(step=1)])
        with pytest.raises(StoreArgumentError, match="outside the 64-bit range"):
            store.delete_seqs("s", [seq])
        with pytest.raises(StoreArgumentError, match="outside the 64-bit range"):
            store.read("s", after=seq)
        assert store.count("s") == 1

    def test_bad_keep_last_is_refused(self, store: Store) -> None:
        """keep_last with a negative or huge n is refused by name."""
        store.append("s", [MemoryItem(step=1)])
        with pytest.raises(StoreArgumentError, match=r"n >= 0 \(an int\), got -1"):
            store.keep_last("s", -1)
        with pytest.raises(StoreArgumentError, match="n >= 0"):
            store.keep_last("s", 2**64)
        assert store.count("s") == 1

    # -- read-only handles ------------------------------------------------------------------

    def test_read_only_handle_reads_what_was_written(self, make_store: MakeStore) -> None:
        """A read-only handle reads items, sessions and metadata like any other."""
        with make_store() as store:
            store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
            store.set_metadata("s", {"a": 1})
        with make_store(read_only=True) as reader:
            assert reader.read_only is True
            assert reader.sessions() == ["s"]
            assert steps_of(reader.read("s")) == [1, 2]
            assert reader.project("s", ["step"]) == [{"step": 1}, {"step": 2}]
            info = reader.session_info("s")
            assert info is not None
            assert info.metadata == {"a": 1}

    @pytest.mark.parametrize(
        "write",
        [
            lambda s: s.append("s", [MemoryItem(step=3)]),
            lambda s: s.set_metadata("s", {}),
            lambda s: s.delete_seqs("s", [1]),
            lambda s: s.delete_steps("s", [1]),
            lambda s: s.clear("s"),
            lambda s: s.keep_last("s", 0),
            lambda s: s.expire("s", 0),
            lambda s: s.delete_session("s"),
            lambda s: s.batch("s"),
        ],
        ids=[
            "append",
            "set_metadata",
            "delete_seqs",
            "delete_steps",
            "clear",
            "keep_last",
            "expire",
            "delete_session",
            "batch",
        ],
    )
    def test_read_only_handle_refuses_every_write(
        self, make_store: MakeStore, write: Callable[[Store], object]
    ) -> None:
        """Every write call on a read-only handle raises StoreError and changes nothing."""
        with make_store() as store:
            store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        with (
            make_store(read_only=True) as reader,
            pytest.raises(StoreError, match="open read-only"),
        ):
            write(reader)
        with make_store() as store:
            assert steps_of(store.read("s")) == [1, 2]

    def test_every_session_reopens_read_only(self, make_store: MakeStore) -> None:
        """A read-only handle reopens every session as a memory holding the stored items, with metadata."""
        from agents.memory.stores._backed import StoredMemory

        with make_store() as store:
            store.append("a", search_session())
            store.append("b", summary_session())
            store.set_metadata("b", {"owner": "agent", "n": 2})
            store.append("c", [MemoryItem(turn=1, text="hi")], step_key="turn")
        with make_store(read_only=True) as reader:
            for sid in reader.sessions():
                info = reader.session_info(sid)
                assert info is not None
                memory = StoredMemory(reader, sid, step_key=info.step_key)
                assert [i.to_dict() for i in memory.content] == [
                    i.to_dict() for i in reader.read(sid)
                ]
                assert memory.metadata == info.metadata
                memory.reload()
                assert len(memory) == reader.count(sid)
                with pytest.raises(StoreError, match="open read-only"):
                    memory.add_memory_item(MemoryItem(step=99))
                assert len(memory) == reader.count(sid)
        with make_store() as store:
            assert steps_of(store.read("a")) == steps_of(search_session())

    def test_read_only_memory_refreshes_and_searches(self, make_store: MakeStore) -> None:
        """A read-only memory refreshes what a writer appends and searches as Memory.search does."""
        from agents.memory.stores._backed import StoredMemory

        with make_store() as writer:
            writer.append("s", search_session())
            with make_store(read_only=True) as reader:
                memory = StoredMemory(reader, "s")
                writer.append("s", [MemoryItem(step=5, action="open the file again")])
                assert memory.refresh() == 1
                assert memory.refresh() == 0
                ram = Memory([*search_session(), MemoryItem(step=5, action="open the file again")])
                assert [i.to_dict() for i in memory.content] == [i.to_dict() for i in ram.content]
                for query in ("file", "click the button", "open"):
                    got = memory.search(query, 3)
                    want = ram.search(query, 3)
                    assert [(h.item.to_dict(), h.fields) for h in got] == [
                        (h.item.to_dict(), h.fields) for h in want
                    ]
                    # The store's index sums the same terms in SQL: equal to float rounding.
                    assert [h.score for h in got] == pytest.approx([h.score for h in want])
            assert writer.count("s") == 6

    def test_read_only_memory_bounds_only_ram(self, make_store: MakeStore) -> None:
        """max_items on a read-only memory keeps the newest items in RAM and leaves the store as it was."""
        from agents.memory.stores._backed import StoredMemory

        with make_store() as writer:
            writer.append("s", [MemoryItem(step=i) for i in range(5)])
            with make_store(read_only=True) as reader:
                memory = StoredMemory(reader, "s", max_items=2)
                assert steps_of(memory.content) == [3, 4]
                writer.append("s", [MemoryItem(step=5)])
                assert memory.refresh() == 1
                assert steps_of(memory.content) == [4, 5]
                assert reader.count("s") == 6
            assert steps_of(writer.read("s")) == [0, 1, 2, 3, 4, 5]

    def test_refused_batch_applies_none_of_its_writes(self, make_store: MakeStore) -> None:
        """A batch whose append the store refuses (other step key) deletes and updates nothing."""
        with make_store() as store:
            seqs = store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
            batch = store.batch("s", step_key="turn")
            batch.delete([seqs[0]])
            batch.update({seqs[1]: MemoryItem(step=2, note="x")})
            batch.append([MemoryItem(turn=3)])
            with pytest.raises(StoreError, match="step_key='step'"):
                batch.__exit__(None, None, None)  # what leaving its with-block cleanly does
            assert [i.to_dict() for i in store.read("s")] == [{"step": 1}, {"step": 2}]
        with make_store() as again:
            assert [i.to_dict() for i in again.read("s")] == [{"step": 1}, {"step": 2}]

    # -- vectors: semantic and hybrid search ----------------------------------------------

    @pytest.fixture
    def numpy_installed(self) -> None:
        """Skip a semantic test where numpy (the ``semantic`` extra) is not installed."""
        pytest.importorskip("numpy")

    @pytest.mark.usefixtures("numpy_installed")
    def test_semantic_and_hybrid_search_rank_as_memory_search(self, store: Store) -> None:
        """Semantic and hybrid hits of a stored session are Memory.search's on the same items (scores to float32 precision)."""
        embedder = CountingEmbedder()
        items = vector_session()
        store.append("s", items)
        for mode in VECTOR_MODES:
            for query in VECTOR_QUERIES:
                got = store.search("s", query, 4, mode=mode, embedder=embedder)
                want = Memory(items).search(query, 4, mode=mode, embedder=CountingEmbedder())
                assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]
                assert [hit.score for hit in got] == pytest.approx(
                    [hit.score for hit in want], rel=1e-5, abs=1e-6
                )

    @pytest.mark.usefixtures("numpy_installed")
    def test_hybrid_over_more_items_than_its_pool_ranks_as_memory_search(
        self, store: Store
    ) -> None:
        """Past HYBRID_POOL items (the 100th best cosine discounts the semantic side), hybrid hits are Memory.search's."""
        rng = random.Random(11)
        words = [*VECTOR_QUERIES[0].split(), "invoice", "chart", "print", "lunch", "table"]
        items = [
            MemoryItem(step=i, thought=" ".join(rng.choices(words, k=rng.randint(3, 12))))
            for i in range(160)
        ]
        store.append("s", items)
        for k in (3, 12):  # a pool of 100 of the 160 items, then of all of them
            for query in ("export the chart", "lunch table invoice"):
                got = store.search("s", query, k, mode="hybrid", embedder=EMBEDDER)
                want = Memory(items).search(query, k, mode="hybrid", embedder=EMBEDDER)
                assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]
                assert [hit.score for hit in got] == pytest.approx(
                    [hit.score for hit in want], rel=1e-5, abs=1e-6
                )

    @pytest.mark.usefixtures("numpy_installed")
    def test_semantic_search_over_keys_ranks_as_memory_search(self, store: Store) -> None:
        """With keys, vectors are embedded over those fields only, as Memory.search does."""
        items = vector_session()
        store.append("s", items)
        got = store.search("s", "email", 3, keys=["note"], mode="semantic", embedder=EMBEDDER)
        want = Memory(items).search("email", 3, keys=["note"], mode="semantic", embedder=EMBEDDER)
        assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]

    @pytest.mark.usefixtures("numpy_installed")
    def test_semantic_search_of_an_unknown_session_has_no_hits(self, store: Store) -> None:
        """Semantic and hybrid searches of a session that does not exist find nothing and store nothing."""
        assert store.search("nobody", "report", mode="semantic", embedder=EMBEDDER) == []
        assert store.search("nobody", "report", mode="hybrid", embedder=EMBEDDER) == []
        assert store.drop_vectors("nobody") == 0
        assert store.vector_model("nobody") is None

    @pytest.mark.usefixtures("numpy_installed")
    def test_semantic_search_needs_an_embedder(self, store: Store) -> None:
        """A semantic store search without embedder= is a named error."""
        store.append("s", vector_session())
        with pytest.raises(InvalidQueryError, match="needs embedder="):
            store.search("s", "report", mode="semantic")
        with pytest.raises(InvalidQueryError, match="mode='keyword', 'semantic' or 'hybrid'"):
            store.search("s", "report", mode="fuzzy")  # type: ignore[arg-type]  # the wrong mode is the test

    @pytest.mark.usefixtures("numpy_installed")
    def test_items_without_text_are_never_semantic_hits(self, store: Store) -> None:
        """An item without text holds no vector and never comes back from a semantic search."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2, thought="report")])
        hits = store.search("s", "report", 5, mode="semantic", embedder=EMBEDDER)
        assert [hit.item["step"] for hit in hits] == [2]

    @pytest.mark.usefixtures("numpy_installed")
    def test_parts_rank_as_memory_search_with_the_same_parts(self, store: Store) -> None:
        """Items cut into parts rank as Memory.search with those parts, in semantic and hybrid mode."""
        from agents.memory.search import search_index

        parts = EmbedParts(chunk_words=3, overlap=1)
        items = vector_session()
        store.append("s", items)
        ram = Memory(items)
        search_index(ram, parts=parts)
        for mode in VECTOR_MODES:
            for query in VECTOR_QUERIES:
                got = store.search("s", query, 4, mode=mode, embedder=EMBEDDER, parts=parts)
                want = ram.search(query, 4, mode=mode, embedder=CountingEmbedder())
                assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]
                assert [hit.score for hit in got] == pytest.approx(
                    [hit.score for hit in want], rel=1e-5, abs=1e-6
                )
        with pytest.raises(StoreArgumentError, match="parts must be an EmbedParts"):
            store.search("s", "save", mode="semantic", embedder=EMBEDDER, parts="words")  # type: ignore[arg-type]  # a wrong type on purpose

    @pytest.mark.usefixtures("numpy_installed")
    def test_stored_memory_semantic_search_is_memory_search(self, make_store: MakeStore) -> None:
        """A reopened StoredMemory gives Memory.search's semantic and hybrid hits and recall exactly."""
        from agents.memory.stores._backed import StoredMemory

        with make_store() as store:
            StoredMemory(store, "s").add_memory_items(vector_session())
        with make_store() as store:
            memory = StoredMemory(store, "s")
            ram = Memory(vector_session())
            for mode in VECTOR_MODES:
                got = memory.search("export the pdf", 3, mode=mode, embedder=EMBEDDER)
                want = ram.search("export the pdf", 3, mode=mode, embedder=EMBEDDER)
                assert [(h.item.to_dict(), h.score, h.fields) for h in got] == [
                    (h.item.to_dict(), h.score, h.fields) for h in want
                ]
            recalled = memory.recall("the pdf", 2, mode="semantic", embedder=EMBEDDER)
            expected = ram.recall("the pdf", 2, mode="semantic", embedder=EMBEDDER)
            assert [item.to_dict() for item in recalled] == [item.to_dict() for item in expected]

    def test_a_store_that_keeps_vectors_runs_the_vector_suite(self, store: Store) -> None:
        """A store whose backend keeps vectors runs VectorStoreContract, and only such a store does."""
        if store.keeps_vectors:
            assert isinstance(self, VectorStoreContract), (
                f"{store.url} keeps vectors (Backend.keeps_vectors): subclass VectorStoreContract "
                "instead of StoreContract, so that its vector operations are checked."
            )
        else:
            assert not isinstance(self, VectorStoreContract), (
                f"{store.url} keeps no vectors (Backend.keeps_vectors is False): subclass "
                "StoreContract; VectorStoreContract checks vectors stored with the items."
            )


class VectorStoreContract(StoreContract):
    """:class:`StoreContract` and the calls of a store whose backend keeps vectors (``Backend.keeps_vectors``).

    Subclass it instead of :class:`StoreContract` for such a backend, with
    the same ``make_store`` fixture: it adds what storing vectors with the
    items means (each item embedded once, vectors kept across handles and
    reopening, following updates, deletes and trims, one model a session).
    A backend without the vector operations runs :class:`StoreContract`
    alone: its semantic and hybrid searches (checked there) embed the
    items at each query.
    """

    def test_the_store_keeps_vectors(self, store: Store) -> None:
        """The backend declares the vector operations (Backend.keeps_vectors)."""
        assert store.keeps_vectors

    @pytest.mark.usefixtures("numpy_installed")
    def test_index_embeddings_embeds_each_item_once(self, store: Store) -> None:
        """index_embeddings embeds the items without a vector in batches; a second call embeds none."""
        embedder = CountingEmbedder()
        store.append("s", vector_session())
        done: list[tuple[int, int]] = []
        count = store.index_embeddings(
            "s", embedder, batch_size=3, progress=lambda d, t: done.append((d, t))
        )
        # Each distinct part (EmbedParts(), the default: each field, windows of 8 words) once.
        parts = len(
            {text for item in vector_session() for text in EmbedParts().texts(item.to_dict(), None)}
        )
        assert count == len(VECTOR_TEXTS)
        assert embedder.texts == parts > len(VECTOR_TEXTS)
        assert done == [(3, 8), (6, 8), (8, 8)]  # items read, the one without text included
        assert store.index_embeddings("s", embedder) == len(VECTOR_TEXTS)
        assert embedder.texts == parts
        model = store.vector_model("s")
        assert model is not None
        assert (model.name, model.dimension) == (embedder.name, embedder.dimension)

    @pytest.mark.usefixtures("numpy_installed")
    def test_index_embeddings_embeds_a_part_items_share_once(self, store: Store) -> None:
        """A part many items repeat (a status, an application) is embedded once, across batches too."""
        embedder = CountingEmbedder()
        items = [
            MemoryItem(step=n, thought=f"step {n} of the task", status="CONTINUE", app="WINWORD")
            for n in range(10)
        ]
        store.append("s", items)
        assert store.index_embeddings("s", embedder, batch_size=3) == 10
        assert embedder.texts == 10 + 2  # each thought, and the status and the app once
        for query in ("the task", "continue"):
            got = store.search("s", query, 10, mode="semantic", embedder=embedder)
            want = Memory(items).search(query, 10, mode="semantic", embedder=CountingEmbedder())
            assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]
            assert [hit.score for hit in got] == pytest.approx([hit.score for hit in want])

    @pytest.mark.usefixtures("numpy_installed")
    def test_search_embeds_only_the_query_once_items_hold_vectors(self, store: Store) -> None:
        """Once the items are embedded, a semantic query embeds its own text and nothing else."""
        embedder = CountingEmbedder()
        store.append("s", vector_session())
        store.index_embeddings("s", embedder)
        before = embedder.texts
        store.search("s", "export the report", mode="semantic", embedder=embedder)
        store.search("s", "export the report", mode="hybrid", embedder=embedder)
        assert embedder.texts == before + 2

    @pytest.mark.usefixtures("numpy_installed")
    def test_reopened_store_finds_the_same_hits_without_embedding_again(
        self, make_store: MakeStore
    ) -> None:
        """Closed and opened again, a store keeps the vectors: the same hits, only the query embedded."""
        embedder = CountingEmbedder()
        with make_store() as store:
            store.append("s", vector_session())
            first = store.search("s", "send the pdf", mode="semantic", embedder=embedder)
        embedder.texts = 0
        with make_store() as store:
            again = store.search("s", "send the pdf", mode="semantic", embedder=embedder)
        assert [(h.seq, h.score) for h in again] == [(h.seq, h.score) for h in first]
        assert embedder.texts == 1

    @pytest.mark.usefixtures("numpy_installed")
    def test_second_handle_finds_the_same_hits_without_embedding_again(
        self, make_store: MakeStore
    ) -> None:
        """A second open handle uses the vectors the first one stored."""
        embedder = CountingEmbedder()
        with make_store() as first, make_store() as second:
            first.append("s", vector_session())
            first.index_embeddings("s", embedder)
            embedder.texts = 0
            hits = second.search("s", "save the report", mode="hybrid", embedder=embedder)
            want = first.search("s", "save the report", mode="hybrid", embedder=embedder)
            assert [(h.seq, h.score) for h in hits] == [(h.seq, h.score) for h in want]
            assert embedder.texts == 2

    @pytest.mark.usefixtures("numpy_installed")
    @pytest.mark.parametrize("parts", [EmbedParts(), EmbedParts.WHOLE], ids=["parts", "whole"])
    def test_a_handle_that_kept_its_vectors_ranks_as_a_fresh_one_after_another_handles_writes(
        self, make_store: MakeStore, parts: EmbedParts
    ) -> None:
        """A handle searched again and again (its vectors kept) ranks as a handle opened afresh after another handle updates, deletes, appends and embeds (Backend.vector_changes)."""
        embedder = CountingEmbedder()

        def hits(store: Store) -> list[tuple[int, float]]:
            found = store.search(
                "s", "giraffe report", 5, mode="semantic", embedder=embedder, parts=parts
            )
            return [(hit.seq, hit.score) for hit in found]

        with make_store() as kept, make_store() as other:
            seqs = kept.append("s", vector_session())
            kept.index_embeddings("s", embedder, parts=parts)
            for _ in range(3):
                hits(kept)
            for change in ("update", "delete", "append"):
                if change == "update":
                    with other.batch("s") as batch:
                        batch.update({seqs[2]: MemoryItem(step=2, thought="giraffes at the zoo")})
                elif change == "delete":
                    other.delete_seqs("s", [seqs[0]])
                else:
                    other.append("s", [MemoryItem(step=20, thought="the giraffe report")])
                other.index_embeddings("s", embedder, parts=parts)
                after = hits(kept)
                with make_store() as fresh:
                    assert after == hits(fresh), change

    @pytest.mark.usefixtures("numpy_installed")
    def test_vectors_follow_updates_and_deletes(self, store: Store) -> None:
        """An updated item is embedded again from its new fields; a deleted one is never a hit."""
        embedder = CountingEmbedder()
        seqs = store.append("s", vector_session())
        store.index_embeddings("s", embedder)
        with store.batch("s") as batch:
            batch.update({seqs[2]: MemoryItem(step=2, thought="giraffes at the zoo")})
            batch.delete([seqs[3]])
        embedder.texts = 0
        hits = store.search("s", "giraffe", 7, mode="semantic", embedder=embedder)
        assert hits[0].seq == seqs[2]
        assert seqs[3] not in [hit.seq for hit in hits]
        assert embedder.texts == 2  # the query and the updated item
        assert seqs[3] not in store.read_vectors("s", embedder)

    @pytest.mark.usefixtures("numpy_installed")
    def test_trims_clear_and_delete_session_remove_vectors(self, store: Store) -> None:
        """keep_last, delete_steps, expire, clear and delete_session take the vectors of their items along."""
        embedder = CountingEmbedder()
        seqs = store.append("s", vector_session())
        store.index_embeddings("s", embedder)
        store.keep_last("s", 6)
        store.delete_steps("s", [3])
        left = sorted(store.read_vectors("s", embedder))
        assert left == [seq for seq in seqs[2:] if seq not in (seqs[3], seqs[5])]
        store.append("t", vector_session())
        store.index_embeddings("t", embedder)
        assert store.expire("t", 0) == len(vector_session())
        assert store.read_vectors("t", embedder) == {}
        store.clear("s")
        assert store.read_vectors("s", embedder) == {}
        assert store.vector_model("s") is None
        store.append("s", vector_session())
        store.index_embeddings("s", embedder)
        store.delete_session("s")
        assert store.vector_model("s") is None
        store.append("s", vector_session())
        assert store.read_vectors("s", embedder) == {}

    @pytest.mark.usefixtures("numpy_installed")
    def test_another_model_is_refused_and_changes_nothing(self, store: Store) -> None:
        """A session embedded with one model refuses queries and indexing by another, naming both and the fix."""
        store.append("s", vector_session())
        store.index_embeddings("s", EMBEDDER)
        before = store.read_vectors("s", EMBEDDER)
        other = CountingEmbedder(32)
        names = r"'hashing-3gram-64' \(64 dimensions\).*'hashing-3gram-32' \(32 dimensions\).*drop_vectors"
        with pytest.raises(EmbedderMismatchError, match=names):
            store.search("s", "report", mode="semantic", embedder=other)
        with pytest.raises(EmbedderMismatchError, match=names):
            store.index_embeddings("s", other)
        assert other.texts == 0
        after = store.read_vectors("s", EMBEDDER)
        assert list(after) == list(before)
        assert all((after[seq] == before[seq]).all() for seq in before)

    @pytest.mark.usefixtures("numpy_installed")
    def test_dropped_and_cleared_vectors_stay_gone_for_another_handle(
        self, make_store: MakeStore
    ) -> None:
        """After drop_vectors or clear, a new handle finds no vectors and no model."""
        with make_store() as store:
            store.append("s", vector_session())
            store.index_embeddings("s", EMBEDDER)
            store.drop_vectors("s")
        with make_store() as store:
            assert store.vector_model("s") is None
            assert store.read_vectors("s", EMBEDDER) == {}
            store.index_embeddings("s", EMBEDDER)
            store.clear("s")
        with make_store() as store:
            assert store.vector_model("s") is None
            assert store.count("s") == 0

    @pytest.mark.usefixtures("numpy_installed")
    def test_vector_of_an_item_changed_meanwhile_is_not_stored(self, make_store: MakeStore) -> None:
        """A vector computed while another handle changes its item is dropped; the next call embeds the new fields."""
        with make_store() as store, make_store() as other:
            seqs = store.append("s", vector_session())

            class Meddling(CountingEmbedder):
                def __call__(self, texts: Sequence[str], /) -> Any:
                    if not self.texts:
                        with other.batch("s") as batch:
                            batch.update({seqs[0]: MemoryItem(step=0, thought="giraffes")})
                    return super().__call__(texts)

            embedder = Meddling()
            assert store.index_embeddings("s", embedder) == len(VECTOR_TEXTS) - 1
            assert seqs[0] not in store.read_vectors("s", embedder)
            assert store.index_embeddings("s", embedder) == len(VECTOR_TEXTS)
            hits = store.search("s", "giraffe", 1, mode="semantic", embedder=embedder)
            assert [hit.seq for hit in hits] == [seqs[0]]

    @pytest.mark.usefixtures("numpy_installed")
    def test_dropped_vectors_let_another_model_embed(self, store: Store) -> None:
        """drop_vectors forgets the model, after which another model embeds the session."""
        store.append("s", vector_session())
        store.index_embeddings("s", EMBEDDER)
        assert store.drop_vectors("s") == len(vector_session())
        assert store.index_embeddings("s", CountingEmbedder(32)) == len(VECTOR_TEXTS)
        model = store.vector_model("s")
        assert model is not None
        assert model.dimension == 32

    @pytest.mark.usefixtures("numpy_installed")
    @pytest.mark.parametrize(
        ("kind", "match"), [("shape", r"shape \(10, 3\) for 10 texts"), ("nan", "NaN")]
    )
    def test_bad_embedder_output_stores_nothing(self, store: Store, kind: str, match: str) -> None:
        """An embedder returning the wrong shape or NaN raises EmbeddingError; no vector or model is stored."""
        store.append("s", vector_session())
        with pytest.raises(EmbeddingError, match=match):
            store.index_embeddings("s", BrokenEmbedder(kind))
        assert store.vector_model("s") is None
        assert store.read_vectors("s", BrokenEmbedder(kind)) == {}

    @pytest.mark.usefixtures("numpy_installed")
    def test_read_only_handle_ranks_unembedded_items_without_storing(
        self, make_store: MakeStore
    ) -> None:
        """A read-only handle embeds the items without a vector for its query, stores nothing, and ranks as a writer."""
        with make_store() as store:
            store.append("s", vector_session()[:4])
            store.index_embeddings("s", EMBEDDER)
            store.append("s", vector_session()[4:])
        with make_store(read_only=True) as reader:
            got = reader.search("s", "email the report", 3, mode="hybrid", embedder=EMBEDDER)
            assert len(reader.read_vectors("s", EMBEDDER)) == 4
        want = Memory(vector_session()).search(
            "email the report", 3, mode="hybrid", embedder=EMBEDDER
        )
        assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]

    @pytest.mark.usefixtures("numpy_installed")
    def test_stored_memory_searches_with_stored_vectors(self, make_store: MakeStore) -> None:
        """A reopened StoredMemory gives Memory.search's hits exactly, embedding only its queries."""
        from agents.memory.stores._backed import StoredMemory

        embedder = CountingEmbedder()
        with make_store() as store:
            StoredMemory(store, "s").add_memory_items(vector_session())
            store.index_embeddings("s", embedder)
        embedder.texts = 0
        with make_store() as store:
            memory = StoredMemory(store, "s")
            ram = Memory(vector_session())
            for mode in VECTOR_MODES:
                got = memory.search("export the pdf", 3, mode=mode, embedder=embedder)
                want = ram.search("export the pdf", 3, mode=mode, embedder=EMBEDDER)
                assert [(h.item.to_dict(), h.score, h.fields) for h in got] == [
                    (h.item.to_dict(), h.score, h.fields) for h in want
                ]
            recalled = memory.recall("the pdf", 2, mode="semantic", embedder=embedder)
            expected = ram.recall("the pdf", 2, mode="semantic", embedder=EMBEDDER)
            assert [item.to_dict() for item in recalled] == [item.to_dict() for item in expected]
            assert embedder.texts == 3  # the three queries

    @pytest.mark.usefixtures("numpy_installed")
    def test_parts_rank_as_memory_search_with_the_same_parts(self, store: Store) -> None:
        """Vectors cut into parts rank as Memory.search with those parts; whole-item vectors stay apart and unchanged."""
        from agents.memory.search import EmbedParts, search_index

        parts = EmbedParts(chunk_words=3, overlap=1)
        embedder = CountingEmbedder()
        items = vector_session()
        store.append("s", items)
        assert store.index_embeddings("s", embedder) == 7
        whole = store.read_vectors("s", embedder)
        assert store.index_embeddings("s", embedder, parts=parts) == 7
        ram = Memory(items)
        search_index(ram, parts=parts)
        for mode in VECTOR_MODES:
            for query in VECTOR_QUERIES:
                got = store.search("s", query, 4, mode=mode, embedder=embedder, parts=parts)
                want = ram.search(query, 4, mode=mode, embedder=CountingEmbedder())
                assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]
                assert [hit.score for hit in got] == pytest.approx(
                    [hit.score for hit in want], rel=1e-5, abs=1e-6
                )
        stored = store.read_vectors("s", embedder, parts=parts)
        first = stored[min(stored)]
        assert first.shape == (len(parts.texts(items[0].to_dict(), None)), embedder.dimension)
        again = store.read_vectors("s", embedder)
        assert all((again[seq] == whole[seq]).all() for seq in whole)
        with pytest.raises(StoreArgumentError, match="parts must be an EmbedParts"):
            store.search("s", "save", mode="semantic", embedder=embedder, parts="words")  # type: ignore[arg-type]  # a wrong type on purpose

    @pytest.mark.usefixtures("numpy_installed")
    def test_stored_memory_with_parts_reads_the_stored_parts(self, make_store: MakeStore) -> None:
        """A reopened StoredMemory whose index cuts items into parts reads them from the store, embedding only its queries."""
        from agents.memory.search import EmbedParts, search_index
        from agents.memory.stores._backed import StoredMemory

        parts = EmbedParts(chunk_words=4)
        embedder = CountingEmbedder()
        with make_store() as store:
            StoredMemory(store, "s").add_memory_items(vector_session())
            store.index_embeddings("s", embedder, parts=parts)
        embedder.texts = 0
        with make_store() as store:
            memory = StoredMemory(store, "s")
            search_index(memory, parts=parts)
            ram = Memory(vector_session())
            search_index(ram, parts=parts)
            for mode in VECTOR_MODES:
                got = memory.search("export the pdf", 3, mode=mode, embedder=embedder)
                want = ram.search("export the pdf", 3, mode=mode, embedder=EMBEDDER)
                assert [(h.item.to_dict(), h.score) for h in got] == [
                    (h.item.to_dict(), h.score) for h in want
                ]
            assert embedder.texts == 2  # the two queries

    @pytest.mark.usefixtures("numpy_installed")
    def test_index_embeddings_counts_the_items_with_text(self, store: Store) -> None:
        """An item without text gets no vector that counts: index_embeddings reports the items with text."""
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2, thought="report")])
        assert store.index_embeddings("s", EMBEDDER) == 1


VECTOR_TEXTS = [
    "open the file menu and click export",
    "the export dialog shows a PDF option",
    "type the summary line at the top of the report",
    "click the save button to save the report",
    "the report is saved as report.pdf in the documents folder",
    "the host agent assigns the next task: email the report",
    "open Outlook and attach report.pdf to a new email",
]
VECTOR_QUERIES = ["export the report", "send the pdf by email", "save", "agent task"]
VECTOR_MODES: tuple[SearchMode, ...] = ("semantic", "hybrid")


def vector_session() -> list[MemoryItem]:
    """Return the fixed corpus of the semantic contract tests: seven items with text, one without."""
    items = [
        MemoryItem(step=i, thought=text, note={"tags": ["email"] if "email" in text else []})
        for i, text in enumerate(VECTOR_TEXTS)
    ]
    items.insert(5, MemoryItem(step=9, cost=1.5))
    return items


SESSION_QUERIES = ("invoice format", "the report", "invoice", "ann total", "the the zeta")
"""Queries of the store-wide search tests: a rare word, common words, repeats."""


def fill_sessions(store: Store) -> None:
    """Write the sessions of the store-wide search tests: four of different sizes, with metadata.

    ``a-large`` holds 200 items of common words, where "invoice" is rare;
    ``b-small`` holds three items, one matching "invoice format" better;
    ``a-mid`` and ``c-plain`` others (``c-plain`` with items without text).
    """
    large = common_words_session(seed=3, items=200, length=(4, 20))
    large[3] = MemoryItem(step=3, n=3, note="invoice number 7 seen in the report", kind="rare")
    store.append("a-large", large)
    store.append("a-mid", common_words_session(seed=4, items=30, length=(2, 6)))
    store.append(
        "b-small",
        [
            MemoryItem(step=1, note="the invoice format of ann", kind="rare"),
            MemoryItem(step=2, note="ann asked about the invoice total"),
            MemoryItem(step=3, note="the report was sent"),
        ],
    )
    store.append("c-plain", [MemoryItem(step=1, cost=2), MemoryItem(step=2, note="the report")])
    store.set_metadata("a-large", {"user": "bob", "runs": 3})
    store.set_metadata("a-mid", {"user": "ann", "runs": 1})
    store.set_metadata("b-small", {"user": "ann", "runs": 2})


def session_hits(hits: Sequence[Any]) -> list[tuple[str, int, dict[str, Any], float]]:
    """Return store-wide hits as ``(session_id, seq, fields, score)``."""
    return [(hit.session_id, hit.seq, hit.item.to_dict(), hit.score) for hit in hits]


def union_hits(
    store: Store, session_ids: Sequence[str], query: str, k: int, **options: Any
) -> list[tuple[str, int, dict[str, Any], float]]:
    """Return ``Memory.search`` over one memory of the sessions' items (session-id order, then seq) as :func:`session_hits` gives hits."""
    memory = Memory()
    origin: dict[int, tuple[str, int]] = {}
    for sid in sorted(session_ids):
        for record in store.records(sid):
            origin[id(record.item)] = (sid, record.seq)
            memory.add_memory_item(record.item)
    out = []
    for hit in memory.search(query, k, **options):
        sid, seq = origin[id(hit.item)]
        out.append((sid, seq, hit.item.to_dict(), hit.score))
    return out


class MakeAsyncStore(Protocol):
    """Open a new handle on the async store under test: an awaitable of an :class:`AsyncStore`."""

    def __call__(self, *, read_only: bool = False) -> Awaitable[AsyncStore]:
        """Return something to await for an open async store (``open_async_store(...)``); the caller closes it."""
        ...


class LoopThread:
    """An event loop running in a thread of its own; :meth:`call` awaits a coroutine there from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="kvmemory-contract-loop", daemon=True
        )
        self.thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and return its result (or raise its error)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


# The AsyncStore calls the contract reaches, each awaited in turn.
AWAITED: Final = frozenset(
    {
        "append",
        "append_steps",
        "read",
        "records",
        "project",
        "tail",
        "search",
        "ranking",
        "search_sessions",
        "recall_sessions",
        "summary",
        "count",
        "session_info",
        "set_metadata",
        "delete_steps",
        "delete_seqs",
        "clear",
        "sessions",
        "delete_session",
        "keep_last",
        "expire",
        "vector_model",
        "index_embeddings",
        "read_vectors",
        "cosines",
        "cosine_ceilings",
        "vectors_over_budget",
        "drop_vectors",
        "put_record",
        "put_records",
        "get_record",
        "get_records",
        "read_records",
        "record_keys",
        "delete_record",
        "delete_records",
    }
)
"""The calls of :class:`AsyncStore` that :class:`AwaitedStore` answers by awaiting them."""

PLAIN: Final = frozenset(
    {"url", "read_only", "closed", "keyword_index", "keeps_vectors", "backend"}
)
"""The attributes that do no I/O, read from the sync store underneath."""


async def _awaited(call: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    return await call(*args, **kwargs)


async def _next(pages: AsyncIterator[T]) -> T:
    return await pages.__anext__()


class AwaitedBatch:
    """A write batch whose ``with`` block ends by awaiting the async batch's ``async with`` exit."""

    def __init__(self, runner: LoopThread, batch: Any) -> None:
        self._runner = runner
        self._batch = batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __enter__(self) -> Any:
        return self._runner.call(self._batch.__aenter__())

    def __exit__(self, *exc_info: Any) -> None:
        self._runner.call(self._batch.__aexit__(*exc_info))


class AwaitedStore:
    """The sync store API over an :class:`AsyncStore`, each call awaited on a :class:`LoopThread`.

    What :class:`AsyncStoreContract` hands the tests of :class:`StoreContract`
    (and what ``StoredMemory`` is built on there), so that every one of them
    goes through the awaitable calls, their batches and pages.
    """

    def __init__(self, runner: LoopThread, store: AsyncStore) -> None:
        self._runner = runner
        self.async_store = store

    # StoredMemory and the contract check for a Store: this one stands in for it.
    @property  # type: ignore[misc]  # a property standing in for the class, on purpose
    def __class__(self) -> type[Store]:  # type: ignore[override]  # stands in for a Store
        return Store

    def __getattr__(self, name: str) -> Any:
        if name in AWAITED:
            call: Callable[..., Awaitable[Any]] = getattr(self.async_store, name)
            return lambda *args, **kwargs: self._runner.call(_awaited(call, *args, **kwargs))
        if name in PLAIN:
            return getattr(self.async_store.store, name)
        msg = f"AwaitedStore has no {name!r}: add it to AWAITED or PLAIN if AsyncStore answers it."
        raise AttributeError(msg)  # attribute protocol

    def pages(self, session_id: str, **options: Any) -> Iterator[Any]:
        """Return the async pages as an iterator; the first page is awaited at once (so a bad argument raises here, as the sync call does)."""
        pages: AsyncIterator[Any] = self.async_store.pages(session_id, **options)
        try:
            first = self._runner.call(_next(pages))
        except StopAsyncIteration:
            return iter(())
        return self._rest(first, pages)

    def _rest(self, first: Any, pages: AsyncIterator[Any]) -> Iterator[Any]:
        yield first
        while True:
            try:
                yield self._runner.call(_next(pages))
            except StopAsyncIteration:
                return

    def batch(self, session_id: str, **options: Any) -> AwaitedBatch:
        """Return the async batch, entered and left with a plain ``with``."""
        return AwaitedBatch(self._runner, self.async_store.batch(session_id, **options))

    def close(self) -> None:
        """Await the async store's ``aclose``."""
        self._runner.call(self.async_store.aclose())

    def __enter__(self) -> AwaitedStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<AwaitedStore {self.async_store!r}>"


async def _opened(opening: Awaitable[AsyncStore]) -> AsyncStore:
    return await opening


class AsyncStoreContract(StoreContract):
    """The store contract through the async API; subclass it and provide ``make_async_store``.

    ``make_async_store`` is a function that opens a new async handle on one
    fresh store each time it is called, returning what to await for it
    (for a URL, ``open_async_store(url, read_only=read_only)``; for a
    backend of your own, ``open_async_store(Store(MyBackend(...)))``).
    Every test of :class:`StoreContract` then runs with each store call
    awaited on an event loop (in a thread of the suite's own), and the
    tests below check what only the async API has: ``async with`` blocks,
    async pages, awaitable durable memories. For a backend that keeps
    vectors, subclass ``(AsyncStoreContract, VectorStoreContract)``.
    """

    @pytest.fixture(scope="class")
    @classmethod
    def loop_thread(cls) -> Iterator[LoopThread]:
        """One event loop, in a thread, for the class's tests."""
        runner = LoopThread()
        yield runner
        runner.close()

    @pytest.fixture
    def make_store(self, make_async_store: MakeAsyncStore, loop_thread: LoopThread) -> MakeStore:
        """Open handles with ``make_async_store``, each call of theirs awaited on the loop."""

        def make(*, read_only: bool = False) -> Store:
            opened = loop_thread.call(_opened(make_async_store(read_only=read_only)))
            return AwaitedStore(loop_thread, opened)  # type: ignore[return-value]  # stands in for a Store

        return make

    def test_async_calls_answer_as_the_sync_store(
        self, make_async_store: MakeAsyncStore, make_store: MakeStore
    ) -> None:
        """Awaited appends, reads, a batch under async with and async pages give what the sync store reads."""

        async def main() -> list[list[int]]:
            store = await make_async_store()
            async with store:
                seqs = await store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
                assert await store.read("s", after=seqs[0]) == [MemoryItem(step=2)]
                async with store.batch("s") as batch:
                    batch.append([MemoryItem(step=3)])
                    batch.delete([seqs[0]])
                assert batch.deleted == [seqs[0]]
                return [[r.item["step"] for r in page] async for page in store.pages("s", size=1)]

        assert asyncio.run(main()) == [[2], [3]]
        with make_store() as store:
            assert [item["step"] for item in store.read("s")] == [2, 3]

    def test_async_memory_writes_through_and_reopens(
        self, make_async_store: MakeAsyncStore
    ) -> None:
        """An awaited add of an async memory is in the store when it returns; a reopened memory holds it."""
        from agents.memory.stores import open_async_memory

        async def main() -> tuple[int, list[Any]]:
            store = await make_async_store()
            async with store:
                async with open_async_memory(store, "m") as memory:
                    await memory.add_memory_item(MemoryItem(step=1, action="open the report"))
                    await memory.add_memory_items([MemoryItem(step=2, action="print")])
                    counted = await store.count("m")
                async with open_async_memory(store, "m") as again:
                    hits = await again.search("report", 1)
                    return counted, [again.filter_memory_from_keys(["step"]), hits[0].item["step"]]

        counted, (steps, hit) = asyncio.run(main())
        assert counted == 2
        assert steps == [{"step": 1}, {"step": 2}]
        assert hit == 1


class CountingEmbedder:
    """A real HashingEmbedder that counts the texts it embeds (to check what a call re-embeds)."""

    def __init__(self, dimension: int = 64) -> None:
        from agents.memory.search import HashingEmbedder

        self._inner = HashingEmbedder(dimension)
        self.texts = 0

    @property
    def name(self) -> str:
        """The wrapped embedder's name."""
        return self._inner.name

    @property
    def dimension(self) -> int:
        """The wrapped embedder's dimension."""
        return self._inner.dimension

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Embed ``texts`` and count them."""
        self.texts += len(texts)
        return self._inner(texts)


class BrokenEmbedder:
    """An embedder that returns the wrong shape (``"shape"``) or a NaN (``"nan"``)."""

    name = "broken"
    dimension = 4

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Return a wrong result of the chosen kind."""
        import numpy as np

        if self.kind == "shape":
            return np.ones((len(texts), 3), dtype=np.float32)
        out = np.ones((len(texts), 4), dtype=np.float32)
        out[-1, 0] = math.nan
        return out


EMBEDDER = CountingEmbedder(64)
