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
