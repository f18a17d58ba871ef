"""The in-process store (``memory://``): the contract without a disk.

``memory://`` opens a fresh private store. ``memory://NAME`` opens a store
shared by every ``memory://NAME`` opened in the same process until the
process ends, so a session can be closed and reopened (tests, notebooks).
Items are kept as encoded bytes, exactly as the durable stores keep them, so
reading gives fresh items decoded through the codec.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

import attrs

from agents.memory.exceptions import StoreError
from agents.memory.stores._base import BaseStore, Row

__all__ = ["InMemoryStore"]


@attrs.define
class _Session:
    step_key: str
    rows: dict[int, tuple[str | None, float, bytes]] = attrs.Factory(dict)


@attrs.define
class _Space:
    lock: threading.Lock = attrs.Factory(threading.Lock)
    sessions: dict[str, _Session] = attrs.Factory(dict)
    next_seq: int = 1


_NAMED: Final[dict[str, _Space]] = {}
_NAMED_LOCK: Final = threading.Lock()


class InMemoryStore(BaseStore):
    """Sessions in this process's memory; lost when the process ends.

    Args:
        name: Share the store with every ``InMemoryStore(name)`` of this process;
            ``""`` makes a private store.
    """

    def __init__(self, name: str = "") -> None:
        super().__init__(f"memory://{name}")
        if name:
            with _NAMED_LOCK:
                space = _NAMED.setdefault(name, _Space())
        else:
            space = _Space()
        self._space = space

    def _write(
        self,
        session_id: str,
        step_key: str,
        *,
        add: Sequence[Row] = (),
        delete: Sequence[int] = (),
        update: Sequence[tuple[int, str | None, bytes]] = (),
        clear: bool = False,
    ) -> tuple[list[int], int]:
        space = self._space
        with space.lock:
            session = space.sessions.get(session_id)
            if add:
                if session is None:
                    session = space.sessions[session_id] = _Session(step_key)
                elif session.step_key != step_key:
                    msg = (
                        f"Session {session_id!r} of {self.url} files steps under "
                        f"{session.step_key!r}, not {step_key!r}; open it with "
                        f"step_key={session.step_key!r}. Nothing was written."
                    )
                    raise StoreError(msg)
            if session is None:
                return [], 0
            rows = session.rows
            if clear:
                rows.clear()
            deleted = sum(1 for seq in delete if rows.pop(seq, None) is not None)
            for seq, step, data in update:
                old = rows.get(seq)
                if old is not None:
                    rows[seq] = (step, old[1], data)
            start = space.next_seq
            for offset, row in enumerate(add):
                rows[start + offset] = row
            space.next_seq = start + len(add)
            return list(range(start, start + len(add))), deleted

    def _fetch(
        self, session_id: str, *, steps: Sequence[str] | None, after: int | None
    ) -> list[tuple[int, bytes]]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            wanted = None if steps is None else frozenset(steps)
            low = -1 if after is None else after
            return [
                (seq, data)
                for seq, (step, _, data) in session.rows.items()
                if seq > low and (wanted is None or step in wanted)
            ]

    def _count(self, session_id: str) -> int:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            return 0 if session is None else len(session.rows)

    def _remove(self, session_id: str, seqs: list[int]) -> list[int]:
        session = self._space.sessions[session_id]
        for seq in seqs:
            del session.rows[seq]
        return seqs

    def _delete_steps(self, session_id: str, steps: Sequence[str]) -> list[int]:
        wanted = frozenset(steps)
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            seqs = [seq for seq, row in session.rows.items() if row[0] in wanted]
            return self._remove(session_id, seqs)

    def _clear(self, session_id: str) -> int:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return 0
            count = len(session.rows)
            session.rows.clear()
            return count

    def _sessions(self) -> list[str]:
        with self._space.lock:
            return sorted(self._space.sessions)

    def _delete_session(self, session_id: str) -> bool:
        with self._space.lock:
            return self._space.sessions.pop(session_id, None) is not None

    def _keep_last(self, session_id: str, n: int) -> list[int]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            seqs = list(session.rows)
            return self._remove(session_id, seqs[: max(len(seqs) - n, 0)])

    def _expire(self, session_id: str, cutoff: float) -> list[int]:
        with self._space.lock:
            session = self._space.sessions.get(session_id)
            if session is None:
                return []
            seqs = [seq for seq, row in session.rows.items() if row[1] < cutoff]
            return self._remove(session_id, seqs)

    def _close(self) -> None:
        """Nothing to release: the rows live as long as the name's space."""
