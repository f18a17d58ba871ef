"""A third-party kvmemory backend: every session of a store in one JSON file.

Written from docs/stores.md ("Writing a backend") alone, with the public
names of ``agents.memory.stores.backend``: it implements the required row
operations and nothing optional (no keyword index, no vectors), so the
store scores keyword searches itself and embeds items at each semantic
query. It registers the URL scheme ``jsonfile://``:

* in a program: ``register_backend("jsonfile", open_jsonfile)``;
* for the ``kvmemory`` command, ``serve`` and ``mcp``: a distribution that
  declares the entry point ``jsonfile = "jsonfile_backend:open_jsonfile"``
  in the group ``kvmemory.backends``.

Run it to see a session written, searched and read back::

    python examples/jsonfile_backend.py /tmp/sessions.json
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

from agents.memory import (
    CorruptStoreError,
    InvalidStoreURLError,
    MemoryItem,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.stores import open_async_store, open_memory, open_store
from agents.memory.stores.backend import (
    Backend,
    IndexEntry,
    Row,
    RowUpdate,
    SessionRow,
    Terms,
    Transaction,
    register_backend,
)

try:
    import fcntl
except ImportError:  # not on Windows: handles of one process still queue on the thread lock
    fcntl = None  # type: ignore[assignment]  # the module is optional here

__all__ = ["JSONFileBackend", "open_jsonfile"]

# One lock per file in this process, so two handles on one file queue for writes.
_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def _file_lock(path: str) -> threading.RLock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, threading.RLock())


def _empty() -> dict[str, Any]:
    return {"format": "jsonfile-1", "next_seq": 1, "sessions": {}}


class JSONFileBackend(Backend):
    """Every session in one JSON file, rewritten whole (atomically) by each write.

    Readers read the file as the last write left it (a write replaces it
    with ``os.replace``, so a reader never sees half of one); writers take
    the file's lock (a thread lock and an ``flock`` on ``PATH.lock``). The
    parsed file is cached until the file changes.

    Args:
        path: The JSON file; created (readable by its owner only) unless ``read_only``.
        read_only: Open for inspection: create and write nothing.

    Raises:
        StoreNotFoundError: if ``read_only`` and the file does not exist.
        CorruptStoreError: if the file is not such a JSON store.
    """

    # A file that cannot be read or is not JSON: reported as StoreError by the store.
    driver_errors = (OSError, json.JSONDecodeError, UnicodeDecodeError)

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = os.path.abspath(path)
        self.url = f"jsonfile://{self.path}"
        self.read_only = read_only
        self._lock = _file_lock(self.path)
        self._cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        if not os.path.exists(self.path):
            if read_only:
                msg = f"Store {self.url} does not exist; open it writable once to create it."
                raise StoreNotFoundError(msg)
            with self._locked():
                if not os.path.exists(self.path):
                    self._write(_empty())
        self._load()  # a file that is not such a store is refused at once

    # -- the file ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock, open(self.path + ".lock", "a", encoding="utf-8") as handle:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _load(self) -> dict[str, Any]:
        """Return the file's content, parsed again only when the file changed."""
        status = os.stat(self.path)
        key = (status.st_ino, status.st_mtime_ns, status.st_size)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        with open(self.path, encoding="utf-8") as handle:
            content = json.load(handle)
        if not isinstance(content, dict) or content.get("format") != "jsonfile-1":
            msg = f"{self.path} is not a jsonfile store (no 'format': 'jsonfile-1'); it was left unchanged."
            raise CorruptStoreError(msg)
        self._cache = (key, content)
        return content

    def _write(self, content: dict[str, Any]) -> None:
        """Replace the file with ``content`` in one step (a new file renamed over it)."""
        folder = os.path.dirname(self.path)
        fd, temporary = tempfile.mkstemp(prefix=".jsonfile-", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(content, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _session(self, session_id: str) -> dict[str, Any] | None:
        session: dict[str, Any] | None = self._load()["sessions"].get(session_id)
        return session

    def store_error(self, action: str, where: str, exc: BaseException) -> StoreError:
        if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            msg = f"Cannot {action}{where} {self.url}: the file is not valid JSON ({exc}); nothing was changed."
            return CorruptStoreError(msg)
        return super().store_error(action, where, exc)

    # -- reading -----------------------------------------------------------------------

    def read_session(self, session_id: str) -> SessionRow | None:
        session = self._session(session_id)
        if session is None:
            return None
        return session["step_key"], session["created"], session["metadata"].encode()

    def read_rows(
        self, session_id: str, *, steps: Sequence[str] | None = None, after: int | None = None
    ) -> list[tuple[int, bytes]]:
        session = self._session(session_id)
        if session is None:
            return []
        wanted = None if steps is None else set(steps)
        low = -1 if after is None else after
        return [
            (seq, data.encode())
            for seq, step, _, data in session["rows"]
            if seq > low and (wanted is None or step in wanted)
        ]

    def count(self, session_id: str) -> int:
        session = self._session(session_id)
        return 0 if session is None else len(session["rows"])

    def sessions(self) -> list[str]:
        return sorted(self._load()["sessions"])

    # -- writing -----------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[Transaction]:
        with self._locked():
            # The operations change a copy; it replaces the file only on a clean exit.
            tx = copy.deepcopy(self._load())
            yield tx
            self._write(tx)

    def lock_session(self, tx: Transaction, session_id: str) -> SessionRow | None:
        session = tx["sessions"].get(session_id)
        if session is None:
            return None
        return session["step_key"], session["created"], session["metadata"].encode()

    def create_session(
        self, tx: Transaction, session_id: str, step_key: str, created: float
    ) -> None:
        tx["sessions"][session_id] = {
            "step_key": step_key,
            "created": created,
            "metadata": "{}",
            "rows": [],
        }

    def set_metadata(self, tx: Transaction, session_id: str, metadata: bytes) -> None:
        tx["sessions"][session_id]["metadata"] = metadata.decode()

    def insert_rows(
        self, tx: Transaction, session_id: str, rows: Sequence[Row], terms: Sequence[Terms]
    ) -> list[int]:
        start = tx["next_seq"]
        table = tx["sessions"][session_id]["rows"]
        for seq, (step, created, data) in enumerate(rows, start):
            table.append([seq, step, created, data.decode()])
        tx["next_seq"] = start + len(rows)
        return list(range(start, tx["next_seq"]))

    def update_rows(
        self, tx: Transaction, session_id: str, rows: Sequence[RowUpdate], terms: Sequence[Terms]
    ) -> list[int]:
        table = tx["sessions"][session_id]["rows"]
        by_seq = {row[0]: row for row in table}
        done = []
        for seq, step, data in rows:
            row = by_seq.get(seq)
            if row is not None:
                row[1], row[3] = step, data.decode()
                done.append(seq)
        return done

    def delete_rows(self, tx: Transaction, session_id: str, seqs: Sequence[int]) -> list[int]:
        session = tx["sessions"][session_id]
        wanted = set(seqs)
        gone = sorted(row[0] for row in session["rows"] if row[0] in wanted)
        session["rows"] = [row for row in session["rows"] if row[0] not in wanted]
        return gone

    def clear_rows(self, tx: Transaction, session_id: str) -> int:
        session = tx["sessions"][session_id]
        count = len(session["rows"])
        session["rows"] = []
        return count

    def row_index(self, tx: Transaction, session_id: str) -> list[IndexEntry]:
        return [
            (seq, step, created) for seq, step, created, _ in tx["sessions"][session_id]["rows"]
        ]

    def delete_session(self, session_id: str) -> bool:
        # The file's next_seq stays: a session created again continues above the old seqs.
        with self.transaction(session_id) as tx:
            return tx["sessions"].pop(session_id, None) is not None


def open_jsonfile(url: str, *, read_only: bool) -> JSONFileBackend:
    """Open ``jsonfile:///absolute/path.json`` or ``jsonfile://relative/path.json`` (the registered opener).

    Raises:
        InvalidStoreURLError: for a URL with no path, or with options.
        StoreNotFoundError: if ``read_only`` and the file does not exist.
    """
    _, _, rest = url.partition("://")
    path, mark, _ = rest.partition("?")
    if mark or not path:
        msg = f"Store URL {url!r} must be jsonfile:///absolute/path.json or jsonfile://relative.json, without options."
        raise InvalidStoreURLError(msg)
    return JSONFileBackend(urllib.parse.unquote(path), read_only=read_only)


def main(path: str) -> None:
    """Write, search and read back a session in a JSON file, through every door that opens a URL."""
    import asyncio

    register_backend("jsonfile", open_jsonfile)
    url = f"jsonfile://{os.path.abspath(path)}"
    with open_memory(url, "demo") as memory:
        memory.add_memory_item(MemoryItem(step=1, action="open the report"))
        memory.add_memory_item(MemoryItem(step=2, action="print it"))
    with open_store(url, read_only=True) as store:
        hits = store.search("demo", "report")
        print(f"{store.count('demo')} items; 'report' found at step {hits[0].item['step']}")

    async def count() -> int:
        async with open_async_store(url) as store:
            return await store.count("demo")

    print(f"awaited count: {asyncio.run(count())}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sessions.json")
