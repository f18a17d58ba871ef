"""A build ahead giving way to queries answered elsewhere meanwhile.

A ``StoredMemory`` whose keyword index is still built ahead has its store
rank a semantic or hybrid query. Python runs one thread at a time: the
build, filing items in Python, would hold the interpreter while the query
waits for it after each call into SQLite or the server (every row read
lets the other thread in, and it keeps the interpreter up to the switch
interval). So the query marks itself (:meth:`BuildPause.held`) and the
build stops at its next slice (:meth:`BuildPause.give_way`) until no such
query is in flight. The build holds no lock while it waits, and a query
that comes to need the build (a search in RAM made from within the block,
by an embedder or a filter) lifts its own hold while it waits for it
(:meth:`BuildPause.lifted`): neither can block the other for good.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["BuildPause"]


class BuildPause:
    """The queries in flight a build ahead waits for between its slices.

    Attributes:
        parked: Set while the build waits for them (cleared once it goes on).
    """

    def __init__(self) -> None:
        self._holds: dict[int, int] = {}  # thread id: how many holds that thread has open
        self._done = threading.Condition()
        self.parked = threading.Event()

    @property
    def holds(self) -> int:
        """How many holds are open, over every thread."""
        return sum(self._holds.values())

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the build at its next slice until the block ends (nests; each thread's holds counted apart)."""
        me = threading.get_ident()
        with self._done:
            self._holds[me] = self._holds.get(me, 0) + 1
        try:
            yield
        finally:
            with self._done:
                self._holds[me] -= 1
                if not self._holds[me]:
                    del self._holds[me]
                if not self._holds:
                    self._done.notify_all()

    @contextlib.contextmanager
    def lifted(self) -> Iterator[None]:
        """Lift this thread's holds until the block ends: wrap a wait for the build, which would otherwise wait for good."""
        me = threading.get_ident()
        with self._done:
            mine = self._holds.pop(me, 0)
            if not self._holds:
                self._done.notify_all()
        try:
            yield
        finally:
            if mine:
                with self._done:
                    self._holds[me] = self._holds.get(me, 0) + mine

    def give_way(self) -> None:
        """Wait while a query holds the build (called by the build between slices, holding no lock)."""
        if not self._holds:  # the common case: no query, no lock taken
            return
        with self._done:
            self.parked.set()
            while self._holds:
                self._done.wait()
            self.parked.clear()
