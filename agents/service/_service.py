"""The session operations every door shares: :class:`SessionService`."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import attrs

from agents.memory import MemoryItem
from agents.memory.exceptions import InvalidQueryError, InvalidSessionIdError
from agents.memory.stores import (
    SessionHit,
    SessionInfo,
    SessionSummary,
    Store,
    StoredRecord,
    StoreHit,
    check_session_id,
)
from agents.service._keys import agent_keys_of, cost_keys_of
from agents.service._overview import SessionOverview, Tally

if TYPE_CHECKING:
    from agents.memory.search import Embedder

__all__ = ["AroundWindow", "SessionService", "SessionStats", "TailWindow"]

SearchModeName = Literal["keyword", "semantic", "hybrid"]
_MODES: tuple[SearchModeName, ...] = ("keyword", "semantic", "hybrid")


@attrs.frozen
class TailWindow:
    """The newest items of a session (or the newest before a seq), and whether earlier ones exist."""

    records: list[StoredRecord]
    earlier: bool


@attrs.frozen
class AroundWindow:
    """The items of a session around a seq, and whether earlier and later ones exist."""

    records: list[StoredRecord]
    earlier: bool
    later: bool


@attrs.frozen
class SessionStats:
    """A session's counts, read a page at a time, with its cost summed under every cost key."""

    summary: SessionSummary
    cost: float
    cost_keys: tuple[str, ...]


class SessionService:
    """The session operations of every door, over one open store.

    Every call reads the store under one lock, so a service may be shared by
    the threads of a server (a store handle answers one call at a time).

    Args:
        store: The open store (the service never closes it).
        allows: Which sessions the door may show: a predicate on the session
            id (default: all of them).
        cost_key: The field summed as cost when a session's metadata names none.
        agent_key: The field read as a step's agent when a session's metadata names none.
        embedder: The model semantic and hybrid searches use (``None``: keyword only).
    """

    def __init__(
        self,
        store: Store,
        *,
        allows: Callable[[str], bool] | None = None,
        cost_key: str = "cost",
        agent_key: str = "agent",
        embedder: Embedder | None = None,
    ) -> None:
        self.store = store
        self.allows = allows
        self.cost_key = cost_key
        self.agent_key = agent_key
        self.embedder = embedder
        self._lock = threading.RLock()
        self._tallies: dict[str, Tally] = {}
        self._step_keys: dict[str, str] = {}

    # -- sessions ----------------------------------------------------------------------

    def sessions(self, prefix: str | None = None) -> list[str]:
        """Return the ids of the sessions this door may show, sorted, optionally only those starting with ``prefix``.

        An id written into the store by other means that a store does not
        take (``agent 2``) is left out: no read of the door can name it, and
        one such row must not hide the other sessions (``kvmemory sessions``
        lists it, marked).
        """
        with self._lock:
            names = self.store.sessions()
        return [
            name
            for name in names
            if (self.allows is None or self.allows(name))
            and (prefix is None or name.startswith(prefix))
            and _nameable(name)
        ]

    def info(self, session_id: str) -> SessionInfo | None:
        """Return what the store keeps of a session apart from its items (``None`` if it does not exist)."""
        with self._lock:
            info = self.store.session_info(session_id)
        if info is not None:
            self._step_keys[session_id] = info.step_key
        return info

    def step_key(self, session_id: str) -> str:
        """Return the field that names the steps of a session (``"step"`` for one that does not exist yet)."""
        known = self._step_keys.get(session_id)
        if known is not None:
            return known
        info = self.info(session_id)
        return "step" if info is None else info.step_key

    def cost_keys(self, info: SessionInfo | None) -> tuple[str, ...]:
        """Return the fields a session's cost is summed from (its importer's, else this service's ``cost_key``)."""
        return cost_keys_of(info.metadata if info is not None else {}, self.cost_key)

    def agent_keys(self, info: SessionInfo | None) -> tuple[str, ...]:
        """Return the fields a session's steps name their agent in (its importer's, else ``agent_key``)."""
        return agent_keys_of(info.metadata if info is not None else {}, self.agent_key)

    def overview(self, session_id: str) -> SessionOverview:
        """Return a session at a glance: items, agents, last step, cost.

        The figures are counted once and then kept: a session whose item count
        has not changed costs one count, and one that only grew has only its
        new items read.
        """
        with self._lock:
            return self._tally(session_id).overview()

    def overviews(self, prefix: str | None = None) -> list[SessionOverview]:
        """Return :meth:`overview` of every session this door may show (see :meth:`sessions`)."""
        return [self.overview(name) for name in self.sessions(prefix)]

    def _tally(self, session_id: str) -> Tally:
        count = self.store.count(session_id)
        known = self._tallies.get(session_id)
        if known is not None and known.count == count:
            return known
        now = dt.datetime.now(dt.timezone.utc) if known is not None else None
        if known is not None and count > known.count and known.last_seq is not None:
            new = self.store.records(session_id, after=known.last_seq, on_unknown_class="base")
            if len(new) == count - known.count:  # only appends since: add them up
                known.add(new)
                known.count = count
                known.changed = now
                return known
        info = self.info(session_id)
        tally = Tally(
            session_id=session_id,
            step_key="step" if info is None else info.step_key,
            cost_keys=self.cost_keys(info),
            agent_keys=self.agent_keys(info),
            created=None if info is None else info.created,
        )
        for page in self.store.pages(session_id, on_unknown_class="base"):
            tally.add(page)
        tally.count = count
        tally.changed = now
        self._tallies[session_id] = tally
        return tally

    def stats(self, session_id: str, cost_keys: tuple[str, ...] = ()) -> SessionStats:
        """Return a session's counts and its cost, summed under ``cost_keys`` (default: the session's own).

        The session is read a page at a time, once per cost key.
        """
        with self._lock:
            info = self.info(session_id)
            keys = cost_keys or self.cost_keys(info)
            summary = self.store.summary(session_id, cost_key=keys[0])
            cost = summary.cost + sum(
                self.store.summary(session_id, cost_key=key).cost for key in keys[1:]
            )
        return SessionStats(summary, cost, keys)

    # -- recording ---------------------------------------------------------------------

    def record(self, session_id: str, item: MemoryItem) -> StoredRecord:
        """Append ``item`` to a session as its next step, under the session's step key.

        An item without a step is given the next step number inside the
        store's write transaction (:meth:`~agents.memory.stores.Store.append_steps`),
        so two doors recording into one session (two MCP servers, a server and
        an agent) never give out the same step.

        Returns:
            The item's seq and the item as written (numbered when it had no step).

        Raises:
            StoreError: if the store cannot be written.
            SerializationError: if a value cannot be encoded; nothing is written.
        """
        info = self.info(session_id)  # read afresh: another door may have created the session
        step_key = "step" if info is None else info.step_key
        with self._lock:
            (record,) = self.store.append_steps(session_id, [item], step_key=step_key)
        return record

    # -- reads -------------------------------------------------------------------------

    def count(self, session_id: str) -> tuple[int, int | None]:
        """Return a session's item count and the seq of its newest item, read together."""
        with self._lock:
            count = self.store.count(session_id)
            newest = self.store.tail(session_id, 1, on_unknown_class="base")
        return count, (newest[-1].seq if newest else None)

    def tail(self, session_id: str, n: int, *, before: int | None = None) -> TailWindow:
        """Return the last ``n`` items of a session, or the last ``n`` before seq ``before``.

        The store reads from the end of the session, never the whole of it.
        """
        with self._lock:
            if before is None:
                window = self.store.tail(session_id, n + 1, on_unknown_class="base")
                return TailWindow(window[-n:], len(window) > n)
            want = n + 1
            while True:
                window = self.store.tail(session_id, want, on_unknown_class="base")
                older = [r for r in window if r.seq < before]
                if len(older) > n or len(window) < want:
                    break
                want *= 2
        return TailWindow(older[-n:], len(older) > n)

    def around(self, session_id: str, seq: int, n: int) -> AroundWindow:
        """Return the item at seq ``seq`` with up to ``n`` items before it and ``n`` after it.

        Where no item has that seq, the window holds the ``n`` items before it
        and the ``n + 1`` after it. The store reads from the end of the
        session back to ``n`` items before ``seq`` (no store offers a bounded
        read forward from a seq), so the cost follows how far from the end
        the item lies, not the length of the session.

        Args:
            session_id: The session to read; an unknown session reads as empty.
            seq: The seq of the item in the middle of the window.
            n: How many items to take on each side of it.

        Returns:
            The items in seq order, with whether the session holds items
            before the first of them and after the last of them.
        """
        with self._lock:
            want = 2 * n + 1
            while True:
                window = self.store.tail(session_id, want, on_unknown_class="base")
                older = sum(1 for record in window if record.seq < seq)
                if older > n or len(window) < want:
                    break
                want *= 2
        start = max(0, older - n)
        end = older + n + 1
        return AroundWindow(window[start:end], start > 0, end < len(window))

    def after(
        self, session_id: str, seq: int | None, limit: int
    ) -> tuple[list[StoredRecord], bool]:
        """Return up to ``limit`` items appended after seq ``seq`` (all for ``None``), and whether more wait."""
        with self._lock:
            records = self.store.records(session_id, after=seq, on_unknown_class="base")
        return records[:limit], len(records) > limit

    # -- search ------------------------------------------------------------------------

    def modes(self, session_id: str) -> list[str]:
        """Return the search modes a session offers: keyword, and semantic and hybrid where its vectors are this service's model's."""
        modes = ["keyword"]
        if self.embedder is not None:
            with self._lock:
                model = self.store.vector_model(session_id)
            if model is not None and model.name == self.embedder.name:
                modes += ["semantic", "hybrid"]
        return modes

    def search(
        self,
        session_id: str,
        query: str,
        k: int,
        *,
        mode: str = "keyword",
        keys: list[str] | None = None,
    ) -> list[StoreHit]:
        """Return the ``k`` items of a session that best match ``query``, best first.

        Args:
            session_id: The session to search.
            query: The words to look for.
            k: How many hits at most.
            mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``.
            keys: Search only these fields.

        Raises:
            InvalidQueryError: for an unknown mode, or semantic or hybrid
                search on a service without an embedder.
        """
        chosen = self._mode(mode)
        embedder = None if chosen == "keyword" else self.embedder
        with self._lock:
            return self.store.search(
                session_id,
                query,
                k,
                keys=keys,
                mode=chosen,
                embedder=embedder,
                on_unknown_class="base",
            )

    def search_sessions(
        self,
        query: str,
        k: int,
        *,
        prefix: str | None = None,
        mode: str = "keyword",
        keys: list[str] | None = None,
    ) -> list[SessionHit]:
        """Return the ``k`` items that best match ``query`` across the sessions this door may show (:meth:`sessions`), in one ranking.

        The ranking is the store's :meth:`~agents.memory.stores.Store.search_sessions`:
        the statistics are those of exactly the sessions searched, so scores
        of different sessions compare (a word rare in a large session does
        not outrank a better match in a small one), and each hit names its
        session.

        Args:
            query: The words to look for.
            k: How many hits at most.
            prefix: Search only the sessions whose id starts with this.
            mode: ``"keyword"``, ``"semantic"`` or ``"hybrid"``.
            keys: Search only these fields.

        Raises:
            InvalidQueryError: for an unknown mode, or semantic or hybrid
                search on a service without an embedder.
        """
        chosen = self._mode(mode)
        # The sessions the door shows, named: those it may show, and none whose id a store
        # refuses (written by other means: every read of such a session would fail).
        scope = self.sessions(prefix)
        embedder = None if chosen == "keyword" else self.embedder
        with self._lock:
            return self.store.search_sessions(
                query,
                k,
                sessions=scope,
                prefix=prefix,
                keys=keys,
                mode=chosen,
                embedder=embedder,
                on_unknown_class="base",
            )

    def _mode(self, mode: str) -> SearchModeName:
        for name in _MODES:
            if mode == name:
                if name != "keyword" and self.embedder is None:
                    msg = f"{name.capitalize()} search needs an embedder, and none was given; pass --embedder (hashing or wordllama) or embedder=."
                    raise InvalidQueryError(msg)
                return name
        msg = f"Unknown search mode {mode!r}; use keyword, semantic or hybrid."
        raise InvalidQueryError(msg)


def _nameable(session_id: str) -> bool:
    """Return whether a store takes ``session_id`` as an id (one written by other means may not be)."""
    try:
        check_session_id(session_id)
    except InvalidSessionIdError:
        return False
    return True
