"""A stored memory against a plain list model, under every interleaving hypothesis finds.

Each rule changes the stored memory the way an agent would (add, set and
delete fields, change a step, delete a step, clear), or crosses a boundary
(close and reopen, reload, a second handle appending then refresh), and the
same change is made to a plain list of dicts. After every rule the memory,
its step lookups and a fresh read of the store must all equal the model.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agents.memory import MemoryItem
from agents.memory.stores import StoredMemory, open_memory, open_store

STEPS = st.integers(min_value=0, max_value=4)
KEYS = st.sampled_from(["action", "thought", "cost"])
VALUES = st.one_of(st.integers(-5, 5), st.text(max_size=5), st.lists(st.integers(), max_size=2))


def run_machine(url: str, max_items: int | None) -> None:
    """Run the state machine on one store URL, a fresh session per example."""

    class StoredMemoryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.session = f"s-{uuid.uuid4().hex[:12]}"
            self.memory: StoredMemory = open_memory(url, self.session, max_items=max_items)
            self.model: list[dict[str, Any]] = []

        def trim(self) -> None:
            if max_items is not None:
                del self.model[: max(len(self.model) - max_items, 0)]

        @rule(step=STEPS, key=KEYS, value=VALUES)
        def add(self, step: int, key: str, value: Any) -> None:
            self.memory.add_memory_item(MemoryItem(step=step, **{key: value}))
            self.model.append({"step": step, key: value})
            self.trim()

        @precondition(lambda self: self.model)
        @rule(data=st.data(), key=KEYS, value=VALUES)
        def set_field(self, data: st.DataObject, key: str, value: Any) -> None:
            i = data.draw(st.integers(0, len(self.model) - 1))
            self.memory[i].set_value(key, value)
            self.model[i][key] = value

        @precondition(lambda self: self.model)
        @rule(data=st.data(), key=KEYS)
        def delete_field(self, data: st.DataObject, key: str) -> None:
            i = data.draw(st.integers(0, len(self.model) - 1))
            if key in self.model[i]:
                del self.memory[i][key]
                del self.model[i][key]

        @precondition(lambda self: self.model)
        @rule(data=st.data(), step=STEPS)
        def change_step(self, data: st.DataObject, step: int) -> None:
            i = data.draw(st.integers(0, len(self.model) - 1))
            self.memory[i]["step"] = step
            self.model[i]["step"] = step

        @rule(step=STEPS)
        def delete_step(self, step: int) -> None:
            expected = sum(1 for fields in self.model if fields.get("step") == step)
            assert self.memory.delete_memory_item(step) == expected
            self.model = [fields for fields in self.model if fields.get("step") != step]

        @rule()
        def clear(self) -> None:
            self.memory.clear()
            self.model = []

        @rule()
        def close_and_reopen(self) -> None:
            self.memory.close()
            self.memory = open_memory(url, self.session, max_items=max_items)

        @rule()
        def reload(self) -> None:
            self.memory.reload()

        @rule(step=STEPS)
        def refresh_after_second_handle_appends(self, step: int) -> None:
            with open_store(url) as other:
                other.append(self.session, [MemoryItem(step=step, by="other")])
            assert self.memory.refresh() == 1
            self.model.append({"step": step, "by": "other"})
            self.trim()

        @invariant()
        def memory_equals_model(self) -> None:
            assert self.memory.to_list_of_dicts() == self.model

        # A rule, not an invariant: a step lookup builds the index, and checking it
        # after every rule would hide changes the memory misses until the next lookup.
        @rule()
        def step_lookups_equal_model(self) -> None:
            for step in range(5):
                expected = [fields for fields in self.model if fields.get("step") == step]
                assert self.memory.filter_memory_from_steps([step]) == expected
                assert [item.to_dict() for item in self.memory.items_of_steps([step])] == expected

        @invariant()
        def store_equals_model(self) -> None:
            assert [item.to_dict() for item in self.memory.store.read(self.session)] == self.model

        def teardown(self) -> None:
            self.memory.close()

    StoredMemoryMachine.TestCase.settings = settings(
        max_examples=50, stateful_step_count=25, deadline=None
    )
    runner = StoredMemoryMachine.TestCase("runTest")
    runner.runTest()


@pytest.mark.slow
def test_stored_memory_behaves_like_a_list(store_url: str) -> None:
    """Every interleaving of changes, reopens, reloads and refreshes matches a plain list."""
    run_machine(store_url, max_items=None)


@pytest.mark.slow
def test_bounded_stored_memory_behaves_like_a_bounded_list(store_url: str) -> None:
    """With max_items, RAM and store keep exactly the newest items through every interleaving."""
    run_machine(store_url, max_items=3)
