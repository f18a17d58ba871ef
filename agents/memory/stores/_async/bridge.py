"""The PostgreSQL store's own code on psycopg's asyncio driver, through greenlets, on a loop of its own.

The sync store (its checks, row encoding, write batches, keyword ranking and
SQL) is written once, as plain calls. To run it on
``psycopg.AsyncConnection`` and ``psycopg_pool.AsyncConnectionPool``
without a second copy, :func:`run_bridged` runs a sync call in a greenlet
of its own, started from a coroutine on an event loop. The connection and
pool objects below have the sync driver's shape (``execute``,
``fetchall``, ``transaction()``, ``pool.connection()``); each of their
calls hands the async driver's awaitable to :func:`wait`, which switches
back to the coroutine: the coroutine awaits it (the loop runs other calls
meanwhile) and switches into the greenlet again with the result or the
error. So the store's code is the same, and every round trip to the server
is awaited.

That loop is not the program's: a :class:`StoreLoop` runs it on a thread of
the store's own, where the pool lives. The store's Python (encoding, terms,
psycopg's own parameter dumping, decoding) then never runs on the
program's loop: an 18,000-item append froze the program's loop for 2.2 s
when it ran there; on its own thread it shares the interpreter with the
program's loop a switch interval at a time (see docs/stores.md for the
figures). The program's loop waits for one future per call. A sync call
made on another thread (the in-RAM view's writing calls) hands each
awaitable to the store's loop and waits for it there (:func:`wait` with
``loop``).

The store uses these classes through :class:`Drivers` (see
``agents.memory.stores._postgres.pool``), which the async store sets while it
opens a PostgreSQL store.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import greenlet
import psycopg
import psycopg_pool

from agents.memory.exceptions import StoreError

__all__ = [
    "Connection",
    "Cursor",
    "OffLoop",
    "Pool",
    "StoreLoop",
    "connect",
    "run_bridged",
    "wait",
]

R = TypeVar("R")


class _Bridged(greenlet.greenlet):  # type: ignore[misc]  # greenlet ships no type for subclassing
    """A greenlet running sync store code whose driver calls its parent coroutine awaits."""


def wait(awaitable: Awaitable[R], loop: asyncio.AbstractEventLoop | None = None) -> R:
    """Await ``awaitable`` from sync code, and return its result.

    Under :func:`run_bridged` the greenlet's coroutine awaits it. Elsewhere,
    with ``loop`` (the store's own loop, running on another thread), it is
    awaited there while this thread waits: how a sync call of the in-RAM
    view of an async memory reaches the server.

    Raises:
        StoreError: when neither applies (a sync call of a store opened
            with ``open_async_store``, made on the store's own loop thread,
            or after the store's loop has stopped).
        What awaiting ``awaitable`` raises.
    """
    current = greenlet.getcurrent()
    if isinstance(current, _Bridged):
        result: R = current.parent.switch(awaitable)
        return result
    if loop is not None and loop.is_running() and not _runs_on(loop):
        try:
            return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()
        except RuntimeError as exc:  # the loop stopped between the check and the call
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise StoreError(_CLOSED) from exc
    if inspect.iscoroutine(awaitable):
        awaitable.close()  # never awaited, by design: say so without a warning
    raise StoreError(_ON_ITS_LOOP if loop is not None and loop.is_running() else _CLOSED)


_CLOSED = (
    "This PostgreSQL store was opened with open_async_store() and its loop has stopped "
    "(the store is closed); open it again with open_async_store() or open_async_memory()."
)
_ON_ITS_LOOP = (
    "This PostgreSQL store was opened with open_async_store(): a sync call of it cannot run "
    "on the store's own loop thread. Await the AsyncStore's or AsyncStoredMemory's call "
    "instead, or run sync code with: await memory.run(lambda: ...)."
)


def _runs_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _awaited(awaitable: Awaitable[R]) -> R:
    return await awaitable


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


class StoreLoop:
    """An event loop on a thread of the store's own, where a PostgreSQL store's calls run.

    :meth:`submit` runs a sync call there under :func:`run_bridged` and
    returns a :class:`concurrent.futures.Future`, which any event loop (or
    thread) can wait for; :meth:`stop` ends the loop and its thread.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(started,), name="kvmemory-postgres-loop", daemon=True
        )
        self._thread.start()
        started.wait()

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def submit(self, call: Callable[[], R]) -> concurrent.futures.Future[R]:
        """Start ``call`` on the store's loop (as :func:`run_bridged` runs it); return its future.

        Raises:
            StoreError: if the loop has stopped (the store is closed).
        """
        coroutine: Coroutine[Any, Any, R] = run_bridged(call)
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        except RuntimeError as exc:
            coroutine.close()
            raise StoreError(_CLOSED) from exc

    @property
    def stopped(self) -> bool:
        """Whether the loop's thread has ended."""
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop the loop once the calls on it have yielded, and wait for its thread to end (blocks)."""
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # already closed
                self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()


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
def _entered(manager: Any, loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    """Use an async context manager as a sync one (see :func:`wait`)."""
    entered = wait(manager.__aenter__(), loop)
    try:
        yield entered
    except BaseException as exc:
        if not wait(manager.__aexit__(type(exc), exc, exc.__traceback__), loop):
            raise
    else:
        wait(manager.__aexit__(None, None, None), loop)


class Cursor:
    """A psycopg async cursor with the sync cursor's calls the store makes."""

    def __init__(self, cursor: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._cursor = cursor
        self._loop = loop

    @property
    def rowcount(self) -> int:
        """The rows the last statement changed or returned."""
        return int(self._cursor.rowcount)

    def execute(self, query: Any, params: Any = None, **options: Any) -> Cursor:
        """Run one statement; return this cursor."""
        wait(self._cursor.execute(query, params, **options), self._loop)
        return self

    def executemany(self, query: Any, params_seq: Any, **options: Any) -> None:
        """Run one statement once per parameter set."""
        wait(self._cursor.executemany(query, params_seq, **options), self._loop)

    def fetchone(self) -> Any:
        """Return the next row, or ``None``."""
        return wait(self._cursor.fetchone(), self._loop)

    def fetchmany(self, size: int = 0) -> list[Any]:
        """Return up to ``size`` next rows."""
        rows: list[Any] = wait(self._cursor.fetchmany(size), self._loop)
        return rows

    def fetchall(self) -> list[Any]:
        """Return the remaining rows."""
        rows: list[Any] = wait(self._cursor.fetchall(), self._loop)
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
        wait(self._cursor.close(), self._loop)

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Connection:
    """A ``psycopg.AsyncConnection`` with the sync connection's calls the store makes."""

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._connection = connection
        self._loop = loop

    @property
    def pgconn(self) -> Any:
        """The libpq connection (its socket and status, read without a round trip)."""
        return self._connection.pgconn

    def execute(
        self, query: Any, params: Sequence[Any] | dict[str, Any] | None = None, **options: Any
    ) -> Cursor:
        """Run one statement; return its cursor, the rows ready to fetch."""
        return Cursor(
            wait(self._connection.execute(query, params, **options), self._loop), self._loop
        )

    def cursor(self, name: str = "", **options: Any) -> Cursor:
        """Return a new cursor (a server-side one when ``name`` is given)."""
        return Cursor(self._connection.cursor(name, **options), self._loop)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """Run the block in a transaction (a savepoint inside another)."""
        with _entered(self._connection.transaction(), self._loop) as tx:
            yield tx

    def close(self) -> None:
        """Close the connection."""
        wait(self._connection.close(), self._loop)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        wait(self._connection.__aexit__(*exc_info), self._loop)


def connect(conninfo: str, **options: Any) -> Connection:
    """Open one connection with ``psycopg.AsyncConnection.connect`` (the same options)."""
    connection = wait(psycopg.AsyncConnection.connect(conninfo, **options))
    return Connection(connection, asyncio.get_running_loop())


class Pool:
    """A ``psycopg_pool.AsyncConnectionPool`` with the sync pool's calls the store makes.

    Takes the sync pool's arguments; ``configure`` is sync store code, run
    through :func:`run_bridged` on each new connection. Made on the store's
    loop (under :func:`run_bridged`), whose calls it awaits.
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
                loop = asyncio.get_running_loop()
                await run_bridged(lambda: configure(Connection(connection, loop)))

        self._pool = psycopg_pool.AsyncConnectionPool(
            conninfo, configure=configured, open=False, **options
        )
        self._loop = asyncio.get_running_loop()
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
        _wait(self._pool.open(wait=wait, timeout=timeout), self._loop)

    def close(self, timeout: float = 5.0) -> None:
        """Close the pool and its connections."""
        _wait(self._pool.close(timeout), self._loop)

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection]:
        """Lend a connection for the block, and take it back (rolled back if left in a transaction)."""
        with _entered(self._pool.connection(timeout), self._loop) as connection:
            yield Connection(connection, self._loop)


_wait = wait  # Pool.open's argument ``wait`` hides the function inside it
