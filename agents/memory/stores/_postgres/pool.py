"""How a PostgreSQL store reaches its server: the first connection, the tables, pgvector, the pool.

:class:`PostgresConnections` opens a store's connections once (one plain
connection to set up the tables and find pgvector, then the pool every call
takes a connection from) and runs statements on them. :data:`DRIVERS` says
where the connections come from: psycopg's sync driver, or the asyncio
bridge's (``agents.memory.stores._async.bridge``), so the same store code runs on
both.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from agents.memory.exceptions import StoreError, StoreUnreachableError, missing_dependency
from agents.memory.stores._postgres.schema import Tables, open_tables
from agents.memory.stores._postgres.vectors import find_pgvector

__all__ = ["DRIVERS", "Drivers", "PostgresConnections"]


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


class PostgresConnections:
    """A PostgreSQL store's connections: opened once, the tables set up, then a pool for every call.

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
        store_error: Turns a driver error met while opening into the store's
            error, as ``Backend.store_error(action, where, exc)`` does.

    Raises:
        MissingDependencyError: if psycopg or psycopg_pool is not installed.
        StoreUnreachableError: if the first connection fails.
        SchemaVersionError: if the tables' version cannot be opened.
        StoreError: if the tables cannot be set up or the pool cannot open.
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
        store_error: Callable[[str, str, BaseException], StoreError],
    ) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError as exc:
            raise missing_dependency(exc.name or "psycopg", "postgres") from exc
        self.read_only = read_only
        self.driver_errors: tuple[type[BaseException], ...] = (
            psycopg.Error,
            psycopg_pool.PoolTimeout,
        )
        self._store_error = store_error
        self._tables = Tables()
        # The schema of the pgvector extension once kvmemory_vectors has its embedding
        # column (every write then fills it).
        self._vector_schema: str | None = None
        try:
            drivers = DRIVERS.get() or Drivers(psycopg.connect, psycopg_pool.ConnectionPool)
            first = drivers.connect(conninfo, autocommit=True, connect_timeout=max(int(timeout), 1))
        except psycopg.Error as exc:
            msg = f"Cannot connect to PostgreSQL store {url}: {exc}; check that the server is running and the URL's host, port, user, password and database are right."
            raise StoreUnreachableError(msg) from exc
        with first, self._opening():
            self._tables = open_tables(first, store=f"PostgreSQL store {url}", read_only=read_only)
            if not self._tables.no_tables:
                self._vector_schema = find_pgvector(
                    first, create=pgvector and not read_only, refused=psycopg.Error
                )
        self._pool = drivers.pool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True},
            configure=self._configure,
            open=False,
        )
        try:
            with self._opening():
                self._pool.open(wait=True, timeout=timeout)
        except BaseException:
            self._pool.close()
            raise

    @contextlib.contextmanager
    def _opening(self) -> Iterator[None]:
        """Report the driver's errors while the store is opened as the backend's ``store_error`` names them."""
        try:
            yield
        except StoreError:
            raise
        except self.driver_errors as exc:
            raise self._store_error("open", "", exc) from exc

    def _configure(self, con: Any) -> None:
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

    def query_rows(self, sql: str, params: Any = ()) -> list[Any]:
        """Run one read statement on a pooled connection and return its rows."""
        with self._pool.connection() as con:
            return list(con.execute(sql, params).fetchall())

    def query_vectors(self, sql: str, params: Any) -> list[Any]:
        """Run one statement that reads vectors and return its rows, read in binary."""
        # Binary results: a bytea arrives as its bytes, not as hex text twice its size.
        with self._pool.connection() as con:
            return list(con.execute(sql, params, binary=True).fetchall())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """Take a pooled connection and yield it inside one transaction (committed on a clean exit)."""
        with self._pool.connection() as con, con.transaction():
            yield con

    def close(self) -> None:
        """Close the pool and its connections."""
        self._pool.close()
