"""The server itself: a store, a scope and the MCP SDK, wired together and served."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents import __version__
from agents.integrations._local import LocalGate, check_bind, image_root
from agents.integrations.mcp._images import ImagePolicy
from agents.integrations.mcp._limits import DEFAULT_HTTP_PORT, DEFAULT_POLL_SECONDS
from agents.integrations.mcp._operations import Operations
from agents.integrations.mcp._scope import Scope
from agents.integrations.mcp._worker import StoreWorker
from agents.memory import InvalidArgumentError
from agents.memory.exceptions import missing_dependency
from agents.memory.stores import Store, open_store

if TYPE_CHECKING:
    from mcp.server import Server
    from starlette.types import ASGIApp

    from agents.integrations.mcp._poller import ChangePoller
    from agents.memory.search import Embedder

__all__ = ["MemoryServer"]


class MemoryServer:
    """A kvmemory store served to MCP clients: tools, resources and a prompt over one scope.

    Example::

        server = MemoryServer("sqlite:///runs.db", scope=Scope(prefix="agent-"))
        anyio.run(server.run_stdio)

    Args:
        store: A store URL or path (the server opens and closes it), or an open store.
        scope: The sessions the server may touch (default: every session).
        read_only: Offer no tool that writes (recording, deleting); a store
            URL is then opened read-only.
        image_dir: The folder image paths sent by clients must lie in; without
            it, only data URLs are accepted.
        poll_seconds: How often to look for changes other processes made, for
            change notifications.
        embedder: The model semantic and hybrid search use; without it only
            keyword search is offered.
        name: The server name clients see.

    Raises:
        MissingDependencyError: naming the ``mcp`` extra when the SDK is missing.
        InvalidArgumentError: for a bad scope, folder or poll interval.
        StoreError: if the store cannot be opened.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        *,
        scope: Scope | None = None,
        read_only: bool = False,
        image_dir: str | os.PathLike[str] | None = None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        embedder: Embedder | None = None,
        name: str = "kvmemory",
    ) -> None:
        _require_sdk()
        if not isinstance(poll_seconds, (int, float)) or not 0 < poll_seconds <= 3600:
            msg = f"poll_seconds must be a number of seconds above 0 and at most 3600, got {poll_seconds!r}."
            raise InvalidArgumentError(msg)
        self.scope = scope if scope is not None else Scope()
        self.read_only = read_only
        self.poll_seconds = float(poll_seconds)
        self.embedder = embedder
        self.image_dir = None if image_dir is None else image_root(image_dir)
        self._owns_store = not isinstance(store, Store)
        self.store: Store = (
            store if isinstance(store, Store) else open_store(store, read_only=read_only)
        )
        self._name = name
        try:
            self.server: Server[Any] = self._build()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the store if the server opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> MemoryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        """Return what the server serves in words: the store (passwords hidden), the scope, read-only or not."""
        mode = ", read-only" if self.read_only else ""
        return f"{self.store.url} ({self.scope.describe()}{mode})"

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until it disconnects.

        Says what it serves on stderr first (stdout carries only the protocol).
        """
        from mcp.server.stdio import stdio_server

        print(f"kvmemory: serving MCP for {self.describe()} over stdio", file=sys.stderr)
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(self, *, token: str | None = None, host: str = "127.0.0.1") -> ASGIApp:
        """Return the ASGI app that serves MCP over streamable HTTP at ``/mcp``.

        Args:
            token: When given, every request must carry ``Authorization: Bearer TOKEN``;
                others get 401 and reach nothing.
            host: The address the app is served on. On a loopback address (the
                default) a request addressed to another host name (``Host``) or
                sent by another site's page (``Origin``) gets 421 or 403: the
                protection against DNS rebinding, the same gate as ``kvmemory serve``'s.

        Raises:
            InvalidArgumentError: if ``host`` is not a loopback address and no token is given.
        """
        check_bind(host, token, server="MCP")
        from mcp.server.transport_security import TransportSecuritySettings

        # The gate below is the one policy of every kvmemory server; the SDK's own
        # check of the same headers would answer with other statuses and words.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        app = self.server.streamable_http_app(host=host, transport_security=security)
        return LocalGate(app, host=host, token=token)

    def serve_http(
        self, *, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT, token: str | None = None
    ) -> None:
        """Serve MCP over streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted.

        Says what it serves and where on stderr (stdout stays free), once the bind is allowed.

        Raises:
            InvalidArgumentError: if ``host`` is not a loopback address and no token is given.
        """
        import uvicorn

        app = self.http_app(token=token, host=host)
        where = f"[{host}]" if ":" in host else host
        guard = "a bearer token" if token is not None else "no token (loopback only)"
        print(
            f"kvmemory: serving MCP for {self.describe()} at http://{where}:{port}/mcp, with {guard}",
            file=sys.stderr,
        )
        uvicorn.run(app, host=host, port=port, log_level="warning")

    def _build(self) -> Server[Any]:
        import mcp_types as types

        from agents.integrations.mcp._poller import ChangePoller
        from agents.integrations.mcp._prompts import Prompts
        from agents.integrations.mcp._resources import Resources
        from agents.integrations.mcp._sdk import ListChangingServer
        from agents.integrations.mcp._tools import Tools

        worker = StoreWorker()
        operations = Operations(self.store, self.scope, ImagePolicy(self.image_dir), self.embedder)
        tools = Tools(operations, worker, read_only=self.read_only)
        resources = Resources(operations, worker)
        prompts = Prompts(operations, worker)
        self._poller = ChangePoller(operations, resources, worker, self.poll_seconds)
        instructions = (
            "Long-term memory backed by a kvmemory store, serving "
            f"{self.scope.describe()}. Record each step or message as you go, and search "
            "or recall earlier ones instead of keeping everything in context."
        )
        server = ListChangingServer(
            self._name,
            version=__version__,
            instructions=instructions,
            lifespan=self._lifespan,
            on_list_tools=tools.list_tools,
            on_call_tool=tools.call_tool,
            on_list_resources=resources.list_resources,
            on_list_resource_templates=resources.list_templates,
            on_read_resource=resources.read_resource,
            on_subscribe_resource=self._poller.subscribe,
            on_unsubscribe_resource=self._poller.unsubscribe,
            on_subscriptions_listen=self._poller.listen,
            on_list_prompts=prompts.list_prompts,
            on_get_prompt=prompts.get_prompt,
        )
        server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._poller.connected
        )
        return server

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        import anyio

        poller: ChangePoller = self._poller
        await poller.start()  # before the first client is served
        async with anyio.create_task_group() as group:
            group.start_soon(poller.run)
            try:
                yield {}
            finally:
                group.cancel_scope.cancel()


def _require_sdk() -> None:
    try:
        import mcp.server.lowlevel  # noqa: F401  # the check itself: is the SDK installed?
    except ImportError as exc:
        raise missing_dependency("mcp", "mcp") from exc
