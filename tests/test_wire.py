"""Tests for agents.memory._wire: items to JSON and back in batches."""

from __future__ import annotations

import gc
from typing import Any

from agents.memory import MemoryItem
from agents.memory._wire import decode_items


def test_decoding_many_plain_items_runs_no_collection() -> None:
    """Decoding thousands of plain field objects pauses the collector: at most the one young collection it owes on resuming."""
    wires = [{"step": i, "arguments": {"x": i}} for i in range(3000)]
    collections: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        items = decode_items(wires, where=lambda i: f"item {i}")
    finally:
        gc.callbacks.remove(count)
    assert collections in ([], [0])
    assert gc.isenabled()
    assert items[2999] == MemoryItem(step=2999, arguments={"x": 2999})


def test_decoding_plain_items_keeps_each_decoded_dict_as_the_fields() -> None:
    """Each item of a plain batch owns its decoded dict, in order, with no watcher and no cached verdict."""
    wires = [{"step": i} for i in range(600)]
    items = decode_items(wires, where=lambda i: f"item {i}")
    assert [item.to_dict() for item in items] == wires
    assert all(type(item) is MemoryItem for item in items)
    items[0].set_value("step", 9)
    assert wires[0] == {"step": 9}
