"""StoredMemory: a Memory whose changes are written through to a store, on every store."""

from __future__ import annotations

from typing import Any

import pytest

from agents.memory import (
    EmbedderMismatchError,
    Memory,
    MemoryChange,
    MemoryItem,
    SerializationError,
)
from agents.memory.stores import StoredMemory, VectorModel, open_memory, open_store
from agents.memory.stores.testing import (
    CountingEmbedder,
    every_codec_type,
    same,
    steps_of,
    vector_session,
)


def reopened(url: str, session: str = "s", **options: Any) -> list[MemoryItem]:
    """Return the items of a session as a fresh open of the store sees them."""
    with open_memory(url, session, **options) as memory:
        return memory.content


def test_add_is_durable_before_return(store_url: str) -> None:
    """An added item is in the store as soon as add_memory_item returns."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1, action="click"))
        assert steps_of(reopened(store_url)) == [1]


def test_reopen_gives_same_items_classes_and_order(store_url: str) -> None:
    """Reopening a session gives back the same items, classes and order."""
    items = every_codec_type()
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(items[0])
        memory.add_memory_items(items[1:])
    back = reopened(store_url)
    assert all(same(a, b) for a, b in zip(items, back, strict=True))
    assert len(back) == len(items)


def test_delete_and_clear_are_written_through(store_url: str) -> None:
    """delete_memory_item and clear reach the store before they return."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_items([MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=1)])
        assert memory.delete_memory_item(1) == 2
        assert steps_of(reopened(store_url)) == [2]
        memory.clear()
        assert reopened(store_url) == []


def test_callback_mutation_is_persisted(store_url: str) -> None:
    """Fields a callback sets on the new item, or removes from an older one, reach the store."""

    def stamp(memory: Memory, change: MemoryChange) -> None:
        if change.kind == "add":
            for item in change.items:
                item["stamped"] = True
            older = memory.content[:-1]
            for item in older:
                if "image" in item:
                    del item["image"]

    with open_memory(store_url, "s", callbacks=[stamp]) as memory:
        memory.add_memory_item(MemoryItem(step=1, image=b"png"))
        memory.add_memory_item(MemoryItem(step=2, image=b"png"))
    back = reopened(store_url)
    assert [item.to_dict() for item in back] == [
        {"step": 1, "stamped": True},
        {"step": 2, "image": b"png", "stamped": True},
    ]


def test_step_change_is_persisted_and_reindexed(store_url: str) -> None:
    """Changing an item's step updates the stored row and the store's step filter."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1))
        memory.content[0]["step"] = 7
        assert memory.filter_memory_from_steps([7]) == [{"step": 7}]
    with open_store(store_url) as store:
        assert steps_of(store.read("s", steps=[7])) == [7]


def test_save_item_persists_in_place_mutation(store_url: str) -> None:
    """save_item writes a value that was mutated in place."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1, tags=["a"]))
        item = memory.content[0]
        item["tags"].append("b")
        memory.save_item(item)
    assert reopened(store_url)[0]["tags"] == ["a", "b"]


def test_save_item_refuses_a_foreign_item(store_url: str) -> None:
    """save_item of an item the memory does not hold raises ValueError naming the session."""
    with open_memory(store_url, "s") as memory, pytest.raises(ValueError, match="'s'"):
        memory.save_item(MemoryItem(step=1))


def test_unencodable_add_leaves_ram_and_store_unchanged(store_url: str) -> None:
    """An add that cannot be encoded raises and changes neither RAM nor the store."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1))
        with pytest.raises(SerializationError, match="'obj' of step 2"):
            memory.add_memory_items([MemoryItem(step=2), MemoryItem(step=2, obj=object())])
        assert steps_of(memory.content) == [1]
    assert steps_of(reopened(store_url)) == [1]


def test_unencodable_field_change_is_undone(store_url: str) -> None:
    """Setting a field to an unencodable value raises and the item keeps its old value."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1, note="old"))
        item = memory.content[0]
        with pytest.raises(SerializationError, match="'note' of step 1"):
            item["note"] = object()
        assert item["note"] == "old"
        with pytest.raises(SerializationError, match="'new' of step 1"):
            item["new"] = object()
        assert "new" not in item
    assert reopened(store_url)[0].to_dict() == {"step": 1, "note": "old"}


def test_max_items_evicts_in_store_too(store_url: str) -> None:
    """With max_items, evicted items leave the store in the same transaction."""
    with open_memory(store_url, "s", max_items=2) as memory:
        memory.add_memory_items([MemoryItem(step=i) for i in range(3)])
        memory.add_memory_item(MemoryItem(step=3))
        assert steps_of(memory.content) == [2, 3]
    with open_store(store_url) as store:
        assert steps_of(store.read("s")) == [2, 3]


def test_load_replaces_the_stored_session(store_url: str) -> None:
    """load() replaces the stored session in one transaction."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1))
        memory.load([MemoryItem(step=8), MemoryItem(step=9)])
    assert steps_of(reopened(store_url)) == [8, 9]


def test_refresh_fetches_only_new_items(store_url: str) -> None:
    """refresh() adds what another writer appended, once, and not the memory's own items."""
    with open_memory(store_url, "s") as memory, open_store(store_url) as other:
        memory.add_memory_item(MemoryItem(step=1))
        other.append("s", [MemoryItem(step=2)])
        memory.add_memory_item(MemoryItem(step=3))
        assert memory.refresh() == 1
        assert memory.refresh() == 0
        assert sorted(steps_of(memory.content)) == [1, 2, 3]


def test_keep_last_and_expire_trim_ram_and_store(store_url: str) -> None:
    """keep_last and expire on a stored memory delete in the store and in RAM."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_items([MemoryItem(step=i) for i in range(4)])
        assert memory.keep_last(1) == 3
        assert steps_of(memory.content) == [3]
        assert memory.expire(0) == 1
        assert memory.content == []
    assert reopened(store_url) == []


def test_session_id_is_fixed(store_url: str) -> None:
    """Assigning another session id to a stored memory raises AttributeError."""
    with open_memory(store_url, "s") as memory, pytest.raises(AttributeError, match="fixed"):
        memory.session_id = "other"


def test_open_memory_with_a_store_leaves_it_open(store_url: str) -> None:
    """A memory opened on a store object does not close that store."""
    with open_store(store_url) as store:
        memory = open_memory(store, "s")
        memory.add_memory_item(MemoryItem(step=1))
        memory.close()
        assert store.count("s") == 1
        assert isinstance(memory, StoredMemory)


def test_sessions_do_not_mix_in_memories(store_url: str) -> None:
    """Two stored memories on two sessions of one store keep their own items."""
    with open_store(store_url) as store:
        a = open_memory(store, "a")
        b = open_memory(store, "b")
        a.add_memory_item(MemoryItem(step=1))
        b.add_memory_item(MemoryItem(step=2))
    assert steps_of(reopened(store_url, "a")) == [1]
    assert steps_of(reopened(store_url, "b")) == [2]


def test_reopened_session_finds_and_deletes_its_steps(store_url: str) -> None:
    """A reopened session answers step filters, items_of_step and delete_memory_item."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_items([MemoryItem(step=1, a=1), MemoryItem(step=2), MemoryItem(step=1)])
    with open_memory(store_url, "s") as memory:
        assert memory.filter_memory_from_steps([1]) == [{"step": 1, "a": 1}, {"step": 1}]
        assert len(memory.items_of_step(2)) == 1
        assert memory.delete_memory_item(1) == 2
    assert steps_of(reopened(store_url)) == [2]


def test_field_change_on_reopened_item_is_written(store_url: str) -> None:
    """Setting and deleting a field of an item loaded from the store reaches the store."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1, image="big"))
    with open_memory(store_url, "s") as memory:
        memory[0]["action"] = "click"
        del memory[0]["image"]
        memory[0]["step"] = 7
        assert memory.items_of_step(7) == [memory[0]]
    assert [item.to_dict() for item in reopened(store_url)] == [{"step": 7, "action": "click"}]


def test_field_change_after_reload_is_written(store_url: str) -> None:
    """After reload(), items are live: a field change is written through."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_item(MemoryItem(step=1))
        memory.reload()
        memory[0]["note"] = "kept"
        assert memory.filter_memory_from_steps([1]) == [{"step": 1, "note": "kept"}]
    assert [item.to_dict() for item in reopened(store_url)] == [{"step": 1, "note": "kept"}]


def test_max_items_is_enforced_in_the_store_on_reopen(store_url: str) -> None:
    """Reopening with max_items trims the stored session to the newest items."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_items([MemoryItem(step=i) for i in range(5)])
    with open_memory(store_url, "s", max_items=2) as memory:
        assert steps_of(memory.content) == [3, 4]
    assert steps_of(reopened(store_url)) == [3, 4]


def test_max_items_is_enforced_in_the_store_on_refresh(store_url: str) -> None:
    """Items another handle appended are fetched by refresh and trimmed to max_items, in RAM and store."""
    seen: list[tuple[str, list[Any]]] = []
    with (
        open_memory(
            store_url,
            "s",
            max_items=2,
            callbacks=[lambda m, change: seen.append((change.kind, steps_of(list(change.items))))],
        ) as memory,
        open_store(store_url) as other,
    ):
        memory.add_memory_item(MemoryItem(step=1))
        other.append("s", [MemoryItem(step=2), MemoryItem(step=3)])
        assert memory.refresh() == 2
        assert steps_of(memory.content) == [2, 3]
        assert steps_of(other.read("s")) == [2, 3]
    assert seen[-2:] == [("delete", [1]), ("add", [2, 3])]


def test_loading_a_file_keeps_the_stored_session(store_url: str, tmp_path: Any) -> None:
    """A session file of another id and step key loads into a stored memory, which stays on its session."""
    source = Memory(session_id="elsewhere", step_key="Step")
    source.add_memory_items([MemoryItem(Step=1, action="a"), MemoryItem(Step=2)])
    path = tmp_path / "other.json"
    source.save(path)
    with open_memory(store_url, "s") as memory:
        memory.load_file(path)
        assert memory.session_id == "s"
        assert memory.step_key == "step"
    assert [item.to_dict() for item in reopened(store_url)] == [
        {"Step": 1, "action": "a"},
        {"Step": 2},
    ]


def test_metadata_given_to_open_memory_comes_back_on_reopen(store_url: str) -> None:
    """Metadata passed to open_memory is saved in the store and restored by a later open."""
    with open_memory(store_url, "s", metadata={"user": "ann", "task": ("a", 1)}) as memory:
        memory.add_memory_item(MemoryItem(step=1))
    with open_memory(store_url, "s") as memory:
        assert memory.metadata == {"user": "ann", "task": ("a", 1)}


def test_metadata_assignment_and_save_metadata_write_through(store_url: str) -> None:
    """Assigning metadata, or changing it in place then save_metadata(), reaches the store."""
    with open_memory(store_url, "s") as memory:
        memory.metadata = {"round": 1}
    with open_memory(store_url, "s") as memory:
        assert memory.metadata == {"round": 1}
        memory.metadata["round"] = 2
        memory.save_metadata()
    with open_memory(store_url, "s") as memory:
        assert memory.metadata == {"round": 2}


def test_reload_rereads_metadata_another_handle_wrote(store_url: str) -> None:
    """reload() picks up metadata another handle saved."""
    with open_memory(store_url, "s", metadata={"v": 1}) as memory, open_store(store_url) as other:
        other.set_metadata("s", {"v": 2})
        memory.reload()
        assert memory.metadata == {"v": 2}


def test_semantic_search_reads_keys_given_as_an_iterator_once(tmp_path: Any) -> None:
    """Keys passed as a generator reach the store and the in-RAM ranking alike."""
    embedder = CountingEmbedder()
    items = vector_session()
    with open_memory(f"sqlite:///{tmp_path}/s.db", "s") as memory:
        memory.add_memory_items(items)
        got = memory.search(
            "email", 3, keys=(key for key in ["note"]), mode="semantic", embedder=embedder
        )
    want = Memory(vector_session()).search(
        "email", 3, keys=["note"], mode="semantic", embedder=embedder
    )
    assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]


def test_stored_memory_with_another_model_is_refused_until_its_vectors_are_dropped(
    store_url: str,
) -> None:
    """A stored session embedded with one model refuses another; drop_vectors() lets it embed again."""
    with open_memory(store_url, "s") as memory:
        memory.add_memory_items(vector_session())
        assert memory.index_embeddings(CountingEmbedder(64)) == 7
    with open_memory(store_url, "s") as memory:
        other = CountingEmbedder(32)
        with pytest.raises(EmbedderMismatchError, match=r"'hashing-3gram-64'.*'hashing-3gram-32'"):
            memory.search("email", mode="semantic", embedder=other)
        assert other.texts == 0
        assert memory.drop_vectors() == 8
        assert memory.index_embeddings(other) == 7
        assert memory.store.vector_model("s") == VectorModel("hashing-3gram-32", 32)
