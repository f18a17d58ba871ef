"""A hypothesis machine base: one session written through two handles of a store, against a plain model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from agents.memory import MemoryItem

SESSION = "s"


class TwoHandleSession(RuleBasedStateMachine):
    """Session ``s`` written through handles ``a`` and ``b`` (set by the subclass); ``model`` maps each live seq to its item.

    The subclass adds its own append and update rules (its items differ) and
    what it checks; the rules here delete and clear through either handle.
    """

    a: Any
    b: Any

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[int, MemoryItem] = {}
        self.step = 0

    def handle(self, which: int) -> Any:
        """Handle ``a`` for 0, ``b`` for 1."""
        return self.a if which == 0 else self.b

    def appended(self, which: int, new: Sequence[MemoryItem]) -> None:
        """Append ``new`` through one handle and file the seqs the store gave them."""
        seqs = self.handle(which).append(SESSION, list(new))
        self.model.update(zip(seqs, new, strict=True))

    def replaced(self, which: int, pick: int, new: MemoryItem) -> None:
        """Update the ``pick``-th live item (modulo) to ``new`` through one handle; nothing when empty."""
        if not self.model:
            return
        seq = sorted(self.model)[pick % len(self.model)]
        with self.handle(which).batch(SESSION) as batch:
            batch.update({seq: new})
        self.model[seq] = new

    @rule(which=st.integers(0, 1), picks=st.lists(st.integers(0, 1000), max_size=3))
    def delete(self, which: int, picks: list[int]) -> None:
        if not self.model:
            return
        seqs = sorted(self.model)
        gone = {seqs[pick % len(seqs)] for pick in picks}
        with self.handle(which).batch(SESSION) as batch:
            batch.delete(gone)
        for seq in gone:
            del self.model[seq]

    @rule(which=st.integers(0, 1))
    def clear(self, which: int) -> None:
        if self.model:
            self.handle(which).clear(SESSION)
            self.model.clear()
