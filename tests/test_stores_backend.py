"""The backend of docs/stores.md ("Writing a backend"), over a dict, passes the store contract through Store."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.memory import MemoryItem, StoreError
from agents.memory.stores import Backend, BaseStore, Store
from agents.memory.stores._jsonl import LogBackend
from agents.memory.stores._memory import SpaceBackend
from agents.memory.stores.testing import BackendContract, MakeStore, StoreContract

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


class TestDocumentedBackend(StoreContract):
    """The contract suite on Store(DictBackend) exactly as the docs print it."""

    @pytest.fixture
    def make_store(self) -> MakeStore:
        """Open handles on one fresh dict store."""
        tables = DOCS["Tables"]()

        def make(*, read_only: bool = False) -> BaseStore:
            return Store(DOCS["DictBackend"](tables), read_only=read_only)

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
