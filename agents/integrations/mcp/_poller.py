"""Change notifications: who watches what, and the poller that tells them of other processes' writes.

Other processes write to the store directly, so the server cannot be told of
their changes: it looks every ``poll_seconds``. A session appended to or
deleted from sends ``notifications/resources/updated`` for each watched URI
naming it; the set of sessions in scope changing (one appears or goes) sends
``notifications/resources/list_changed``. 2026 clients hear both on their
``subscriptions/listen`` stream; handshake-era clients hear the first for
their ``resources/subscribe`` URIs and the second from the moment they are
initialized.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agents.integrations.mcp._operations import Operations
from agents.integrations.mcp._resources import Resources
from agents.integrations.mcp._worker import StoreWorker
from agents.memory import AgentMemoryError

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

__all__ = ["ChangePoller"]


class ChangePoller:
    """The subscription handlers, and the loop that looks for changes and sends notifications.

    Args:
        operations: The tools' work, for the store and the sessions in scope.
        resources: The resource URIs, to tell which session a URI names.
        worker: Runs store calls off the event loop.
        poll_seconds: How long to wait between two looks.
    """

    def __init__(
        self,
        operations: Operations,
        resources: Resources,
        worker: StoreWorker,
        poll_seconds: float,
    ) -> None:
        from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

        self.operations = operations
        self.resources = resources
        self.worker = worker
        self.poll_seconds = poll_seconds
        self._bus = InMemorySubscriptionBus()
        self._listener = ListenHandler(self._bus)
        self._subscribers: dict[int, tuple[ServerSession, set[str]]] = {}
        self._connections: dict[int, ServerSession] = {}
        self._watched: dict[str, int] = {}
        self._marks: dict[str, tuple[int, int]] = {}
        self._listed: set[str] | None = None

    # -- handlers -------------------------------------------------------------------------

    async def connected(
        self, ctx: ServerRequestContext[Any], params: mcp_types.NotificationParams
    ) -> None:
        """Note a handshake-era client once it is initialized, to tell it when the resource list changes."""
        self._connections[id(ctx.session)] = ctx.session

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """Serve a 2025 ``resources/subscribe``: the URI must name a session in scope."""
        import mcp_types as types

        uri = str(params.uri)
        await self.worker.guarded(lambda u: str(self.resources.session_of(u)), uri)
        await self._baseline([uri])
        entry = self._subscribers.setdefault(id(ctx.session), (ctx.session, set()))
        entry[1].add(uri)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        """Serve a 2025 ``resources/unsubscribe``."""
        import mcp_types as types

        entry = self._subscribers.get(id(ctx.session))
        if entry is not None:
            entry[1].discard(str(params.uri))
        return types.EmptyResult()

    async def listen(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        """Serve a 2026 ``subscriptions/listen`` stream, noting its resources so the poller watches them."""
        uris = [str(uri) for uri in params.notifications.resource_subscriptions or ()]
        for uri in uris:
            self._watched[uri] = self._watched.get(uri, 0) + 1
        try:
            await self._baseline(uris)
            return await self._listener(ctx, params)
        finally:
            for uri in uris:
                self._watched[uri] -= 1
                if not self._watched[uri]:
                    del self._watched[uri]

    # -- the poller -----------------------------------------------------------------------

    async def start(self) -> None:
        """Note the sessions in scope now, so one that appears once clients are served counts as new."""
        with contextlib.suppress(AgentMemoryError):  # the first look takes it then
            self._listed, _ = await self.worker.run(self._snapshot, set())

    async def run(self) -> None:
        """Look for changes every ``poll_seconds`` and send notifications, until cancelled."""
        import anyio

        while True:
            await self.poll()
            await anyio.sleep(self.poll_seconds)

    async def poll(self) -> None:
        """Look once: send list_changed if the sessions in scope changed, updated for each watched one that did."""
        from mcp.server.subscriptions import ResourceUpdated

        uris = self._watched_uris()
        watched = {name for name in map(self.resources.watched_session, uris) if name}
        try:
            names, now = await self.worker.run(self._snapshot, watched)
        except AgentMemoryError:
            return  # the store is briefly unreachable (a restarting server): try again next time
        if self._listed is not None and names != self._listed:
            await self._list_changed()
        self._listed = names
        marks = self._marks
        changed = {
            name for name in watched if name in marks and now.get(name, (0, 0)) != marks[name]
        }
        for name in watched:
            marks[name] = now.get(name, (0, 0))
        # Forget sessions nobody watches any more; keep the marks subscriptions took meanwhile.
        current = {
            name for name in map(self.resources.watched_session, self._watched_uris()) if name
        }
        for name in set(marks) - current:
            del marks[name]
        for uri in sorted(uris):
            if self.resources.watched_session(uri) in changed:
                await self._bus.publish(ResourceUpdated(uri))
        for name in sorted(changed):
            await self._notify_subscribers(name)

    def _watched_uris(self) -> set[str]:
        uris = set(self._watched)
        for _, subscribed in self._subscribers.values():
            uris |= subscribed
        return uris

    async def _baseline(self, uris: Sequence[str]) -> None:
        """Note now how the sessions ``uris`` name stand, so a write right after a subscription is seen.

        Taken before the subscription is acknowledged: a mark the poller took
        later could already hold the client's next write, which then would
        never count as a change.
        """
        names = {name for name in map(self.resources.watched_session, uris) if name is not None}
        fresh = names - set(self._marks)
        if fresh:
            with contextlib.suppress(AgentMemoryError):  # the poller takes the mark next time
                _, marks = await self.worker.run(self._snapshot, fresh)
                for name in fresh:
                    self._marks.setdefault(name, marks.get(name, (0, 0)))

    def _snapshot(self, sessions: set[str]) -> tuple[set[str], dict[str, tuple[int, int]]]:
        """Return the sessions in scope, and for the watched ones their count and last seq.

        A write changes one or the other: an append the last seq, a delete the count.
        """
        store = self.operations.store
        names = set(self.operations.sessions(None))
        marks = {}
        for name in sorted(sessions & names):
            last = store.tail(name, 1, on_unknown_class="base")
            marks[name] = (store.count(name), last[0].seq if last else 0)
        return names, marks

    async def _list_changed(self) -> None:
        from mcp.server.subscriptions import ResourcesListChanged

        await self._bus.publish(ResourcesListChanged())
        for key, peer in list(self._connections.items()):
            try:
                await peer.send_resource_list_changed()
            except Exception:  # a client that went away must not stop the poller
                self._connections.pop(key, None)

    async def _notify_subscribers(self, session: str) -> None:
        for key, (peer, uris) in list(self._subscribers.items()):
            for uri in sorted(uris):
                if self.resources.watched_session(uri) == session:
                    try:
                        await peer.send_resource_updated(uri)
                    except Exception:  # a client that went away must not stop the poller
                        self._subscribers.pop(key, None)
                        break
