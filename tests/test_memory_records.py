"""Keyed records of a Memory and of a StoredMemory: filed by key in RAM, written through to the store."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import (
    ArgumentTypeError,
    InvalidArgumentError,
    SerializationError,
    StoreError,
)
from agents.memory.stores import StoredMemory, open_memory, open_store


def test_put_record_then_get_record() -> None:
    """A record put under a key is found by key, holding the key in its "key" field."""
    memory = Memory()
    held = memory.put_record("lang", {"value": "fr"})
    assert held == MemoryItem(key="lang", value="fr")
    assert memory.get_record("lang") is held
    assert memory.get_record("other") is None
    assert memory.record_keys() == ["lang"]


def test_replace_moves_the_record_to_the_end() -> None:
    """A replaced record's old item leaves and the new one is appended last."""
    memory = Memory()
    memory.put_record("lang", {"value": "fr"})
    memory.add_memory_item(MemoryItem(step=1))
    memory.put_record("lang", {"value": "de"})
    assert [item.to_dict() for item in memory] == [{"step": 1}, {"key": "lang", "value": "de"}]


def test_callbacks_hear_a_replace_as_a_delete_and_an_add() -> None:
    """Callbacks run with a "delete" then an "add" change when a record is replaced."""
    kinds: list[str] = []
    memory = Memory(callbacks=[lambda _, change: kinds.append(change.kind)])
    memory.put_record("k", {"v": 1})
    memory.put_record("k", {"v": 2})
    assert kinds == ["add", "delete", "add"]


def test_items_added_with_a_key_field_are_not_records() -> None:
    """add_memory_item files nothing by key, whatever fields the item holds."""
    memory = Memory([MemoryItem(key="lang", value="fr")])
    assert memory.get_record("lang") is None
    assert memory.record_keys() == []


@pytest.mark.parametrize(
    "remove",
    [
        lambda m: m.delete_memory_item(7),
        lambda m: m.delete_items([m.get_record("k")]),
        lambda m: m.clear(),
        lambda m: m.load([]),
        lambda m: m.add_memory_items([MemoryItem(step=8), MemoryItem(step=9)]),
    ],
    ids=["delete_memory_item", "delete_items", "clear", "load", "evicted"],
)
def test_a_record_whose_item_leaves_is_gone(remove: Any) -> None:
    """Deleting, clearing, loading over or evicting a record's item removes the record."""
    memory = Memory(max_items=2)
    memory.put_record("k", {"step": 7})
    remove(memory)
    assert memory.get_record("k") is None
    assert memory.record_keys() == []


def test_delete_record_says_whether_there_was_one() -> None:
    """delete_record removes the item and returns True, then False."""
    memory = Memory()
    memory.put_record("k", {"v": 1})
    assert memory.delete_record("k") is True
    assert memory.delete_record("k") is False
    assert len(memory) == 0


def test_record_keys_filter_by_prefix() -> None:
    """record_keys lists the keys sorted, only those with the prefix when one is given."""
    memory = Memory()
    for key in ["b", "a/2", "a/1", "c"]:
        memory.put_record(key, {})
    assert memory.record_keys() == ["a/1", "a/2", "b", "c"]
    assert memory.record_keys(prefix="a/") == ["a/1", "a/2"]


def test_bad_keys_and_items_are_refused() -> None:
    """Empty, non-str and conflicting keys raise naming the problem; the memory is unchanged."""
    memory = Memory()
    with pytest.raises(InvalidArgumentError, match="A record key must not be empty"):
        memory.put_record("", {})
    with pytest.raises(ArgumentTypeError, match=r"A record key must be a str, got 3 \(int\)"):
        memory.put_record(3, {})  # type: ignore[arg-type]  # the error under test
    with pytest.raises(
        InvalidArgumentError, match=r"put under key 'a' in the memory holds another key .*\('b'\)"
    ):
        memory.put_record("a", MemoryItem(key="b"))
    with pytest.raises(InvalidArgumentError, match="must be a MemoryItem or a mapping"):
        memory.put_record("a", 5)  # type: ignore[arg-type]  # the error under test
    assert len(memory) == 0


def test_threads_putting_one_key_leave_one_record() -> None:
    """Many threads replacing the same keys leave exactly one item per key."""
    memory = Memory()

    def work(n: int) -> None:
        for i in range(200):
            memory.put_record(f"k{i % 5}", {"thread": n, "i": i})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert memory.record_keys() == [f"k{i}" for i in range(5)]
    assert sorted(item["key"] for item in memory) == [f"k{i}" for i in range(5)]


class MemoryRecords(RuleBasedStateMachine):
    """A Memory's records and a dict, changed alike, with plain items and deletions between."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = Memory()
        self.model: dict[str, int] = {}

    @rule(key=st.sampled_from(["a", "b", "c", "ab"]), value=st.integers(0, 9))
    def put(self, key: str, value: int) -> None:
        """Put or replace a record."""
        self.memory.put_record(key, {"value": value})
        self.model.pop(key, None)
        self.model[key] = value

    @rule(key=st.sampled_from(["a", "b", "c", "ab"]))
    def delete(self, key: str) -> None:
        """Delete a record."""
        assert self.memory.delete_record(key) is (key in self.model)
        self.model.pop(key, None)

    @rule(key=st.sampled_from(["a", "b"]))
    def add_plain(self, key: str) -> None:
        """Add an item with a "key" field (not a record)."""
        self.memory.add_memory_item(MemoryItem(key=key, value=-1))

    @rule()
    def drop_plain(self) -> None:
        """Delete the plain items (by their value), leaving the records."""
        self.memory.delete_items(self.memory.select(lambda item: item["value"] == -1))

    @invariant()
    def agrees(self) -> None:
        """Keys, items and their order are the model's."""
        memory = self.memory
        assert memory.record_keys() == sorted(self.model)
        for key, value in self.model.items():
            assert memory.get_record(key) == MemoryItem(key=key, value=value)
        records = [item["key"] for item in memory if item["value"] != -1]
        assert records == list(self.model)


TestMemoryRecords = MemoryRecords.TestCase
TestMemoryRecords.settings = settings(max_examples=50, stateful_step_count=25, deadline=None)


# -- StoredMemory: written through --------------------------------------------------------


def test_stored_memory_writes_records_through(store_url: str) -> None:
    """put_record and delete_record on a stored memory change the store's records at once."""
    with open_memory(store_url, "s") as memory, open_store(store_url) as store:
        memory.put_record("lang", {"value": "fr"})
        memory.put_record("lang", {"value": "de"})
        assert store.get_record("s", "lang") == MemoryItem(key="lang", value="de")
        assert len(store.read("s")) == 1
        assert memory.delete_record("lang") is True
        assert store.record_keys("s") == []


def test_stored_memory_reopens_with_its_records(store_url: str) -> None:
    """A reopened stored memory finds its records by key; items with a "key" field stay items."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1, key="lang"))
        memory.put_record("lang", {"value": "fr"})
    with open_memory(store_url, "s") as again:
        assert again.record_keys() == ["lang"]
        assert again.get_record("lang") == MemoryItem(key="lang", value="fr")
        again.put_record("lang", {"value": "de"})
        assert [item.to_dict() for item in again] == [
            {"step": 1, "key": "lang"},
            {"key": "lang", "value": "de"},
        ]


def test_refresh_files_records_put_by_another_handle(store_url: str) -> None:
    """refresh brings in records another handle put, filed by key, the newest version found."""
    with open_memory(store_url, "s") as memory, open_store(store_url) as other:
        memory.put_record("lang", {"value": "fr"})
        other.put_record("s", "lang", {"value": "de"})
        other.put_record("s", "tz", {"value": "UTC"})
        assert memory.refresh() == 2
        assert memory.record_keys() == ["lang", "tz"]
        assert memory.get_record("lang") == MemoryItem(key="lang", value="de")


def test_a_failed_put_leaves_memory_and_store_unchanged(store_url: str) -> None:
    """A record the codec refuses raises, and neither RAM nor the store changes."""
    with open_memory(store_url, "s") as memory:
        memory.put_record("lang", {"value": "fr"})
        with pytest.raises(SerializationError, match="cannot be encoded"):
            memory.put_record("lang", {"value": object()})
        assert memory.get_record("lang") == MemoryItem(key="lang", value="fr")
        assert len(memory) == 1
        assert memory.store.get_record("s", "lang") == MemoryItem(key="lang", value="fr")


def test_read_only_stored_memory_refuses_puts(store_url: str) -> None:
    """A stored memory on a read-only handle reads records and refuses to put them."""
    with open_memory(store_url, "s") as memory:
        memory.put_record("lang", {"value": "fr"})
    with open_store(store_url, read_only=True) as store, StoredMemory(store, "s") as reader:
        assert reader.get_record("lang") == MemoryItem(key="lang", value="fr")
        with pytest.raises(StoreError, match="read-only"):
            reader.put_record("lang", {"value": "de"})
        assert reader.get_record("lang") == MemoryItem(key="lang", value="fr")
