"""The backend of docs/stores.md ("Writing a backend"), over a dict, passes the store contract through Store."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agents.memory import InvalidSessionIdError, MemoryItem, StoreArgumentError, StoreError
from agents.memory.stores import (
    AsyncStore,
    Backend,
    BaseStore,
    InMemoryStore,
    SQLiteBackend,
    SQLiteStore,
    Store,
    open_async_store,
)
from agents.memory.stores._jsonl.backend import LogBackend
from agents.memory.stores._ram import SpaceBackend
from agents.memory.stores.testing import (
    AsyncStoreContract,
    BackendContract,
    MakeAsyncStore,
    MakeStore,
    VectorStoreContract,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "stores.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def documented_backend() -> dict[str, Any]:
    """Run the docs' block that defines DictBackend and return its names."""
    blocks = [
        block for block in FENCE.findall(DOC.read_text("utf-8")) if "class DictBackend" in block
    ]
    assert len(blocks) == 1
    namespace: dict[str, Any] = {"__name__": "docs_backend"}
    exec(compile(blocks[0], "docs/stores.md", "exec"), namespace)
    return namespace


DOCS = documented_backend()


class TestDocumentedBackend(VectorStoreContract):
    """The contract suite on Store(DictBackend) exactly as the docs print it."""

    @pytest.fixture
    def make_store(self) -> MakeStore:
        """Open handles on one fresh dict store."""
        tables = DOCS["Tables"]()

        def make(*, read_only: bool = False) -> Store:
            return Store(DOCS["DictBackend"](tables), read_only=read_only)

        return make


class TestDocumentedBackendAsync(AsyncStoreContract, VectorStoreContract):
    """The async contract suite on the docs' DictBackend, handed to open_async_store as a Store."""

    @pytest.fixture
    def make_async_store(self) -> MakeAsyncStore:
        """Open async handles on one fresh dict store."""
        tables = DOCS["Tables"]()

        def make(*, read_only: bool = False) -> Awaitable[AsyncStore]:
            return open_async_store(Store(DOCS["DictBackend"](tables), read_only=read_only))

        return make


def test_backend_interface_has_no_underscore_names() -> None:
    """Every operation of the Backend interface is public."""
    names = [name for name in vars(Backend) if not name.startswith("__")]
    assert names
    assert [name for name in names if name.startswith("_")] == []


def test_a_backend_error_of_its_driver_types_is_a_store_error() -> None:
    """An exception of the backend's driver_errors reaches the caller as StoreError naming the store."""

    class Broken(DOCS["DictBackend"]):  # type: ignore[misc]  # a class from the docs' block
        url = "broken://"
        driver_errors = (KeyError,)

        def read_rows(self, sid: str, *, steps: Any = None, after: Any = None) -> Any:
            raise KeyError(sid)

    with Store(Broken(DOCS["Tables"]())) as store, pytest.raises(StoreError, match="broken://"):
        store.read("s")


def test_keyword_top_of_a_backend_answers_search() -> None:
    """A backend that ranks by itself answers search and ranking without the session being scored."""

    class Ranked(DOCS["DictBackend"]):  # type: ignore[misc]  # a class from the docs' block
        def keyword_top(self, sid: str, terms: Any, k: int) -> list[tuple[float, int]]:
            return [(9.0, seq) for seq, _ in self.read_rows(sid)[:k]]

    with Store(Ranked(DOCS["Tables"]())) as store:
        assert store.keyword_index
        seqs = store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
        assert store.ranking("s", "anything", 1) == [(seqs[0], 9.0)]
        assert [hit.item["step"] for hit in store.search("s", "anything", 2)] == [1, 2]


class TestDocumentedBackendOperations(BackendContract):
    """The Backend operations of the docs' DictBackend, checked directly."""

    @pytest.fixture
    def make_backend(self) -> Callable[[], Backend]:
        """Open backends on one fresh dict store."""
        tables = DOCS["Tables"]()
        return lambda: DOCS["DictBackend"](tables)  # type: ignore[no-any-return]  # a class from the docs' block


class TestSpaceBackendOperations(BackendContract):
    """The Backend operations of the in-process store's backend."""

    @pytest.fixture
    def make_backend(self) -> Callable[[], Backend]:
        """Open backends on one fresh named space."""
        name = f"backend-{uuid.uuid4().hex}"
        return lambda: SpaceBackend(name)


class TestLogBackendOperations(BackendContract):
    """The Backend operations of the JSONL store's backend, on a real directory."""

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], Backend]:
        """Open backends on one store directory."""
        return lambda: LogBackend(tmp_path / "logs")


class TestSQLiteBackendOperations(BackendContract):
    """The Backend operations of the SQLite store's backend, on a real file."""

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], Backend]:
        """Open backends on one database file."""
        return lambda: SQLiteBackend(tmp_path / "store.db")


@pytest.mark.postgres
class TestPostgresBackendOperations(BackendContract):
    """The Backend operations of the PostgreSQL store's backend, on the real server."""

    @pytest.fixture
    def make_backend(self, postgres_url: str) -> Callable[[], Backend]:
        """Open backends on one fresh schema."""
        from agents.memory.stores import PostgresBackend

        return lambda: PostgresBackend(postgres_url, max_size=2)


def test_sql_stores_are_stores_over_their_backends(tmp_path: Path) -> None:
    """SQLiteStore holds an SQLiteBackend and inherits every call from Store, not from BaseStore."""
    with SQLiteStore(tmp_path / "a.db") as store:
        assert isinstance(store.backend, SQLiteBackend)
        assert BaseStore not in type(store).__mro__
        assert store.backend.url == store.url
        seqs = store.append("s", [MemoryItem(step=1, note="kept")])
        assert store.backend.read_rows("s") == [(seqs[0], store.backend.read_seqs("s", seqs)[0][1])]


def test_base_store_is_a_deprecated_alias_of_store() -> None:
    """Every store is still a BaseStore, silently; subclassing or creating a BaseStore warns and points at Backend."""
    with InMemoryStore() as store:
        assert isinstance(store, BaseStore)
    assert issubclass(SQLiteStore, BaseStore)
    assert not isinstance(object(), BaseStore)
    with pytest.warns(DeprecationWarning, match="Backend"):

        class Legacy(BaseStore):
            pass

    assert issubclass(Legacy, Store)
    with pytest.warns(DeprecationWarning, match=r"use Store\(backend\)"):
        legacy = BaseStore(DOCS["DictBackend"](DOCS["Tables"]()))
    with legacy:
        assert legacy.append("s", [MemoryItem(step=1)]) == [1]
        assert legacy.read("s") == [MemoryItem(step=1)]


def test_base_store_given_a_url_names_the_migration() -> None:
    """The old BaseStore(url) of a subclass with underscore hooks is refused with the way to a Backend."""
    with (
        pytest.warns(DeprecationWarning, match="BaseStore is deprecated"),
        pytest.raises(
            StoreArgumentError, match=r"no longer implements underscore hooks.*Store\(backend\)"
        ),
    ):
        BaseStore("legacy://")  # type: ignore[arg-type]  # the old signature is the point


def test_store_of_something_that_is_not_a_backend_is_refused() -> None:
    """Store() given a URL or a plain object raises StoreArgumentError naming Backend and open_store."""
    for value in ("sqlite:///x.db", object(), None):
        with pytest.raises(StoreArgumentError, match=r"takes a Backend.*open_store\(\)"):
            Store(value)  # type: ignore[arg-type]  # the wrong type is the point


def test_guarded_runs_a_subclass_call_checked_and_wrapped() -> None:
    """A Store subclass's own call is refused on a bad id, a read-only or closed store, and sees driver errors as StoreError."""

    class Flaky(DOCS["DictBackend"]):  # type: ignore[misc]  # a class from the docs' block
        url = "flaky://"
        driver_errors = (KeyError,)

        def vacuum(self, sid: str) -> None:
            raise KeyError(sid)

    class VacuumStore(Store):
        def vacuum(self, session_id: str) -> str:
            with self.guarded("vacuum", session_id, write=True) as sid:
                self.backend.vacuum(sid)
            return sid

    tables = DOCS["Tables"]()
    with VacuumStore(Flaky(tables)) as store:
        with pytest.raises(StoreError, match="Cannot vacuum session 's' of flaky://"):
            store.vacuum("s")
        with pytest.raises(InvalidSessionIdError):
            store.vacuum("../etc")
    with pytest.raises(StoreError, match="is closed"):
        store.vacuum("s")
    with (
        VacuumStore(Flaky(tables), read_only=True) as reader,
        pytest.raises(StoreError, match="open read-only"),
    ):
        reader.vacuum("s")
    with Store(Flaky(tables), read_only=True) as reader, reader.guarded("count") as sid:
        assert sid == ""
        assert reader.backend.count("s") == 0


def test_guarded_blocks_keep_the_cause_and_let_other_errors_through() -> None:
    """A driver error becomes StoreError with the driver's error as its cause; a StoreError or any other error leaves the block unchanged."""

    class Flaky(DOCS["DictBackend"]):  # type: ignore[misc]  # a class from the docs' block
        url = "flaky://"
        driver_errors = (KeyError,)

    tables = DOCS["Tables"]()
    with Store(Flaky(tables)) as store:
        driver = KeyError("gone")
        with (
            pytest.raises(StoreError, match="Cannot tidy session 's' of flaky://") as caught,
            store.guarded("tidy", "s", write=True),
        ):
            raise driver
        assert caught.value.__cause__ is driver
        own = StoreError("own message")
        with pytest.raises(StoreError) as passed, store.guarded("tidy", "s"):
            raise own
        assert passed.value is own
        with pytest.raises(ValueError, match="not a driver error"), store.guarded("tidy"):
            raise ValueError("not a driver error")
        guard = store.guarded("tidy", "../etc")  # checked when entered, not when made
        with pytest.raises(InvalidSessionIdError), guard:
            pass


def test_a_backend_without_keyed_rows_refuses_records_naming_what_to_implement() -> None:
    """Record calls on a backend without the keyed-row operations raise naming them; other calls work."""
    with Store(DOCS["DictBackend"](DOCS["Tables"]())) as store:
        assert not store.backend.keeps_records
        store.append("s", [MemoryItem(step=1, key="lang")])
        with pytest.raises(StoreError, match=r"keeps no keyed rows; implement Backend\.read_keyed"):
            store.put_record("s", "lang", {"value": "fr"})
        with pytest.raises(StoreError, match="DictBackend"):
            store.get_record("s", "lang")
        with pytest.raises(StoreError, match="insert_keyed"):
            store.record_keys("s")
        assert [item["key"] for item in store.read("s")] == ["lang"]
