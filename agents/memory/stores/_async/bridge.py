"""The PostgreSQL store's own code on psycopg's asyncio driver, through greenlets.

The sync store (its checks, row encoding, write batches, keyword ranking and
SQL) is written once, as plain calls. To run it on
``psycopg.AsyncConnection`` and ``psycopg_pool.AsyncConnectionPool``
without a second copy, :func:`run_bridged` runs a sync call in a greenlet
of its own, started from a coroutine on the event loop. The connection and
pool objects below have the sync driver's shape (``execute``,
``fetchall``, ``transaction()``, ``pool.connection()``); each of their
calls hands the async driver's awaitable to :func:`wait`, which switches
back to the coroutine: the coroutine awaits it (the loop runs other tasks
meanwhile) and switches into the greenlet again with the result or the
error. So the store's code is the same, every round trip to the server is
awaited on the loop, and no thread is involved.

The store uses these classes through :class:`Drivers` (see
``agents.memory.stores._postgres.pool``), which the async store sets while it
opens a PostgreSQL store.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import greenlet
import psycopg
import psycopg_pool

from agents.memory.exceptions import StoreError

__all__ = ["Connection", "Cursor", "OffLoop", "Pool", "connect", "run_bridged", "wait"]

R = TypeVar("R")


class _Bridged(greenlet.greenlet):  # type: ignore[misc]  # greenlet ships no type for subclassing
    """A greenlet running sync store code whose driver calls its parent coroutine awaits."""


def wait(awaitable: Awaitable[R]) -> R:
    """Await ``awaitable`` from sync code running under :func:`run_bridged`, and return its result.

    Raises:
        StoreError: when called outside :func:`run_bridged` (a sync call of
            a store opened with ``open_async_store``, made on the event loop).
        What awaiting ``awaitable`` raises.
    """
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridged):
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never awaited, by design: say so without a warning
        msg = (
            "This PostgreSQL store was opened with open_async_store(): its server calls are "
            "awaited on the event loop, so a sync call of it cannot run. Await the call of the "
            "AsyncStore or AsyncStoredMemory of the same name instead (await store.append(...), "
            "await memory.add_memory_item(...))."
        )
        raise StoreError(msg)
    result: R = current.parent.switch(awaitable)
    return result


async def run_bridged(call: Callable[[], R]) -> R:
    """Run ``call`` (sync code) in a greenlet, awaiting on the loop each awaitable it hands to :func:`wait`.

    Returns:
        What ``call`` returns.

    Raises:
        What ``call`` raises. An error of an awaited driver call is raised
        inside ``call`` at its :func:`wait`, so its ``with`` blocks and
        ``except`` clauses see it as they would see the sync driver's.
    """
    worker = _Bridged(call)
    sent: Any = worker.switch()
    while not worker.dead:
        try:
            value = await sent
        except BaseException as exc:  # handed to the sync code, which decides
            sent = worker.throw(exc)
        else:
            sent = worker.switch(value)
    result: R = sent
    return result


class OffLoop:
    """An embedder whose calls made under :func:`run_bridged` run on the loop's default executor.

    The store's code calls it like the embedder it wraps (``name``,
    ``dimension``, ``embedder(texts)``); a model or an embedding service
    then never stalls the event loop. Called outside the bridge, it calls
    the embedder in place.
    """

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    @property
    def name(self) -> str:
        """The wrapped embedder's model name."""
        return str(self.embedder.name)

    @property
    def dimension(self) -> int:
        """The wrapped embedder's vector length."""
        return int(self.embedder.dimension)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.embedder, name)

    def __call__(self, texts: Sequence[str], /) -> Any:
        if not isinstance(greenlet.getcurrent(), _Bridged):
            return self.embedder(texts)
        return wait(asyncio.to_thread(self.embedder, texts))


@contextlib.contextmanager
def _entered(manager: Any) -> Iterator[Any]:
    """Use an async context manager as a sync one, from inside :func:`run_bridged`."""
    entered = wait(manager.__aenter__())
    try:
        yield entered
    except BaseException as exc:
        if not wait(manager.__aexit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        wait(manager.__aexit__(None, None, None))


class Cursor:
    """A psycopg async cursor with the sync cursor's calls the store makes."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        """The rows the last statement changed or returned."""
        return int(self._cursor.rowcount)

    def execute(self, query: Any, params: Any = None, **options: Any) -> Cursor:
        """Run one statement; return this cursor."""
        wait(self._cursor.execute(query, params, **options))
        return self

    def executemany(self, query: Any, params_seq: Any, **options: Any) -> None:
        """Run one statement once per parameter set."""
        wait(self._cursor.executemany(query, params_seq, **options))

    def fetchone(self) -> Any:
        """Return the next row, or ``None``."""
        return wait(self._cursor.fetchone())

    def fetchmany(self, size: int = 0) -> list[Any]:
        """Return up to ``size`` next rows."""
        rows: list[Any] = wait(self._cursor.fetchmany(size))
        return rows

    def fetchall(self) -> list[Any]:
        """Return the remaining rows."""
        rows: list[Any] = wait(self._cursor.fetchall())
        return rows

    def __iter__(self) -> Iterator[Any]:
        # A page per round trip (a server-side cursor fetches that many rows a time).
        while True:
            rows = self.fetchmany(self._cursor.itersize)
            if not rows:
                return
            yield from rows

    def close(self) -> None:
        """Close the cursor (a server-side one on the server too)."""
        wait(self._cursor.close())

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Connection:
    """A ``psycopg.AsyncConnection`` with the sync connection's calls the store makes."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._connection = connection

    @property
    def pgconn(self) -> Any:
        """The libpq connection (its socket and status, read without a round trip)."""
        return self._connection.pgconn

    def execute(
        self, query: Any, params: Sequence[Any] | dict[str, Any] | None = None, **options: Any
    ) -> Cursor:
        """Run one statement; return its cursor, the rows ready to fetch."""
        return Cursor(wait(self._connection.execute(query, params, **options)))

    def cursor(self, name: str = "", **options: Any) -> Cursor:
        """Return a new cursor (a server-side one when ``name`` is given)."""
        return Cursor(self._connection.cursor(name, **options))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """Run the block in a transaction (a savepoint inside another)."""
        with _entered(self._connection.transaction()) as tx:
            yield tx

    def close(self) -> None:
        """Close the connection."""
        wait(self._connection.close())

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        wait(self._connection.__aexit__(*exc_info))


def connect(conninfo: str, **options: Any) -> Connection:
    """Open one connection with ``psycopg.AsyncConnection.connect`` (the same options)."""
    return Connection(wait(psycopg.AsyncConnection.connect(conninfo, **options)))


class Pool:
    """A ``psycopg_pool.AsyncConnectionPool`` with the sync pool's calls the store makes.

    Takes the sync pool's arguments; ``configure`` is sync store code, run
    through :func:`run_bridged` on each new connection.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        configure: Callable[[Connection], None] | None = None,
        open: bool = False,
        **options: Any,
    ) -> None:
        async def configured(connection: psycopg.AsyncConnection[Any]) -> None:
            if configure is not None:
                await run_bridged(lambda: configure(Connection(connection)))

        self._pool = psycopg_pool.AsyncConnectionPool(
            conninfo, configure=configured, open=False, **options
        )
        if open:
            self.open(wait=True)

    @property
    def min_size(self) -> int:
        """Connections the pool keeps open."""
        return int(self._pool.min_size)

    @property
    def max_size(self) -> int:
        """Connections the pool opens at most."""
        return int(self._pool.max_size)

    @property
    def timeout(self) -> float:
        """Seconds a call waits for a connection."""
        return float(self._pool.timeout)

    def open(self, wait: bool = False, timeout: float = 30.0) -> None:
        """Open the pool's connections (all ``min_size`` of them when ``wait``)."""
        _wait(self._pool.open(wait=wait, timeout=timeout))

    def close(self, timeout: float = 5.0) -> None:
        """Close the pool and its connections."""
        _wait(self._pool.close(timeout))

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection]:
        """Lend a connection for the block, and take it back (rolled back if left in a transaction)."""
        with _entered(self._pool.connection(timeout)) as connection:
            yield Connection(connection)


_wait = wait  # Pool.open's argument ``wait`` hides the function inside it
