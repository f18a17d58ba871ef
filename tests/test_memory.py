"""Tests for agents.memory.Memory: UFO's API, the step index, hooks, threads, all-or-nothing loading."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agents.memory import (
    ArgumentTypeError,
    CallbackError,
    CorruptSessionError,
    FieldValidationError,
    InvalidArgumentError,
    InvalidKeyError,
    ItemNotFoundError,
    Memory,
    MemoryChange,
    MemoryItem,
    StepNotFoundError,
    field,
)
from agents.memory.memory import Memory as UfoPathMemory


def steps_memory(n: int = 5, **options: Any) -> Memory:
    """Return a memory with items of steps 0..n-1."""
    memory = Memory(**options)
    for step in range(n):
        memory.add_memory_item(MemoryItem(step=step, action=f"a{step}"))
    return memory


def steps_of(memory: Memory) -> list[Any]:
    return [item.get_value("step") for item in memory]


# -- UFO's API ------------------------------------------------------------------


def test_ufo_import_path_gives_the_same_class() -> None:
    """`agents.memory.memory.Memory` is the public Memory."""
    assert UfoPathMemory is Memory


def test_empty_memory() -> None:
    """A new memory is empty, has length 0 and no latest item."""
    memory = Memory()
    assert memory.is_empty()
    assert memory.length == 0
    assert memory.get_latest_item() is None
    assert memory.content == []


def test_add_memory_item_appends_in_order() -> None:
    """Added items keep their order in content."""
    memory = steps_memory(3)
    assert [item.step for item in memory.content] == [0, 1, 2]
    assert memory.length == 3
    assert not memory.is_empty()


def test_get_latest_item_is_the_last_added() -> None:
    """get_latest_item returns the most recently added item."""
    memory = steps_memory(3)
    assert memory.get_latest_item() == MemoryItem(step=2, action="a2")


def test_add_memory_item_rejects_non_items() -> None:
    """Adding a dict raises ArgumentTypeError (a TypeError) with the fix."""
    with pytest.raises(ArgumentTypeError, match=r"wrap a dict with MemoryItem\(\*\*fields\)"):
        Memory().add_memory_item({"step": 1})  # type: ignore[arg-type]  # the wrong type is the point


def test_load_replaces_content() -> None:
    """load() replaces the content with the given items."""
    memory = steps_memory(3)
    memory.load([MemoryItem(step=9)])
    assert steps_of(memory) == [9]


def test_list_content_and_to_list_of_dicts() -> None:
    """list_content and to_list_of_dicts give each item's fields."""
    memory = steps_memory(2)
    expected = [{"step": 0, "action": "a0"}, {"step": 1, "action": "a1"}]
    assert memory.list_content == expected
    assert memory.to_list_of_dicts() == expected


def test_filter_memory_from_keys_keeps_empty_dicts() -> None:
    """filter_memory_from_keys returns one dict per item, {} where no key matches."""
    memory = Memory([MemoryItem(step=1, a=1), MemoryItem(b=2), MemoryItem(step=3, a=3)])
    assert memory.filter_memory_from_keys(["a"]) == [{"a": 1}, {}, {"a": 3}]


def test_filter_memory_from_steps_in_memory_order() -> None:
    """filter_memory_from_steps returns the items of the given steps, in memory order."""
    memory = steps_memory(6)
    assert memory.filter_memory_from_steps([4, 1, 99]) == [
        {"step": 1, "action": "a1"},
        {"step": 4, "action": "a4"},
    ]


def test_filter_memory_from_steps_ignores_duplicate_steps() -> None:
    """Asking for a step twice returns its items once."""
    memory = steps_memory(3)
    assert len(memory.filter_memory_from_steps([1, 1])) == 1


def test_delete_memory_item_removes_every_item_of_the_step() -> None:
    """delete_memory_item(step) removes all items of that step and reports how many."""
    memory = steps_memory(3)
    memory.add_memory_item(MemoryItem(step=1, action="again"))
    assert memory.delete_memory_item(1) == 2
    assert steps_of(memory) == [0, 2]


def test_delete_unknown_step_is_a_no_op() -> None:
    """Deleting a step no item has changes nothing, as in UFO."""
    memory = steps_memory(2)
    assert memory.delete_memory_item(42) == 0
    assert memory.length == 2


def test_clear_empties_the_memory() -> None:
    """clear() removes all items."""
    memory = steps_memory(3)
    memory.clear()
    assert memory.is_empty()
    assert memory.filter_memory_from_steps([0, 1, 2]) == []


def test_to_json_keeps_ufo_shape() -> None:
    """to_json of plain items is a JSON array of field objects, as UFO writes."""
    memory = steps_memory(2)
    assert json.loads(memory.to_json()) == [
        {"step": 0, "action": "a0"},
        {"step": 1, "action": "a1"},
    ]


def test_to_json_escapes_non_ascii_as_ufo_does() -> None:
    """to_json escapes non-ASCII text as json.dumps (and so UFO) does."""
    memory = Memory([MemoryItem(text="日本語 café")])
    assert memory.to_json() == json.dumps([{"text": "日本語 café"}])


def test_to_json_bytes_does_not_escape_non_ascii() -> None:
    """The lossless form writes non-ASCII text as UTF-8, not \\u escapes."""
    memory = Memory([MemoryItem(text="日本語 café")])
    assert memory.to_json_bytes() == '[{"text":"日本語 café"}]'.encode()


def test_from_list_of_dicts_replaces_content() -> None:
    """from_list_of_dicts builds one item per dict."""
    memory = steps_memory(2)
    memory.from_list_of_dicts([{"step": 7, "x": 1}])
    assert memory.content == [MemoryItem(step=7, x=1)]


def test_from_list_of_dicts_copies_the_dicts() -> None:
    """Changing the source dict later does not change the memory."""
    row = {"step": 1}
    memory = Memory()
    memory.from_list_of_dicts([row])
    row["step"] = 2
    assert memory.content[0].step == 1


def test_from_list_of_dicts_with_typed_class() -> None:
    """item_class builds typed items, with validation."""

    class Step(MemoryItem):
        step: int

    memory = Memory()
    memory.from_list_of_dicts([{"step": 1}], item_class=Step)
    assert type(memory.content[0]) is Step
    with pytest.raises(FieldValidationError, match="Element 0"):
        memory.from_list_of_dicts([{"step": "x"}], item_class=Step)


# -- fixed defects: steps --------------------------------------------------------------


def test_items_without_step_do_not_break_step_filtering() -> None:
    """Regression (UFO read item.step and crashed): items without a step are skipped."""
    memory = Memory([MemoryItem(note="no step"), MemoryItem(step=1)])
    assert memory.filter_memory_from_steps([1]) == [{"step": 1}]


def test_items_without_step_survive_deletion() -> None:
    """Regression: deleting a step keeps items that have no step."""
    memory = Memory([MemoryItem(note="no step"), MemoryItem(step=1)])
    memory.delete_memory_item(1)
    assert memory.content == [MemoryItem(note="no step")]


def test_step_key_is_configurable() -> None:
    """step_key="Step" matches UFO's older logs."""
    memory = Memory([MemoryItem(Step=1), MemoryItem(Step=2)], step_key="Step")
    assert memory.filter_memory_from_steps([2]) == [{"Step": 2}]
    memory.delete_memory_item(1)
    assert memory.to_list_of_dicts() == [{"Step": 2}]


def test_index_follows_step_changed_after_add() -> None:
    """Changing an item's step after adding it moves it in the step index."""
    memory = steps_memory(3)
    memory.filter_memory_from_steps([0])  # the index exists now
    item = memory.content[0]
    item.set_value("step", 10)
    assert memory.filter_memory_from_steps([0]) == []
    assert memory.filter_memory_from_steps([10]) == [{"step": 10, "action": "a0"}]


def test_index_follows_step_added_after_add() -> None:
    """An item that gets a step only after it was added is found by that step."""
    memory = Memory([MemoryItem(step=1)])
    memory.filter_memory_from_steps([1])
    item = MemoryItem(note="late")
    memory.add_memory_item(item)
    item.step = 5
    assert memory.filter_memory_from_steps([5]) == [{"note": "late", "step": 5}]


def test_index_follows_step_removed_after_add() -> None:
    """Removing an item's step field takes it out of step lookups."""
    memory = steps_memory(2)
    memory.filter_memory_from_steps([0])
    del memory.content[0]["step"]
    assert memory.filter_memory_from_steps([0]) == []
    assert memory.delete_memory_item(0) == 0
    assert memory.length == 2


def test_index_follows_step_change_before_first_lookup() -> None:
    """A step changed before any lookup is found under its new value."""
    memory = steps_memory(2)
    memory.content[1].set_value("step", 7)
    assert memory.filter_memory_from_steps([7]) == [{"step": 7, "action": "a1"}]


def test_same_item_in_two_memories_is_indexed_in_both() -> None:
    """One item in two memories is refiled in both when its step changes."""
    item = MemoryItem(step=1)
    first, second = Memory([item]), Memory([item])
    first.filter_memory_from_steps([1])
    second.filter_memory_from_steps([1])
    item.step = 2
    assert first.filter_memory_from_steps([2]) == [{"step": 2}]
    assert second.filter_memory_from_steps([2]) == [{"step": 2}]
    first.delete_memory_item(2)
    assert second.filter_memory_from_steps([2]) == [{"step": 2}]


def test_deleted_item_no_longer_updates_the_memory() -> None:
    """An item deleted from a memory can change its step without touching that memory."""
    memory = steps_memory(2)
    memory.filter_memory_from_steps([0])
    item = memory.content[0]
    memory.delete_memory_item(0)
    item.step = 1
    assert memory.filter_memory_from_steps([1]) == [{"step": 1, "action": "a1"}]


def test_unhashable_step_values_are_matched() -> None:
    """A list used as a step is found and deleted by equality."""
    memory = Memory([MemoryItem(step=[1, 2]), MemoryItem(step=3)])
    assert memory.filter_memory_from_steps([[1, 2]]) == [{"step": [1, 2]}]
    assert memory.delete_memory_item([1, 2]) == 1
    assert steps_of(memory) == [3]


def test_items_of_step_and_missing_step_error() -> None:
    """items_of_step returns items; an unknown step raises a KeyError subclass listing steps."""
    memory = steps_memory(2)
    assert memory.items_of_step(1) == [MemoryItem(step=1, action="a1")]
    with pytest.raises(
        StepNotFoundError, match=r"No item has step=9; the memory holds steps \[0, 1\]"
    ):
        memory.items_of_step(9)


def test_steps_lists_distinct_steps_in_order() -> None:
    """steps() lists each step once, in order of first appearance."""
    memory = Memory([MemoryItem(step=2), MemoryItem(step=1), MemoryItem(step=2), MemoryItem()])
    assert memory.steps() == [2, 1]


# -- projections are fresh ---------------------------------------------------------------


@pytest.mark.parametrize(
    "project",
    [
        lambda m: m.filter_memory_from_keys(["step", "action"]),
        lambda m: m.filter_memory_from_steps([0, 1]),
        lambda m: m.to_list_of_dicts(),
        lambda m: m.list_content,
    ],
)
def test_projections_are_fresh_dicts(project: Any) -> None:
    """Changing a projection's dicts never changes the memory."""
    memory = steps_memory(2)
    for row in project(memory):
        row["step"] = "changed"
        row["new"] = 1
    assert steps_of(memory) == [0, 1]
    assert all("new" not in item for item in memory)


# -- Python protocols and extended reads -------------------------------------------------------


def test_len_bool_iter_index_and_slice() -> None:
    """len, bool, iteration, indexing and slicing follow the item order."""
    memory = steps_memory(4)
    assert len(memory) == 4
    assert bool(memory)
    assert not Memory()
    assert memory[0].step == 0
    assert memory[-1].step == 3
    assert [item.step for item in memory[1:3]] == [1, 2]


def test_iteration_is_a_snapshot() -> None:
    """Adding items while iterating does not extend the iteration."""
    memory = steps_memory(3)
    seen = 0
    for item in memory:
        memory.add_memory_item(item.copy())
        seen += 1
    assert seen == 3
    assert len(memory) == 6


def test_last_k_items() -> None:
    """last(k) returns the newest k items in memory order."""
    memory = steps_memory(5)
    assert [item.step for item in memory.last(2)] == [3, 4]
    assert [item.step for item in memory.last(10)] == [0, 1, 2, 3, 4]
    assert memory.last(0) == []


def test_last_rejects_negative_k() -> None:
    """last(-1) raises InvalidArgumentError (a ValueError)."""
    with pytest.raises(InvalidArgumentError, match="k >= 0"):
        steps_memory(1).last(-1)


def test_iter_newest_yields_newest_first() -> None:
    """iter_newest walks from the newest item to the oldest."""
    memory = steps_memory(100)
    assert [item.step for item in memory.iter_newest()] == list(range(99, -1, -1))


def test_select_by_predicate() -> None:
    """select(predicate) returns matching items in order."""
    memory = steps_memory(6)
    assert [item.step for item in memory.select(lambda item: item.step % 2 == 0)] == [0, 2, 4]


def test_max_items_drops_oldest_first() -> None:
    """A bounded memory keeps the newest max_items items."""
    memory = steps_memory(5, max_items=3)
    assert steps_of(memory) == [2, 3, 4]
    assert memory.filter_memory_from_steps([0, 1, 2]) == [{"step": 2, "action": "a2"}]


def test_max_items_must_be_positive() -> None:
    """max_items=0 raises InvalidArgumentError naming the value."""
    with pytest.raises(InvalidArgumentError, match="got 0"):
        Memory(max_items=0)


def test_memory_equality_and_repr() -> None:
    """Memories with equal items are equal; repr shows the size."""
    assert steps_memory(2) == steps_memory(2)
    assert steps_memory(2) != steps_memory(3)
    assert repr(Memory(session_id="s1")) == "<Memory 's1': 0 items, step_key='step'>"


# -- callbacks -------------------------------------------------------------------------


def test_callbacks_receive_memory_and_items() -> None:
    """Callbacks run after add, delete and clear with the memory and the items concerned."""
    events: list[tuple[str, list[Any]]] = []

    def record(memory: Memory, change: MemoryChange) -> None:
        events.append((change.kind, [item.get_value("step") for item in change.items]))

    memory = Memory(callbacks=[record])
    memory.add_memory_item(MemoryItem(step=1))
    memory.add_memory_item(MemoryItem(step=2))
    memory.delete_memory_item(1)
    memory.clear()
    assert events == [("add", [1]), ("add", [2]), ("delete", [1]), ("clear", [2])]


def test_callback_may_change_the_item() -> None:
    """A callback can add a field to the new item and drop a payload of an older one."""

    def stamp_and_trim(memory: Memory, change: MemoryChange) -> None:
        if change.kind != "add":
            return
        for item in change.items:
            item.set_value("seen", True)
        for old in memory.last(3)[:-2]:
            if "image" in old:
                old.delete_value("image")

    memory = Memory(callbacks=[stamp_and_trim])
    for step in range(4):
        memory.add_memory_item(MemoryItem(step=step, image=f"img{step}"))
    assert [("image" in item, item["seen"]) for item in memory] == [
        (False, True),
        (False, True),
        (True, True),
        (True, True),
    ]


def test_failing_callback_raises_and_leaves_memory_consistent() -> None:
    """A failing callback raises CallbackError; the item is added and indexed."""

    def boom(memory: Memory, change: MemoryChange) -> None:
        raise RuntimeError("disk full")

    memory = Memory(callbacks=[boom])
    with pytest.raises(CallbackError, match="boom raised RuntimeError: disk full") as info:
        memory.add_memory_item(MemoryItem(step=1))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert memory.filter_memory_from_steps([1]) == [{"step": 1}]
    assert memory.length == 1


def test_eviction_is_reported_to_callbacks() -> None:
    """Items dropped by max_items reach callbacks as a delete."""
    kinds: list[str] = []
    memory = Memory(max_items=1, callbacks=[lambda m, c: kinds.append(c.kind)])
    memory.add_memory_item(MemoryItem(step=1))
    memory.add_memory_item(MemoryItem(step=2))
    assert kinds == ["add", "delete", "add"]


def test_remove_callback() -> None:
    """A removed callback no longer runs."""
    calls: list[str] = []

    def record(memory: Memory, change: MemoryChange) -> None:
        calls.append(change.kind)

    memory = Memory()
    memory.add_callback(record)
    memory.add_memory_item(MemoryItem(step=1))
    memory.remove_callback(record)
    memory.add_memory_item(MemoryItem(step=2))
    assert calls == ["add"]


def test_add_memory_items_is_all_or_nothing() -> None:
    """add_memory_items adds nothing when one element is not an item."""
    memory = steps_memory(1)
    with pytest.raises(ArgumentTypeError, match="Element 1"):
        memory.add_memory_items([MemoryItem(step=5), "oops"])  # type: ignore[list-item]  # the wrong type is the point
    assert steps_of(memory) == [0]


# -- threads ---------------------------------------------------------------------------


def test_concurrent_adds_deletes_and_reads_lose_nothing() -> None:
    """Threads adding, deleting and reading at once never raise, and no add is lost."""
    memory = Memory()
    errors: list[BaseException] = []
    per_thread = 500

    def writer(offset: int) -> None:
        try:
            for i in range(per_thread):
                memory.add_memory_item(MemoryItem(step=offset + i, writer=offset))
        except BaseException as exc:  # pragma: no cover - reported by the assertion below
            errors.append(exc)

    def deleter() -> None:
        try:
            for i in range(per_thread):
                memory.delete_memory_item(-1 - i)  # steps no writer uses
                memory.filter_memory_from_steps([i, i + 1])
                memory.to_list_of_dicts()
                memory.to_json()
        except BaseException as exc:  # pragma: no cover - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k * 10_000,)) for k in range(4)]
    threads.append(threading.Thread(target=deleter))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(memory) == 4 * per_thread
    assert len(memory.filter_memory_from_steps(range(40_000))) == 4 * per_thread


def test_concurrent_step_deletes_remove_exactly_their_steps() -> None:
    """Several threads deleting disjoint steps leave exactly the other steps."""
    memory = steps_memory(400)
    threads = [
        threading.Thread(
            target=lambda k=k: [memory.delete_memory_item(s) for s in range(k, 400, 8)]
        )
        for k in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert steps_of(memory) == [s for s in range(400) if s % 8 >= 4]


# -- lock, copies and pickles ------------------------------------------------------------


def test_lock_is_the_lock_every_call_holds() -> None:
    """memory.lock is reentrant and is held while a call runs, so holding it makes calls one step."""
    memory = steps_memory(2)
    free_during_callback: list[bool] = []

    def callback(memory: Memory, change: MemoryChange) -> None:
        # Callbacks run under the memory's lock: another thread cannot take memory.lock now.
        probe = threading.Thread(
            target=lambda: free_during_callback.append(memory.lock.acquire(blocking=False))
        )
        probe.start()
        probe.join()

    memory.add_callback(callback)
    with memory.lock:
        memory.add_memory_item(MemoryItem(step=2))  # reentrant: no deadlock
    assert free_during_callback == [False]
    assert memory.lock is memory.lock
    assert steps_of(memory) == [0, 1, 2]


def pickled_memory() -> Memory:
    """Return a memory with settings, typed values and an index built, to copy."""
    memory = Memory(step_key="Step", max_items=10, session_id="s1", metadata={"user": "ana"})
    memory.add_memory_items(
        [MemoryItem(Step=0, at=dt.date(2024, 5, 1), pos=(1, 2)), MemoryItem(Step=1, action="ok")]
    )
    memory.add_memory_item(MemoryItem(Step=1, action="again"))
    assert len(memory.filter_memory_from_steps([1])) == 2  # builds the step index
    return memory


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_pickle_written_by_release_0_1_0_loads() -> None:
    """A memory pickled by kvmemory 0.1.0 (one class, before the parts) loads with its settings, items and index."""
    memory = pickle.loads((FIXTURES / "memory-0.1.0.pickle").read_bytes())
    assert type(memory) is Memory
    assert (memory.step_key, memory.max_items, memory.session_id) == ("Step", 50, "fixture-session")
    assert memory.metadata == {"app": "WINWORD.EXE", "n": 3}
    assert memory.created_at == "2026-01-02T03:04:05+00:00"
    assert [item.get_value("Step") for item in memory] == [1, 1, 2, 2, None]
    assert memory[0].to_dict() == {
        "Step": 1,
        "action": "click 2",
        "arguments": {"x": 2, "y": 4},
        "when": dt.date(2026, 1, 3),
        "tags": ("a", 2),
    }
    assert memory.filter_memory_from_steps([2]) == [item.to_dict() for item in memory[2:4]]
    memory[0]["Step"] = 9  # the step index follows a field change
    assert memory.items_of_step(9) == [memory[0]]
    memory.add_memory_items([MemoryItem(Step=n) for n in range(100)])
    assert len(memory) == 50
    assert pickle.loads(pickle.dumps(memory)) == memory


@pytest.mark.parametrize(
    "clone",
    [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))],
    ids=["deepcopy", "pickle"],
)
def test_deepcopy_and_pickle_give_an_independent_equal_memory(
    clone: Callable[[Memory], Memory],
) -> None:
    """Regression (TypeError: cannot pickle '_thread.RLock'): a copy is equal, has its own lock and items, and works."""
    memory = pickled_memory()
    copied = clone(memory)
    assert copied == memory
    assert copied.to_json_bytes() == memory.to_json_bytes()
    assert (copied.step_key, copied.max_items, copied.session_id, copied.metadata) == (
        "Step",
        10,
        "s1",
        {"user": "ana"},
    )
    assert copied.created_at == memory.created_at
    assert copied.lock is not memory.lock
    assert all(a is not b for a, b in zip(copied, memory, strict=True))
    # The copy's step index follows its own items, and the original does not see them.
    copied[2]["Step"] = 7
    assert copied.filter_memory_from_steps([7]) == [{"Step": 7, "action": "again"}]
    assert memory.filter_memory_from_steps([7]) == []
    copied.add_memory_items([MemoryItem(Step=n) for n in range(20, 30)])
    assert (len(copied), len(memory)) == (10, 3)
    assert memory.delete_memory_item(1) == 2
    assert len(copied) == 10


def test_copy_of_a_searched_memory_searches_its_own_items() -> None:
    """A copy has no observers: its first search builds an index of its own items."""
    memory = Memory([MemoryItem(step=0, text="open the report"), MemoryItem(step=1, text="save")])
    assert [hit.item["step"] for hit in memory.search("report")] == [0]
    copied = copy.deepcopy(memory)
    assert copied.observers == ()
    copied[1]["text"] = "save the report"
    assert sorted(hit.item["step"] for hit in copied.search("report")) == [0, 1]
    assert [hit.item["step"] for hit in memory.search("report")] == [0]


def test_copy_keeps_callbacks_and_attributes_of_a_subclass() -> None:
    """Change callbacks and a subclass's own attributes travel with a copy."""

    class Tagged(Memory):
        pass

    heard: list[str] = []
    memory = Tagged(callbacks=[lambda m, change: heard.append(change.kind)])
    memory.tag = "agent-1"  # type: ignore[attr-defined]  # a subclass's own attribute
    copied = copy.deepcopy(memory)
    assert type(copied) is Tagged
    assert copied.tag == "agent-1"  # type: ignore[attr-defined]
    copied.add_memory_item(MemoryItem(step=0))
    assert heard == ["add"]


def test_shallow_copy_shares_items_but_not_the_list() -> None:
    """copy.copy gives a memory of the same (live) items that adds and deletes on its own."""
    memory = steps_memory(3)
    copied = copy.copy(memory)
    assert copied[0] is memory[0]
    copied.delete_memory_item(0)
    assert (steps_of(copied), steps_of(memory)) == ([1, 2], [0, 1, 2])
    assert (len(copied), len(memory)) == (2, 3)
    assert memory.filter_memory_from_steps([0]) == [{"step": 0, "action": "a0"}]


def test_memory_with_a_writer_refuses_to_be_copied() -> None:
    """A memory writing to a store cannot be copied (the copy would write to the same session)."""

    class Recorder:
        def write_add(self, memory: Memory, added: Any, evicted: Any) -> None:
            pass

        def write_delete(self, memory: Memory, keys: Any) -> None:
            pass

        def write_update(self, memory: Memory, keys: Any, item: MemoryItem) -> None:
            pass

        def write_replace(self, memory: Memory, added: Any) -> None:
            pass

    memory = Memory([MemoryItem(step=0)], writer=Recorder())
    with pytest.raises(ArgumentTypeError, match=r"writes through to a store.*content"):
        copy.deepcopy(memory)
    with pytest.raises(ArgumentTypeError, match="writes through to a store"):
        pickle.dumps(memory)
    assert steps_of(memory) == [0]


# -- all-or-nothing loading ---------------------------------------------------------------


def test_from_list_of_dicts_bad_key_leaves_memory_unchanged() -> None:
    """A non-string key in one dict raises and keeps the previous content."""
    memory = steps_memory(2)
    with pytest.raises(InvalidKeyError, match="Element 1: Field keys must be strings, got 5"):
        memory.from_list_of_dicts([{"step": 1}, {5: "x"}])  # type: ignore[dict-item]  # the wrong type is the point
    assert steps_of(memory) == [0, 1]


def test_from_list_of_dicts_non_mapping_leaves_memory_unchanged() -> None:
    """A non-mapping element raises ArgumentTypeError naming its position."""
    memory = steps_memory(2)
    with pytest.raises(ArgumentTypeError, match="Element 1 is a str"):
        memory.from_list_of_dicts([{"step": 1}, "nope"])  # type: ignore[list-item]  # the wrong type is the point
    assert steps_of(memory) == [0, 1]


def test_load_with_non_item_leaves_memory_unchanged() -> None:
    """Regression (UFO assigned the list as is): load() refuses non-items and changes nothing."""
    memory = steps_memory(2)
    with pytest.raises(
        ArgumentTypeError,
        match="Element 1 is a dict, not a MemoryItem; the memory was left unchanged",
    ):
        memory.load([MemoryItem(step=5), {"step": 6}])  # type: ignore[list-item]  # the wrong type is the point
    assert steps_of(memory) == [0, 1]


def test_load_copies_the_list() -> None:
    """Changing the list given to load() later does not change the memory."""
    items = [MemoryItem(step=1)]
    memory = Memory()
    memory.load(items)
    items.append(MemoryItem(step=2))
    assert memory.length == 1


def test_typed_validation_error_in_bulk_names_position() -> None:
    """A typed class refusing one row names the row and changes nothing."""

    class Costed(MemoryItem):
        cost: float = field(default=0.0)

    memory = steps_memory(1)
    with pytest.raises(FieldValidationError, match="Element 1"):
        memory.from_list_of_dicts([{"cost": 1.0}, {"cost": "free"}], item_class=Costed)
    assert steps_of(memory) == [0]


def test_step_key_must_be_a_string() -> None:
    """A non-string step_key raises TypeError naming it."""
    with pytest.raises(TypeError, match="step_key must be a string, got 1"):
        Memory(step_key=1)  # type: ignore[arg-type]  # the wrong type is the point


def test_step_key_and_max_items_properties() -> None:
    """step_key and max_items report the configuration."""
    memory = Memory(step_key="Step", max_items=5)
    assert (memory.step_key, memory.max_items) == ("Step", 5)


def test_add_memory_items_runs_callbacks_once() -> None:
    """add_memory_items adds all items and reports them in one change, with evictions first."""
    changes: list[tuple[str, int]] = []
    memory = Memory(max_items=2, callbacks=[lambda m, c: changes.append((c.kind, len(c.items)))])
    memory.add_memory_items([MemoryItem(step=s) for s in range(3)])
    assert changes == [("delete", 1), ("add", 3)]
    assert steps_of(memory) == [1, 2]


def test_memory_is_not_equal_to_other_types() -> None:
    """Comparing a memory with a list is not equality."""
    assert steps_memory(1) != [MemoryItem(step=0, action="a0")]


def test_steps_lists_unhashable_steps() -> None:
    """steps() includes unhashable step values once."""
    memory = Memory([MemoryItem(step=[1]), MemoryItem(step=[1]), MemoryItem(step=2)])
    assert memory.steps() == [2, [1]]


def test_same_item_twice_in_one_memory() -> None:
    """An item added twice is found twice, and evicting one copy keeps the other indexed."""
    item = MemoryItem(step=1)
    memory = Memory(max_items=2)
    memory.add_memory_item(item)
    memory.add_memory_item(item)
    memory.filter_memory_from_steps([1])
    memory.add_memory_item(MemoryItem(step=2))
    item.step = 3
    assert memory.filter_memory_from_steps([3]) == [{"step": 3}]


def test_step_changed_back_to_earlier_position_keeps_order() -> None:
    """An item moved into an existing step's bucket keeps memory order within it."""
    memory = steps_memory(3)
    memory.filter_memory_from_steps([0])
    memory.content[0].step = 2
    assert memory.filter_memory_from_steps([2]) == [
        {"step": 2, "action": "a0"},
        {"step": 2, "action": "a2"},
    ]


def test_other_field_changes_do_not_touch_the_index() -> None:
    """Changing a non-step field of an indexed item leaves step lookups as they were."""
    memory = steps_memory(2)
    memory.filter_memory_from_steps([0])
    memory.content[0].set_value("action", "changed")
    assert memory.filter_memory_from_steps([0]) == [{"step": 0, "action": "changed"}]


def test_unhashable_step_changed_to_hashable() -> None:
    """An item whose unhashable step becomes hashable is found under the new step."""
    memory = Memory([MemoryItem(step=[1])])
    memory.filter_memory_from_steps([0])
    memory.content[0].step = 4
    assert memory.filter_memory_from_steps([4]) == [{"step": 4}]
    assert memory.filter_memory_from_steps([[1]]) == []


def test_index_lookup_with_unhashable_query() -> None:
    """Asking for an unhashable step among hashable ones works."""
    memory = Memory([MemoryItem(step=1), MemoryItem(step={"a": 1})])
    assert memory.filter_memory_from_steps([{"a": 1}, 1]) == [{"step": 1}, {"step": {"a": 1}}]


def test_memory_garbage_collected_while_item_lives() -> None:
    """An item outliving its memory can still change its step."""
    import gc

    item = MemoryItem(step=1)
    memory = Memory([item])
    memory.filter_memory_from_steps([1])
    del memory
    gc.collect()
    item.step = 2
    assert item.step == 2


class RecordingWriter:
    """A MemoryWriter that records what it is told and can be made to refuse."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refuse = False

    def _record(self, *call: Any) -> None:
        if self.refuse:
            raise OSError("disk full")
        self.calls.append(call)

    def write_add(self, memory: Memory, added: Any, evicted: Any) -> None:
        self._record("add", [key for key, _ in added], list(evicted))

    def write_delete(self, memory: Memory, keys: Any) -> None:
        self._record("delete", list(keys))

    def write_update(self, memory: Memory, keys: Any, item: MemoryItem) -> None:
        self._record("update", list(keys), item.to_dict())

    def write_replace(self, memory: Memory, added: Any) -> None:
        self._record("replace", [key for key, _ in added])


def test_writer_hears_every_change_by_key() -> None:
    """A writer is told of adds (with evictions), field updates, deletes and clears, by item key."""
    writer = RecordingWriter()
    memory = Memory(max_items=2, writer=writer)
    memory.add_memory_items([MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=3)])
    memory[0]["action"] = "click"
    memory.delete_memory_item(3)
    memory.clear()
    assert writer.calls == [
        ("add", [0, 1, 2], [0]),
        ("update", [1], {"step": 2, "action": "click"}),
        ("delete", [2]),
        ("replace", []),
    ]


def test_writer_hears_field_changes_of_items_added_after_clear() -> None:
    """After clear(), a field change of a newly added item still reaches the writer."""
    writer = RecordingWriter()
    memory = Memory(writer=writer)
    memory.add_memory_item(MemoryItem(step=1))
    memory.clear()
    item = MemoryItem(step=2, action="click")
    memory.add_memory_item(item)
    item["action"] = "type"
    assert writer.calls[-1] == ("update", [1], {"step": 2, "action": "type"})


def test_observer_hears_content_then_every_change_after_it_is_applied() -> None:
    """An observer first hears the content, then adds, updates, deletes, loads and clears by key."""
    observer = RecordingWriter()
    memory = Memory([MemoryItem(step=1)], max_items=2)
    lengths: list[int] = []

    class LengthProbe(RecordingWriter):
        def write_add(self, memory: Memory, added: Any, evicted: Any) -> None:
            lengths.append(len(memory))

    memory.add_observer(observer)
    memory.add_observer(LengthProbe())
    memory.add_memory_items([MemoryItem(step=2), MemoryItem(step=3)])
    memory[0]["action"] = "click"
    memory.delete_memory_item(3)
    memory.load([MemoryItem(step=7)])
    memory.clear()
    assert observer.calls == [
        ("replace", [0]),
        ("add", [1, 2], [0]),
        ("update", [1], {"step": 2, "action": "click"}),
        ("delete", [2]),
        ("replace", [3]),
        ("replace", []),
    ]
    assert lengths == [2]  # told after the add and its eviction were applied
    assert memory.observers[0] is observer


def test_loading_a_file_of_another_step_key_indexes_by_that_key_with_an_observer(
    tmp_path: Path,
) -> None:
    """Regression: with an observer, a loaded file's step key also keys the step index (it kept the old key)."""
    path = tmp_path / "session.json"
    Memory([MemoryItem(Step=1, action="click"), MemoryItem(Step=2)], step_key="Step").save(path)
    memory = Memory()
    memory.add_observer(RecordingWriter())
    memory.load_file(path)
    assert memory.step_key == "Step"
    assert memory.items_of_step(1) == [MemoryItem(Step=1, action="click")]
    memory[1]["Step"] = 5
    assert memory.filter_memory_from_steps([5]) == [{"Step": 5}]


def test_observer_hears_one_by_one_adds_in_a_batch_before_the_next_change() -> None:
    """Adds one by one reach an observer together: when it asks, or before any later change."""
    observer = RecordingWriter()
    memory = Memory()
    memory.add_observer(observer)
    first, second = MemoryItem(step=1), MemoryItem(step=2)
    memory.add_memory_item(first)
    memory.add_memory_item(second)
    assert observer.calls == [("replace", [])]
    memory.notify_observers()
    memory.notify_observers()  # nothing more to tell
    memory.add_memory_item(MemoryItem(step=3))
    second["action"] = "click"  # told after the add of step 3, which came first
    memory.add_memory_item(MemoryItem(step=4))
    first["action"] = "type"
    memory.add_memory_item(MemoryItem(step=5))
    memory.delete_memory_item(5)
    assert observer.calls == [
        ("replace", []),
        ("add", [0, 1], []),
        ("add", [2], []),
        ("update", [1], {"step": 2, "action": "click"}),
        ("add", [3], []),
        ("update", [0], {"step": 1, "action": "type"}),
        ("add", [4], []),
        ("delete", [4]),
    ]


def test_items_changed_before_the_index_catches_up_are_filed_by_their_new_step() -> None:
    """An item added after the index exists and changed before the next lookup is found under its new step."""
    memory = Memory([MemoryItem(step=1)])
    assert memory.filter_memory_from_steps([1]) == [{"step": 1}]
    item = MemoryItem(step=2)
    memory.add_memory_item(item)
    item["step"] = 3
    assert memory.filter_memory_from_steps([2]) == []
    assert memory.items_of_step(3) == [item]
    item["step"] = 4  # watched now that the index holds it
    assert memory.filter_memory_from_steps([3, 4]) == [{"step": 4}]


def test_removed_observer_hears_nothing_more() -> None:
    """remove_observer stops the calls; removing an unknown observer raises ValueError."""
    observer = RecordingWriter()
    memory = Memory()
    memory.add_observer(observer)
    memory.remove_observer(observer)
    memory.add_memory_item(MemoryItem(step=1))
    assert observer.calls == [("replace", [])]
    with pytest.raises(ValueError, match="remove"):
        memory.remove_observer(observer)


def test_refusing_writer_leaves_memory_unchanged() -> None:
    """When the writer raises, adds, deletes, loads and clears change nothing."""
    writer = RecordingWriter()
    memory = Memory(writer=writer)
    memory.add_memory_items([MemoryItem(step=1), MemoryItem(step=2)])
    writer.refuse = True
    for change in (
        lambda: memory.add_memory_item(MemoryItem(step=3)),
        lambda: memory.delete_memory_item(1),
        lambda: memory.load([MemoryItem(step=9)]),
        memory.clear,
    ):
        with pytest.raises(OSError, match="disk full"):
            change()
        assert memory.to_list_of_dicts() == [{"step": 1}, {"step": 2}]
        assert memory.filter_memory_from_steps([1]) == [{"step": 1}]


def test_refused_field_change_is_undone() -> None:
    """A field set or delete the writer refuses is put back, in place, and the index stays right."""
    writer = RecordingWriter()
    memory = Memory(writer=writer)
    memory.add_memory_item(MemoryItem(step=1, action="click", cost=1))
    item = memory[0]
    writer.refuse = True
    with pytest.raises(OSError, match="disk full"):
        item["step"] = 2
    with pytest.raises(OSError, match="disk full"):
        del item["action"]
    assert list(item.to_dict().items()) == [("step", 1), ("action", "click"), ("cost", 1)]
    assert memory.items_of_step(1) == [item]
    assert memory.filter_memory_from_steps([2]) == []


def test_delete_items_deletes_by_identity() -> None:
    """delete_items removes exactly the given item objects and skips others."""
    memory = Memory()
    first, second = MemoryItem(step=1), MemoryItem(step=1)
    memory.add_memory_items([first, second])
    assert memory.delete_items([second, MemoryItem(step=1)]) == 1
    assert memory.content == [first]
    assert memory.content[0] is first


def test_item_changed_refiles_a_step_mutated_in_place() -> None:
    """After a list step is mutated in place, item_changed makes step lookups follow."""
    memory = Memory()
    item = MemoryItem(step=[1])
    memory.add_memory_item(item)
    assert memory.items_of_step([1]) == [item]
    item["step"].append(2)
    memory.item_changed(item)
    assert memory.items_of_step([1, 2]) == [item]


def test_item_changed_refuses_an_item_not_held() -> None:
    """item_changed of an item the memory does not hold names it."""
    with pytest.raises(ItemNotFoundError, match="step=5"):
        Memory().item_changed(MemoryItem(step=5))


def test_step_change_racing_step_deletes_keeps_lookups_working() -> None:
    """Changing steps in one thread while another deletes steps never breaks later lookups."""
    memory = Memory()
    memory.add_memory_items([MemoryItem(step=i % 5) for i in range(2000)])
    memory.steps()
    memory.items_of_steps([0])  # build the index, so that items are watched
    items = memory.content
    errors: list[BaseException] = []

    def change_steps() -> None:
        try:
            for n, item in enumerate(items):
                item["step"] = (n + 1) % 5
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def delete_steps() -> None:
        try:
            for n in range(200):
                memory.delete_memory_item(n % 5)
                memory.add_memory_item(MemoryItem(step=n % 5))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=change_steps), threading.Thread(target=delete_steps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for step in range(5):
        expected = [f for f in memory.to_list_of_dicts() if f.get("step") == step]
        assert memory.filter_memory_from_steps([step]) == expected
        assert [item.to_dict() for item in memory.items_of_steps([step])] == expected


def test_remove_unknown_callback_is_an_invalid_argument() -> None:
    """remove_callback of a callback never added raises InvalidArgumentError naming it."""
    with pytest.raises(InvalidArgumentError, match="Callback print is not registered"):
        Memory().remove_callback(print)


def session_memory() -> Memory:
    """Return a memory with items, a session id and metadata, to check loads against."""
    return Memory([MemoryItem(step=1, action="a")], session_id="before", metadata={"run": 1})


def state_of(memory: Memory) -> tuple[Any, ...]:
    """Return everything a load may change."""
    return (
        memory.to_list_of_dicts(),
        memory.session_id,
        memory.metadata,
        memory.created_at,
        memory.step_key,
    )


BAD_HEADERS = {
    "metadata_list": {"metadata": [1, 2]},
    "metadata_bad_tag": {"metadata": {"when": {"$kv": "date", "v": "never"}}},
    "session_id_int": {"session_id": 7},
    "created_at_list": {"created_at": []},
    "step_key_null": {"step_key": None},
}


@pytest.mark.parametrize("name", list(BAD_HEADERS))
def test_bad_header_leaves_memory_unchanged(name: str, tmp_path: Path) -> None:
    """A document with valid items and a malformed header raises and changes nothing, header included."""
    path = tmp_path / "new.json"
    Memory([MemoryItem(step=9)], session_id="new").save(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    document.update(BAD_HEADERS[name])
    memory = session_memory()
    before = state_of(memory)
    with pytest.raises(CorruptSessionError, match=r"The header of JSON input, at \$\."):
        memory.load_json(json.dumps(document))
    assert state_of(memory) == before


def test_bad_jsonl_header_leaves_memory_unchanged(tmp_path: Path) -> None:
    """A JSONL file whose header has malformed metadata raises naming the field and changes nothing."""
    path = tmp_path / "new.jsonl"
    Memory([MemoryItem(step=9)], session_id="new").save(path)
    header, rest = path.read_bytes().split(b"\n", 1)
    bad = json.loads(header)
    bad["metadata"] = "not an object"
    path.write_bytes(json.dumps(bad).encode() + b"\n" + rest)
    memory = session_memory()
    before = state_of(memory)
    with pytest.raises(
        CorruptSessionError, match=r"at \$\.metadata: expected an object of metadata"
    ):
        memory.load_file(path)
    assert state_of(memory) == before


def test_load_file_refuses_a_nul_byte_in_the_path(tmp_path: Path) -> None:
    """A session path with a NUL byte is refused by name instead of being cut at the NUL."""
    Memory([MemoryItem(step=1)]).save(tmp_path / "run.json")
    with pytest.raises(InvalidArgumentError, match=r"session file path .*holds a NUL byte"):
        Memory.from_file(str(tmp_path / "run.json") + "\0.txt")


def test_save_refuses_a_nul_byte_in_the_path(tmp_path: Path) -> None:
    """save() to a path with a NUL byte raises InvalidArgumentError and writes nothing."""
    with pytest.raises(InvalidArgumentError, match="holds a NUL byte"):
        Memory([MemoryItem(step=1)]).save(str(tmp_path / "run.json") + "\0x")
    assert list(tmp_path.iterdir()) == []


def test_whitespace_only_file_of_megabytes_is_refused_in_few_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of 32 MB of blanks is refused as JSON with no content, in block reads, not one per byte."""
    path = tmp_path / "blank.json"
    path.write_bytes(b" \n\t" * (32 * 1024 * 1024 // 3))
    reads: list[int] = []

    class CountingReader(io.BufferedReader):
        def read(self, size: int | None = -1, /) -> bytes:
            reads.append(1)
            return super().read(size)

    def counting_open(name: str, mode: str = "rb") -> CountingReader:
        return CountingReader(io.FileIO(name, mode))

    monkeypatch.setattr("agents.memory._session.open", counting_open, raising=False)
    memory = session_memory()
    before = state_of(memory)
    with pytest.raises(CorruptSessionError, match="is not valid JSON"):
        memory.load_file(path)
    assert state_of(memory) == before
    assert 0 < len(reads) < 1000


# -- the step index against a plain list, under any interleaving ------------------------

_STEPS = st.one_of(st.integers(0, 12), st.sampled_from(["plan", True, 1.0]), st.just([1, 2]))


class StepIndexMachine(RuleBasedStateMachine):
    """A Memory's step lookups against a list of (item, step) scanned each time."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = Memory()
        self.model: list[MemoryItem] = []
        self.added = 0
        self.looked_up = False

    def _add(self, item: MemoryItem) -> None:
        # A number per item, so lookups that return items out of order are told apart.
        self.added += 1
        item.set_value("n", self.added)
        self.memory.add_memory_item(item)
        self.model.append(item)

    @rule(steps=st.lists(_STEPS, min_size=1, max_size=6))
    def add(self, steps: list[Any]) -> None:
        for step in steps:
            self._add(MemoryItem(step=step))

    @rule()
    def add_stepless(self) -> None:
        self._add(MemoryItem(action="wait"))

    def _pick(self, at: int) -> MemoryItem | None:
        return self.model[at % len(self.model)] if self.model else None

    @rule(at=st.integers(0, 63), step=_STEPS)
    def change_step(self, at: int, step: Any) -> None:
        item = self._pick(at)
        if item is not None:
            item.set_value("step", step)

    @rule(at=st.integers(0, 63))
    def drop_step_field(self, at: int) -> None:
        item = self._pick(at)
        if item is not None and "step" in item:
            item.delete_value("step")

    @rule(step=_STEPS)
    def delete_step(self, step: Any) -> None:
        removed = self.memory.delete_memory_item(step)
        kept = [item for item in self.model if not _has_step(item, step)]
        assert removed == len(self.model) - len(kept)
        self.model = kept

    @rule(at=st.integers(0, 63))
    def delete_one_item(self, at: int) -> None:
        item = self._pick(at)
        if item is not None:
            self.memory.delete_items([item])
            self.model = [held for held in self.model if held is not item]

    @rule(steps=st.lists(_STEPS, max_size=3))
    def lookup(self, steps: list[Any]) -> None:
        assert self.memory.filter_memory_from_steps(steps) == self._expected(steps)
        self.looked_up = True

    @rule()
    def clear(self) -> None:
        self.memory.clear()
        self.model = []
        self.looked_up = False  # clear drops the index: the next lookup builds it anew

    @invariant()
    def same_items(self) -> None:
        assert self.memory.content == self.model

    @rule()
    def every_step_found_in_order(self) -> None:
        # A rule, not an invariant: adds and step changes also happen between
        # two lookups, while the index has items to catch up with. Only once a
        # lookup built the index, so adds before it exercise the one-pass build.
        if self.looked_up:
            for item in self.model:
                if "step" in item:
                    step = item.get_value("step")
                    assert self.memory.filter_memory_from_steps([step]) == self._expected([step])

    def _expected(self, steps: list[Any]) -> list[dict[str, Any]]:
        return [item.to_dict() for item in self.model if any(_has_step(item, s) for s in steps)]


def _has_step(item: MemoryItem, step: Any) -> bool:
    """Whether the item's step equals ``step`` as the index compares them (==, so 1 == 1.0 == True)."""
    return "step" in item and item.get_value("step") == step


StepIndexMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_step_index_follows_every_change = StepIndexMachine.TestCase
