"""Store calls off the event loop: one worker thread at a time, errors turned into MCP errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from agents.integrations.mcp._scope import ToolArgumentError
from agents.memory import AgentMemoryError

__all__ = ["StoreWorker"]

_T = TypeVar("_T")


class StoreWorker:
    """Run store calls in a worker thread, one at a time (a store handle is one connection).

    Store calls block (SQLite waits on locks, PostgreSQL on the network): a
    worker thread keeps the event loop serving other requests and
    notifications meanwhile.
    """

    def __init__(self) -> None:
        self._limiter: Any = None

    async def run(self, call: Callable[[Any], _T], value: Any) -> _T:
        """Return ``call(value)``, run in the worker thread."""
        import anyio

        if self._limiter is None:  # made on the event loop that first needs it
            self._limiter = anyio.CapacityLimiter(1)
        return cast("_T", await anyio.to_thread.run_sync(call, value, limiter=self._limiter))

    async def guarded(self, call: Callable[[Any], _T], value: Any) -> _T:
        """Return ``call(value)`` like :meth:`run`, turning kvmemory's errors into MCP errors.

        Raises:
            MCPError: ``INVALID_PARAMS`` naming the argument for a bad argument,
                ``INTERNAL_ERROR`` for any other kvmemory error.
        """
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        try:
            return await self.run(call, value)
        except ToolArgumentError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc), {"argument": exc.argument}) from exc
        except AgentMemoryError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
