"""How a PostgreSQL store reaches its server: the first connection, the tables, pgvector, the pool.

:class:`PostgresConnections` opens a store's connections once (one plain
connection to set up the tables and find pgvector, then the pool every call
takes a connection from) and runs statements on them. :data:`DRIVERS` says
where the connections come from: psycopg's sync driver, or the asyncio
bridge's (``agents.memory.stores._async.bridge``), so the same store code runs on
both.

A connection the server dropped (a kill, a restart) is found before a call
uses it: an idle connection has nothing to read, so one whose socket is
readable (the server's "terminating connection", then its close) is closed
and another taken, with no round trip (``benchmarks/bench_pg_checkout.py``:
a few microseconds, against one round trip for psycopg_pool's own check).
A lost read runs once more, and so does a ``BEGIN``; a write that may have
committed is never repeated (:class:`CommitUnconfirmed`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import select
from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple, TypeVar

from agents.memory.exceptions import (
    StoreArgumentError,
    StoreError,
    StoreUnreachableError,
    missing_dependency,
)
from agents.memory.stores._postgres.schema import Tables, open_tables
from agents.memory.stores._postgres.vectors import find_pgvector

__all__ = ["DRIVERS", "CommitUnconfirmed", "Drivers", "PostgresConnections", "check_pool"]

# Server shutdown SQLSTATEs: admin_shutdown (a kill, a fast stop), crash_shutdown, cannot_connect_now.
_SHUTDOWN_STATES: Final = frozenset({"57P01", "57P02", "57P03"})


class CommitUnconfirmed(Exception):
    """The connection was lost while the server may have been committing a write (its outcome is unknown).

    Raised from the driver's error; the backend turns it into a
    :class:`~agents.memory.StoreConnectionLostError` that is not retryable.
    """


def check_pool(min_size: object, max_size: object, timeout: object) -> None:
    """Check a pool's sizes and timeout.

    Raises:
        StoreArgumentError: if ``min_size`` is not an integer >= 0,
            ``max_size`` not an integer >= 1 and >= ``min_size``, or
            ``timeout`` not a finite number of seconds > 0.
    """
    if type(min_size) is not int or min_size < 0:
        msg = f"PostgreSQL pool min_size (?pool_min=) must be an integer >= 0, got {min_size!r}."
        raise StoreArgumentError(msg)
    if type(max_size) is not int or max_size < 1:
        msg = f"PostgreSQL pool max_size (?pool_max=) must be an integer >= 1, got {max_size!r}."
        raise StoreArgumentError(msg)
    if max_size < min_size:
        msg = f"PostgreSQL pool max_size (?pool_max=) is {max_size}, below its min_size (?pool_min=) {min_size}; give a max_size at least the min_size."
        raise StoreArgumentError(msg)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout < math.inf
    ):
        msg = f"PostgreSQL pool timeout (?pool_timeout=) must be a finite number of seconds > 0, got {timeout!r}."
        raise StoreArgumentError(msg)


def _dropped(con: Any) -> bool:
    """Return whether an idle pooled connection was dropped by the server (something to read, or no socket)."""
    pgconn = con.pgconn
    try:
        readable, _, _ = select.select([pgconn.socket], [], [], 0)
    except Exception:  # a closed handle: the driver's error (no socket), or the OS's
        return True
    return bool(readable)


class Drivers(NamedTuple):
    """Where a PostgreSQL store gets its connections: ``connect(conninfo, **options)`` and ``pool(conninfo, **options)``.

    Both take psycopg's sync signatures (``psycopg.connect``,
    ``psycopg_pool.ConnectionPool``). The async store opens its PostgreSQL
    store with :data:`DRIVERS` set to the asyncio bridge's, so the same
    store code runs on psycopg's async connections and pool.
    """

    connect: Callable[..., Any]
    pool: Callable[..., Any]


# The drivers of the PostgreSQL stores opened in this context; None: psycopg's sync ones.
DRIVERS: contextvars.ContextVar[Drivers | None] = contextvars.ContextVar(
    "kvmemory_postgres_drivers", default=None
)


_T = TypeVar("_T")


def _read(con: Any, sql: str, params: Any, indexed: bool) -> list[Any]:
    """Run one read statement on ``con``; ``indexed``: with ``enable_seqscan`` off for it alone."""
    if not indexed:
        return list(con.execute(sql, params).fetchall())
    with con.transaction():
        con.execute("SET LOCAL enable_seqscan = off")
        return list(con.execute(sql, params).fetchall())


class PostgresConnections:
    """A PostgreSQL store's connections: opened once, the tables set up, then a pool for every call.

    Made without I/O; :meth:`open` connects. The two steps are apart so that
    the backend's ``store_error``, which asks this object whether an error is
    a lost connection, can already name an error met while opening.
    Opening connects once on its own first: a host that does not resolve
    or a refused login fails at once, with the driver's reason, instead of
    after the pool's timeout of retrying in the background. Over that
    connection it creates or migrates the tables (or, ``read_only``, only
    checks them) and finds pgvector's ``embedding`` column (adding it where
    ``pgvector`` allows); then it opens the pool.

    Args:
        conninfo: A libpq URL or connection string.
        url: Names the store in messages (its password hidden).
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most.
        timeout: Seconds to wait for the server, and for a connection from the pool.
        read_only: Run every statement read-only; never create or migrate tables.
        pgvector: Add pgvector's column where the server offers the extension.

    Raises:
        MissingDependencyError: if psycopg or psycopg_pool is not installed.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        url: str,
        min_size: int,
        max_size: int,
        timeout: float,
        read_only: bool,
        pgvector: bool,
    ) -> None:
        try:
            import psycopg
            import psycopg.conninfo
            import psycopg_pool
        except ImportError as exc:
            raise missing_dependency(exc.name or "psycopg", "postgres") from exc
        self.read_only = read_only
        self.driver_errors: tuple[type[BaseException], ...] = (
            psycopg.Error,
            psycopg_pool.PoolTimeout,
            CommitUnconfirmed,
        )
        self._operational = psycopg.OperationalError
        self.pool_timeout = psycopg_pool.PoolTimeout
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self._conninfo = conninfo
        self._url = url
        self._pgvector = pgvector
        self._psycopg = psycopg
        self._pool_class = psycopg_pool.ConnectionPool
        self._pool: Any = None
        self._tables = Tables()
        # The schema of the pgvector extension once kvmemory_vectors has its embedding
        # column (every write then fills it).
        self._vector_schema: str | None = None

    def open(self, store_error: Callable[[str, str, BaseException], StoreError]) -> None:
        """Connect, create, migrate or check the tables, find pgvector, then open the pool.

        Args:
            store_error: Turns a driver error met while opening into the store's
                error, as ``Backend.store_error(action, where, exc)`` does.

        Raises:
            StoreUnreachableError: if the first connection fails.
            SchemaVersionError: if the tables' version cannot be opened.
            StoreError: if the tables cannot be set up or the pool cannot open.
        """
        psycopg, conninfo, url, timeout = self._psycopg, self._conninfo, self._url, self.timeout
        read_only = self.read_only
        # The URL's connect_timeout, else the pool's timeout, bounds each connection attempt.
        options: dict[str, Any] = {"autocommit": True}
        try:
            if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(conninfo):
                options["connect_timeout"] = max(int(timeout), 1)
            drivers = DRIVERS.get() or Drivers(psycopg.connect, self._pool_class)
            first = drivers.connect(conninfo, **options)
        except psycopg.Error as exc:
            msg = f"Cannot connect to PostgreSQL store {url}: {exc}; check that the server is running and the URL's host, port, user, password and database are right."
            raise StoreUnreachableError(msg) from exc
        with first, self._opening(store_error):
            self._tables = open_tables(first, store=f"PostgreSQL store {url}", read_only=read_only)
            if not self._tables.no_tables:
                self._vector_schema = find_pgvector(
                    first, create=self._pgvector and not read_only, refused=psycopg.Error
                )
        self._pool = drivers.pool(
            conninfo,
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=timeout,
            kwargs=options,
            configure=self._configure,
            open=False,
        )
        try:
            with self._opening(store_error):
                self._pool.open(wait=True, timeout=timeout)
        except BaseException:
            self._pool.close()
            raise

    @contextlib.contextmanager
    def _opening(
        self, store_error: Callable[[str, str, BaseException], StoreError]
    ) -> Iterator[None]:
        """Report the driver's errors while the store is opened as the backend's ``store_error`` names them."""
        try:
            yield
        except StoreError:
            raise
        except self.driver_errors as exc:
            raise store_error("open", "", exc) from exc

    def _configure(self, con: Any) -> None:
        # JIT compilation never pays for the store's statements: a keyword ranking's CTEs
        # are costed far above jit_above_cost once a session holds 100,000 rows, and
        # compiling took longer than running it (1.0 s of 2.4 s, expressions of each term).
        con.execute("SET jit = off")
        if self.read_only:
            con.execute("SET default_transaction_read_only = on")

    @property
    def pool(self) -> Any:
        """The ``psycopg_pool.ConnectionPool`` every call takes a connection from."""
        return self._pool

    @property
    def tables(self) -> Tables:
        """What opening found in the database (no tables yet; tables without the keyword index)."""
        return self._tables

    @property
    def vector_schema(self) -> str | None:
        """The schema of pgvector once ``kvmemory_vectors`` has its ``embedding`` column, else ``None``."""
        return self._vector_schema

    def lost(self, exc: BaseException) -> bool:
        """Return whether a driver error means the connection was lost (killed, the server restarted or gone).

        Such an error is no damage to the store: the server rolled back
        what the connection had not committed.
        """
        if isinstance(exc, CommitUnconfirmed):
            return True
        # The pool's timeout is an OperationalError too, but no connection was had to lose.
        if isinstance(exc, self.pool_timeout) or not isinstance(exc, self._operational):
            return False
        state = getattr(exc, "sqlstate", None)
        # No SQLSTATE: the driver's own "server closed the connection", "consuming input failed".
        return state is None or state.startswith("08") or state in _SHUTDOWN_STATES

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """Lend a pooled connection for the block, replacing first any the server has dropped.

        An idle connection has nothing to read; one that has (the server's
        "terminating connection" and its close, after a kill or a restart)
        is closed, so that the pool opens another, and the next one is
        taken. The probe reads the socket's state, with no round trip.
        """
        for _ in range(self.max_size + 1):
            with self._pool.connection() as con:
                if _dropped(con):
                    con.close()  # the pool sees it closed and opens a new one in its place
                    continue
                yield con
                return
        with self._pool.connection() as con:
            yield con

    def query_rows(self, sql: str, params: Any = (), *, indexed: bool = False) -> list[Any]:
        """Run one read statement on a pooled connection and return its rows.

        A read lost with its connection is run once more on another one
        (a read changes nothing, so it is safe to repeat). ``indexed``: run
        it with sequential scans off, in a transaction of its own.
        """
        try:
            with self.connection() as con:
                return _read(con, sql, params, indexed)
        except self.driver_errors as exc:
            if not self.lost(exc):
                raise
        with self.connection() as con:
            return _read(con, sql, params, indexed)

    def query_vectors(self, sql: str, params: Any) -> list[Any]:
        """Run one statement that reads vectors and return its rows, read in binary (once more if its connection is lost)."""
        # Binary results: a bytea arrives as its bytes, not as hex text twice its size.
        try:
            with self.connection() as con:
                return list(con.execute(sql, params, binary=True).fetchall())
        except self.driver_errors as exc:
            if not self.lost(exc):
                raise
        with self.connection() as con:
            return list(con.execute(sql, params, binary=True).fetchall())

    def read_snapshot(self, work: Callable[[Callable[[str, Any], list[Any]]], _T]) -> _T:
        """Return what ``work`` returns, given a reader whose statements all see one snapshot (rows read in binary).

        The statements run in one ``REPEATABLE READ, READ ONLY``
        transaction on one pooled connection: a reading that takes several
        statements (a ranking that reads some blocks, then others) sees the
        store as one statement would. A read lost with its connection runs
        once more, whole, on another one (it changes nothing).
        """

        def attempt() -> _T:
            with self.connection() as con, con.transaction():
                con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                return work(
                    lambda sql, params: list(con.execute(sql, params, binary=True).fetchall())
                )

        try:
            return attempt()
        except self.driver_errors as exc:
            if not self.lost(exc):
                raise
        return attempt()

    def write_one(self, sql: str, params: Any) -> list[Any]:
        """Run one write statement, committed on its own, and return its rows.

        Raises:
            CommitUnconfirmed: if the connection is lost before the server
                answers: the statement may have been committed.
        """
        with self.connection() as con:
            try:
                return list(con.execute(sql, params).fetchall())
            except self.driver_errors as exc:
                if self.lost(exc):
                    raise CommitUnconfirmed(str(exc)) from exc
                raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """Take a pooled connection and yield it inside one transaction (committed on a clean exit).

        A connection lost at ``BEGIN`` (before the block runs) is replaced
        once. An error of the block rolls the transaction back.

        Raises:
            CommitUnconfirmed: if the connection is lost during the commit:
                the server may have committed the transaction.
        """
        for attempt in range(2):
            with self.connection() as con:
                began = con.transaction()
                try:
                    began.__enter__()
                except self.driver_errors as exc:
                    if attempt or not self.lost(exc):
                        raise
                    continue  # nothing was sent but BEGIN: take another connection
                try:
                    yield con
                except BaseException as exc:
                    if not began.__exit__(type(exc), exc, exc.__traceback__):
                        raise
                    return
                try:
                    began.__exit__(None, None, None)
                except self.driver_errors as exc:
                    if self.lost(exc):
                        raise CommitUnconfirmed(str(exc)) from exc
                    raise
                return

    def close(self) -> None:
        """Close the pool and its connections."""
        self._pool.close()
