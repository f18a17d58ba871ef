"""Long-lived JSONL handles over <session>.vectors whose blocks are checked as first read: another handle's writes, the file replaced (damaged in one block of vectors, or in version 1) between their queries; every query equals Memory.search."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from coded_sessions import EMBEDDER, QUERIES, budget_of, expected, found, saved, steps, written
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule
from test_stores_jsonl_vector_blocks import head_of, version_1

from agents.memory import MemoryItem
from agents.memory.stores import Store, open_store
from agents.memory.stores._jsonl import vector_file
from agents.memory.stores._jsonl.vector_file import CHECK_BLOCK

np = pytest.importorskip("numpy")


def sound(data: bytes) -> bool:
    """Return whether every block of a version 2 vector file checks out against its table of sums."""
    head, at = head_of(data)
    end = data.index(b"\n") + 1
    sums = []
    for length in head["parts"]:
        sums.append(vector_file.block_sums(np, data[at : at + length]))
        at += length
    return bytes(np.concatenate(sums).astype("=u8")) == data[end : end + 8 * sum(map(len, sums))]


class LongLivedHandles(RuleBasedStateMachine):
    """A read-only and a writable handle kept open (their budget set so that a query ranks from the coded table and reads a few rows of the file, its blocks checked lazily across queries) while other handles append, delete and replace the file; each query of theirs, and of a fresh handle, equals Memory.search over the live items."""

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.url = f"jsonl://{self._dir.name}/store"
        self.file = Path(self._dir.name) / "store" / "s.vectors"
        first = steps(150, 7)
        self.live: dict[int, MemoryItem] = dict(zip(written(self.url, first), first, strict=True))
        self.every = list(first)  # the budget is of every item stored (the coded rows kept)
        self.monkeypatch = pytest.MonkeyPatch()
        saved(self.url, first, self.monkeypatch)
        self.step = 1000
        self.handles = {
            "read-only": open_store(self.url, read_only=True),
            "writable": open_store(self.url),
        }

    def teardown(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.monkeypatch.undo()
        self._dir.cleanup()

    def _replace(self, data: bytes) -> None:
        """Put ``data`` in place of the file as a writer does (a new file renamed over it: a mapping of the old one stays)."""
        spare = self.file.with_name("s.vectors.spare")
        spare.write_bytes(data)
        os.replace(spare, self.file)

    @rule(count=st.integers(1, 12), seed=st.integers(0, 1000))
    def append(self, count: int, seed: int) -> None:
        new = steps(count, seed, first=self.step)
        self.step += count
        with open_store(self.url) as store:
            seqs = store.append("s", new)
            store.index_embeddings("s", EMBEDDER)
        self.live.update(zip(seqs, new, strict=True))
        self.every += new

    @rule(picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=4))
    def delete(self, picks: list[int]) -> None:
        live = sorted(self.live)
        gone = {live[pick % len(live)] for pick in picks}
        if len(gone) < len(live):
            with open_store(self.url) as store:
                store.delete_seqs("s", gone)
            for seq in gone:
                del self.live[seq]

    @precondition(lambda self: self.file.exists())
    @rule(where=st.floats(0, 1, exclude_max=True))
    def damage_a_block(self, where: float) -> None:
        """Replace the file by a copy with a block of its first table's vectors damaged."""
        data = bytearray(self.file.read_bytes())
        if b'"version":2' not in data[:200]:
            return  # version 1: checked whole at its load
        head, at = head_of(bytes(data))
        parts = head["parts"]
        length = parts[4] if head["tables"] else 0
        if length:  # a byte of each vector in the block changed: any row of it read tells
            block = at + sum(parts[:4]) + int(where * length) // CHECK_BLOCK * CHECK_BLOCK
            for byte in range(block + 3, min(block + CHECK_BLOCK, at + sum(parts[:5])), 64):
                data[byte] ^= 0x41
            self._replace(bytes(data))

    @precondition(lambda self: self.file.exists())
    @rule()
    def as_version_1(self) -> None:
        """Replace the file by the same in version 1."""
        data = self.file.read_bytes()
        if b'"version":2' in data[:200] and sound(data):
            self._replace(version_1(data))  # (of a damaged one: a file of wrong vectors, sound)

    @rule(
        who=st.sampled_from(["read-only", "writable", "fresh read-only", "fresh writable"]),
        query=st.sampled_from(QUERIES),
        k=st.sampled_from([1, 4, 9]),
        mode=st.sampled_from(["semantic", "hybrid"]),
    )
    def query(self, who: str, query: str, k: int, mode: str) -> None:
        want = expected(list(self.live.values()), query, k, mode, None)
        if who.startswith("fresh"):
            with open_store(self.url, read_only=who.endswith("read-only")) as store:
                assert self._found(store, query, k, mode) == want
        else:
            assert self._found(self.handles[who], query, k, mode) == want

    def _found(self, store: Store, query: str, k: int, mode: str) -> list[object]:
        self.monkeypatch.setattr(store._vectors._cache, "_budget", budget_of(self.every))
        return found(store, query, k, mode)


LongLivedHandles.TestCase.settings = settings(
    max_examples=20, stateful_step_count=14, deadline=None
)
test_long_lived_handles_equal_memory_search = LongLivedHandles.TestCase
