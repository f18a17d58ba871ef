"""The coded files a handle saves as it closes, for the sessions whose part vectors it wrote and that a fresh handle would code (``vector_snapshot="auto"``).

A handle saves a session's coded table (``agents.memory.stores._search.coded_file``)
as a query codes it. A writer that embeds 100,000 steps cut into parts
(``Store.index_embeddings``) and closes without a query left none, and the
first reader paid for it: ~3 s for its first query (read page by page,
23x a warm one) and ~7 s for its second (coding 2.1 GiB and saving the
file). So the writer codes and saves it as it closes, as it saves its
keyword snapshots (``agents.memory.stores._sqlite.snapshots``): for each
session and fields whose vectors the handle wrote and whose file is not
of the vectors now: stale (the session was coded), or missing with the
session's vectors as stored estimated past the kept-vector budget (the
bytes a row the handle wrote times the session's vector rows: no read).
A stale file that a reader catches up (:func:`caught_up`: the backend
names the vector rows changed since the file's version, and they are at
most a quarter of the session's items, as a kept table follows writes) is
left as it is: the next fresh reader loads it and re-codes only those
items (100,000 steps, 100 appended: ~0.5 s rather than the 7-8 s build),
and a handle whose coded table followed at least :func:`rebuild_rows`
changed items saves it back as it closes (:meth:`CodedSaves.back`: its
live items, ``CompactVectors.live``), so that the changes a file lags by
stay few.
The build is a query's (``VectorSearch``), on a thread of its own that
is not a daemon; the backend closes after it (and so saves its keyword
snapshots after it). ``close()`` returns at once; a process that ends
right after it waits for the thread (100,000 steps: the whole build, a
read of every stored vector and the coding, 7-8 s of CPU), rather than
leave its readers none. A handle that wrote fewer vector rows (one an
item) than :func:`rebuild_rows` (64, or a hundredth of the session's:
1,000 steps of a 100,000-step session) leaves the file stale rather than
pay that build for a few steps (an agent appending a step a process
would wait 7 s at every exit); a fresh reader catches it up as above,
or codes the session and saves it where it cannot. A process killed meanwhile leaves the previous file or none (a
file is renamed in place whole), never a damaged one: a load checks it
anyway.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Final

from attrs import frozen

from agents.memory._vectors import Embedder, EmbedParts, fields_text
from agents.memory.exceptions import AgentMemoryError
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.engine import Engine
from agents.memory.stores._search.coded_file import CodedFile
from agents.memory.stores._search.compact import CompactVectors
from agents.memory.stores._search.vector_cache import follows

__all__ = ["SAVE_THREAD", "CodedSaves", "Coding", "Written", "rebuild_rows"]

_FEWEST_ROWS: Final = 64  # vector rows (one an item) written below which a close never codes
_SHARE: Final = 100  # ... nor below a hundredth of the session's


def rebuild_rows(count: int) -> int:
    """Return the vector rows (one an item) a handle must have written to a session of ``count`` for its close to code and save the session's file (all of them where the session holds fewer than 64)."""
    return min(count, max(_FEWEST_ROWS, count // _SHARE))


SAVE_THREAD: Final = "kvmemory-vector-snapshot"
"""The name of the thread that saves a closing handle's coded files (and then closes its backend)."""


@frozen
class Written:
    """A session and the fields (and parts) whose vectors a handle wrote, with the embedder that made them."""

    session_id: str
    fields: tuple[str, ...] | None
    parts: EmbedParts
    embedder: Embedder


_Noted = tuple[Written, int, int]

Saved = tuple[CodedFile, CompactVectors]
"""A coded table a closing handle saves back, and its file (:meth:`CodedSaves.back`)."""

Coding = Callable[[Written, CodedFile, int], object]
"""``coding(written, file, budget)``: read the session's stored vectors into a table of at most ``budget`` bytes, saved to ``file`` where it is coded (a query's build)."""


class CodedSaves:
    """The sessions whose part vectors a handle wrote, and the saves of their coded files as it closes (see the module docs)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # (session, fields, parts) -> what was written, its vector rows and their bytes
        self._written: dict[tuple[str, tuple[str, ...] | None, EmbedParts], _Noted] = {}
        # (session, fields, parts) -> the session whose coded table a query brought up to date
        self._caught: dict[tuple[str, tuple[str, ...] | None, EmbedParts], Written] = {}
        self._lock = threading.Lock()

    def wrote(self, written: Written, rows: int, size: int) -> None:
        """Note ``rows`` vector rows of ``size`` bytes in all written by this handle."""
        key = (written.session_id, written.fields, written.parts)
        with self._lock:
            _, before, bytes_before = self._written.get(key, (written, 0, 0))
            self._written[key] = (written, before + rows, bytes_before + size)

    def caught(self, written: Written) -> None:
        """Note that a query of this handle brought a coded table of ``written``'s session up to date with writes (a stale file's, or one it keeps): saved back as it closes where due (:meth:`back`)."""
        with self._lock:
            self._caught[(written.session_id, written.fields, written.parts)] = written

    def back(self, kept: Callable[[CodedFile], CompactVectors | None]) -> list[Saved]:
        """Return the coded tables the closing handle saves back, each with its file: the file is not current, ``kept`` gives the table the handle keeps at the version now, and that table followed at least :func:`rebuild_rows` changed items since it was loaded or built (as many as a writer's close codes the session for).

        A reader catches a stale file up at each fresh handle (the few items
        a small writer left); once those pass that share, the file saved
        back spares the next readers the growing catch-up.
        """
        with self._lock:
            caught, self._caught = self._caught, {}
        backend = self._engine.backend
        if not caught or not backend.saves_vector_snapshots:
            return []
        back = []
        for written in caught.values():
            filed = fields_text(written.fields, written.parts)
            with _quiet(), self._engine.errors("save the coded vectors of", written.session_id):
                file = _coded_file(backend, written, filed)
                if file is None or file.path is None or file.current():
                    continue
                table = kept(file)
                if table is not None and table.changes >= rebuild_rows(table.items):
                    back.append((file, table))
        return back

    def due(self, budget: int) -> list[Written]:
        """Return the sessions whose coded file the closing handle saves: not current, written enough (:func:`rebuild_rows`), and either stale beyond what a reader catches up (:func:`caught_up`) or missing with the session's vectors estimated past ``budget`` bytes.

        The estimate is the bytes a row of those the handle wrote times the
        session's vector rows (one count), so that a session a fresh handle
        keeps as float32 is not read at close; the build decides (it saves
        only a coded table, and removes a stale file where the session no
        longer codes).
        """
        with self._lock:
            written, self._written = self._written, {}
        backend = self._engine.backend
        if not written or not backend.saves_vector_snapshots:
            return []
        due = []
        for noted, rows, size in written.values():
            filed = fields_text(noted.fields, noted.parts)
            # The close goes on whatever fails here: a query codes the session, as without it.
            with _quiet(), self._engine.errors("save the coded vectors of", noted.session_id):
                file = _coded_file(backend, noted, filed)
                if file is None or file.path is None or file.current():
                    continue
                count = backend.vector_count(noted.session_id, filed)
                if rows < rebuild_rows(count) or caught_up(backend, noted.session_id, file, count):
                    continue
                if size * count > budget * rows or os.path.exists(file.path):
                    due.append(noted)
        return due

    def save(
        self, due: Sequence[Written], coding: Coding, budget: int, back: Sequence[Saved] = ()
    ) -> None:
        """Code and save the ``due`` sessions' files (each where it is still missing or stale), then save ``back`` the tables brought up to date (their live items and rows: :meth:`CompactVectors.live`) where their file is still not current; what fails leaves the file to the first query that codes the session or catches it up, as without it."""
        backend = self._engine.backend
        for written in due:
            filed = fields_text(written.fields, written.parts)
            with _quiet(), self._engine.errors("save the coded vectors of", written.session_id):
                file = _coded_file(backend, written, filed)
                if file is None or file.path is None or file.current():
                    continue
                if not isinstance(coding(written, file, budget), CompactVectors):
                    # The session no longer codes: a stale file would be read at each close.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(file.path)
        for kept_file, table in back:  # after those: a file coded there is current now
            with _quiet(), self._engine.errors("save the coded vectors of", kept_file.session_id):
                if not kept_file.current():
                    kept_file.save(table.live())


def caught_up(backend: Backend, sid: str, file: CodedFile, count: int) -> bool:
    """Return whether a reader catches the session's stale file up rather than build the table (:func:`follows`): the backend names the changes since the file's version, and they are few among the ``count`` items."""
    saved = file.saved_version()
    if saved is None:
        return False
    changed = backend.vector_changes(sid, file.filed, saved, file.version)
    return follows(changed, count)


def _quiet() -> contextlib.suppress:
    """Suppress what a save may meet (a store error, a damaged vector, a file that cannot be written): it is a cache."""
    return contextlib.suppress(AgentMemoryError, OSError)


def _coded_file(backend: Backend, written: Written, filed: str) -> CodedFile | None:
    """Return the session's coded file at the version of its vectors now (``None`` where the backend cannot vouch for one, or keeps none)."""
    version = backend.vectors_version(written.session_id, filed)
    if version is None or backend.vector_snapshot_path(written.session_id, filed) is None:
        return None
    embedder = written.embedder
    return CodedFile(backend, written.session_id, filed, version, embedder.name, embedder.dimension)
