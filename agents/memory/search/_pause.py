"""A build ahead giving way to queries answered elsewhere meanwhile.

A ``StoredMemory`` whose keyword index is still built ahead has its store
rank a semantic or hybrid query. Python runs one thread at a time: the
build, filing items in Python, would hold the interpreter while the query
waits for it after each call into SQLite or the server (every row read
lets the other thread in, and it keeps the interpreter up to the switch
interval). So the query marks itself (:meth:`BuildPause.held`) and the
build stops at its next slice (:meth:`BuildPause.give_way`) until no such
query is in flight. The build holds no lock while it waits, and the query
never waits for the build: neither can block the other for good.
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
        self._queries = 0
        self._done = threading.Condition()
        self.parked = threading.Event()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the build at its next slice until the block ends (nests, and counts each thread's queries).

        The build holds no lock while stopped; a query made in the block
        must not need the keyword index being built (it would wait for good).
        """
        with self._done:
            self._queries += 1
        try:
            yield
        finally:
            with self._done:
                self._queries -= 1
                if not self._queries:
                    self._done.notify_all()

    def give_way(self) -> None:
        """Wait while a query holds the build (called by the build between slices, holding no lock)."""
        if not self._queries:  # the common case: no query, no lock taken
            return
        with self._done:
            self.parked.set()
            while self._queries:
                self._done.wait()
            self.parked.clear()
