"""An SQLite store file, open: the checks before it is touched, its connection, WAL mode and migrations.

:class:`SQLiteFile` is the part of :class:`~agents.memory.stores.SQLiteBackend`
that deals with the file itself rather than with rows: it refuses a file
that is not a kvmemory store (or one cut short) before SQLite writes to it,
creates a new one readable by its owner only (``0600``; SQLite gives its
``-wal`` and ``-shm`` files the same permissions), switches it to WAL mode
and the chosen ``synchronous`` setting, migrates an older layout (see
:mod:`~agents.memory.stores._sqlite.schema`), loads the sqlite-vec
extension where it is wanted, and runs every statement of the handle under
one lock: one read at a time (:meth:`SQLiteFile.query_rows`) or one
``BEGIN IMMEDIATE`` write transaction (:meth:`SQLiteFile.transaction`).

A read-only handle opened while no other connection has the file open reads
it as immutable, so that SQLite leaves no ``-wal`` and ``-shm`` files behind
it, and opens it again when a writer has changed it since
(:meth:`SQLiteFile.follow_writers`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sqlite3
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from agents.memory.exceptions import (
    CorruptStoreError,
    InvalidArgumentError,
    InvalidStoreURLError,
    SchemaVersionError,
    StoreError,
    StoreNotFoundError,
    missing_dependency,
)
from agents.memory.stores._core.checks import check_store_path
from agents.memory.stores._core.migrations import check_schema_version, migrate
from agents.memory.stores._sqlite.schema import (
    INDEXED_EAGERLY,
    MIGRATIONS,
    NO_CHANGE_LOG,
    NO_LENGTH_INDEX,
    NO_NONCE,
    NO_RECORD_KEYS,
    READ_ONLY_LAYOUTS,
    READS_AS_CURRENT,
    SCHEMA_VERSION,
)

__all__ = ["SQLiteFile", "Synchronous"]

Synchronous = Literal["full", "normal", "off"]

_NOT_A_DATABASE: Final = ("not a database", "file is encrypted")
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_SQLITE_HEADER_SIZE: Final = 100
_DAMAGED: Final = ("malformed", "disk image", "Could not decode to UTF-8")
_INDEX_NAMES: Final = ("kvmemory_fts", "kvmemory_search")

# The files a handle of this process holds open, by (device, inode), with how many. Closing
# any descriptor of a file drops every POSIX lock this process holds on it, those of its
# SQLite connections included: a writer in another process closing its connection then
# takes itself for the last one and checkpoints and deletes the WAL under them (stale
# reads, then "disk I/O error"). So a file held here is not opened again to check it.
_HELD: dict[tuple[int, int], int] = {}
_HELD_LOCK: Final = threading.Lock()


class SQLiteFile:
    """One SQLite store file, open: checked, connected, in WAL mode and migrated (unless ``read_only``).

    Args:
        path: The database file; created (readable by its owner only) unless ``read_only``.
        synchronous: ``"full"`` (default), ``"normal"`` or ``"off"``; see :class:`~agents.memory.stores.SQLiteStore`.
        timeout: Seconds a writer waits for another process's transaction.
        read_only: Open without write access: the file must exist, and it is
            never created, migrated or written.
        sqlite_vec: Whether to load the sqlite-vec extension: ``None`` when it
            loads, ``True`` to require it, ``False`` never.

    Raises:
        InvalidStoreURLError: if the path holds a NUL character, or is ``":memory:"``.
        InvalidArgumentError: if ``synchronous`` is not one of the three settings.
        MissingDependencyError: if ``sqlite_vec=True`` and the ``sqlite-vec``
            extra is not installed.
        StoreNotFoundError: if ``read_only`` and the file does not exist.
        CorruptStoreError: if the file is not a kvmemory store (it is left unchanged).
        SchemaVersionError: if a newer kvmemory wrote the file, or ``read_only``
            meets an older layout that needs a migration.
        StoreError: if the file cannot be opened, or ``sqlite_vec=True`` and
            this Python's ``sqlite3`` cannot load the extension.

    Attributes:
        path: The database file.
        read_only: Whether the handle was opened read-only.
        synchronous: The durability setting.
        timeout: Seconds a writer waits for another process's transaction.
        lock: Held around every use of :attr:`connection`; take it to run
            several statements as one (it is reentrant).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        timeout: float = 30.0,
        read_only: bool = False,
        sqlite_vec: bool | None = None,
    ) -> None:
        self.path = check_store_path(path)
        if self.path == ":memory:":
            msg = (
                "SQLite store path ':memory:' names SQLite's private in-memory database, which an "
                "SQLite store does not open (its sessions live in one file that other handles, "
                "processes and the snapshot files beside it share). Open 'memory://' "
                "(InMemoryStore) for a store without a file, or './:memory:' for a file of that name."
            )
            raise InvalidStoreURLError(msg)
        self.read_only = read_only
        if synchronous not in ("full", "normal", "off"):
            msg = f"synchronous must be 'full', 'normal' or 'off', got {synchronous!r}."
            raise InvalidArgumentError(msg)
        self.synchronous: Synchronous = synchronous
        self.timeout = timeout
        self.lock = threading.RLock()
        self._no_tables = False
        self._indexed = True
        self._folds = True  # whether the file may hold rows not yet in the FTS table (layout 6)
        self._keyed = True  # whether the rows have the record key column (layout 7)
        self._logged = True  # whether vector writes are logged (layout 8)
        self._lengths = True  # whether the session index holds each row's length (layout 9)
        self._nonced = True  # whether each vector change row holds a nonce (layout 10)
        self._held: tuple[int, int] | None = None
        if not self._held_here():  # (checked when it was first opened here)
            self._check_whole_pages()  # an existing file, before SQLite opens it
        if read_only and not os.path.exists(self.path):
            msg = f"SQLite store {self.path!r} does not exist; it cannot be opened read-only (drop ?mode=ro to create it)."
            raise StoreNotFoundError(msg)
        if not read_only:
            self._create_file()
        # No -wal file: no connection has the database open, and every commit is in
        # the main file. Reading it as immutable keeps SQLite from creating the -wal
        # and -shm files a read-only connection to a WAL database otherwise leaves
        # behind. A writer that starts meanwhile writes to its own -wal, so the main
        # file this handle reads stays as it was until a checkpoint: every read first
        # looks for that (follow_writers) and opens the file again when it changed.
        self._immutable = read_only and not os.path.exists(f"{self.path}-wal")
        self._stamp = self._file_stamp()
        self._opened = 0  # connections opened: a reopened file starts its data_version afresh
        self._con = self._connect()
        try:
            with self._opening():
                self._setup()
            self._vec = _load_sqlite_vec(self._con, sqlite_vec, self.path)
        except BaseException:
            self._con.close()
            raise
        self._hold()

    # -- what the handle holds -------------------------------------------------------

    @property
    def connection(self) -> sqlite3.Connection:
        """The ``sqlite3`` connection reads and writes go through now, to trace or inspect (never commit, roll back or close it).

        A read-only handle on a file no writer had open reopens it when a
        writer appears, so ask again rather than keep it.
        """
        return self._con

    @property
    def no_tables(self) -> bool:
        """Whether the file holds no tables yet (read as empty), after following writers (see :meth:`follow_writers`)."""
        with self.lock:
            self.follow_writers()
            return self._no_tables

    @property
    def keyword_indexed(self) -> bool:
        """Whether the file's layout has the keyword index (``False`` for a file of version 3 or older opened read-only)."""
        return self._indexed

    @property
    def keyed(self) -> bool:
        """Whether the rows have the record key column (``False`` for an older file opened read-only: it holds no records)."""
        return self._keyed

    @property
    def logs_vector_changes(self) -> bool:
        """Whether the file logs every vector row written (``kvmemory_vector_changes``, version 8; not an older file opened read-only)."""
        return self._logged

    @property
    def nonces_vector_changes(self) -> bool:
        """Whether each row of the vector change log holds a random nonce (version 10; not an older file opened read-only, whose versions are ids alone)."""
        return self._nonced

    @property
    def lengths_indexed(self) -> bool:
        """Whether the session index holds each row's term count (version 9; not an older file opened read-only, which reads the rows)."""
        return self._lengths

    @property
    def folds(self) -> bool:
        """Whether the file's layout may hold rows not yet in the FTS table (version 6; not a version-4 or 5 file opened read-only)."""
        return self._folds

    @property
    def uses_sqlite_vec(self) -> bool:
        """Whether the sqlite-vec extension is loaded on :attr:`connection` and reads kvmemory's vectors as written."""
        return self._vec

    def query_rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """Run one read statement on the connection (after following writers) and return its rows."""
        with self.lock:
            self.follow_writers()
            return self._con.execute(sql, params).fetchall()

    def change_stamp(self) -> tuple[int, int, int]:
        """Return a value that changes whenever the file may have changed since it was last returned.

        It joins three counters: the connections opened (a read-only handle
        opens the file again when a writer appears), ``PRAGMA data_version``
        (changed by every commit of another connection, in any process) and
        the connection's ``total_changes`` (every row this connection
        inserted, changed or deleted). A commit to any session changes it.
        """
        with self.lock:
            self.follow_writers()
            return self.snapshot_stamp()

    def snapshot_stamp(self) -> tuple[int, int, int]:
        """Return :meth:`change_stamp` without following other writers: inside a read transaction, the stamp of its snapshot.

        ``PRAGMA data_version`` keeps its value for the whole of a read
        transaction (the commits of others are counted when the next one
        begins), so read first inside one it names the snapshot every
        statement of the transaction reads. It does not follow writers,
        which would open the file again under the transaction: the caller
        holds :attr:`lock` and followed them before it began.
        """
        con = self._con
        (version,) = con.execute("PRAGMA data_version").fetchone()
        return self._opened, int(version), con.total_changes

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Hold :attr:`lock` and run the block in one ``BEGIN IMMEDIATE`` transaction; yield the connection.

        The block's statements commit together when it exits cleanly and are
        rolled back when it raises (or when the commit fails).
        """
        con = self._con
        with self.lock:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                raise
            try:
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    con.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close the connection."""
        with self.lock:
            self._con.close()
            if self._held is not None:
                with _HELD_LOCK:
                    _HELD[self._held] -= 1
                    if not _HELD[self._held]:
                        del _HELD[self._held]
                self._held = None

    def _identity(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def _held_here(self) -> bool:
        """Whether another handle of this process holds the file open (see ``_HELD``)."""
        identity = self._identity()
        with _HELD_LOCK:
            return identity is not None and identity in _HELD

    def _hold(self) -> None:
        """Count the file as held open by this process until :meth:`close`."""
        identity = self._identity()
        if identity is not None:
            with _HELD_LOCK:
                _HELD[identity] = _HELD.get(identity, 0) + 1
            self._held = identity

    # -- errors ----------------------------------------------------------------------

    def error(self, action: str, where: str, exc: BaseException) -> StoreError:
        """Return the error to raise for a driver error met on this file, telling damage apart.

        Args:
            action: What the call did, as in ``"Cannot {action}..."``.
            where: ``" session 'id' of"``, or ``""`` for a call on the whole store.
            exc: The driver's error.

        Returns:
            A :class:`~agents.memory.CorruptStoreError` for a damaged or missing
            keyword index, a file that is not a database or a damaged one; a
            :class:`~agents.memory.StoreError` otherwise.
        """
        text = str(exc)
        if any(name in text for name in _INDEX_NAMES) or "fts5" in text:
            return self.index_damaged(action, where, text)
        if any(marker in text for marker in _NOT_A_DATABASE):
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: the file is not a kvmemory store (not an SQLite database: {text}); it was left unchanged. Open another path."
            return CorruptStoreError(msg)
        if any(marker in text for marker in _DAMAGED):
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: the database is damaged ({text}); restore it from a backup or open another path."
            return CorruptStoreError(msg)
        if "readonly" in text or "read-only" in text:
            msg = f"Cannot {action}{where} SQLite store {self.path!r}: it is open read-only ({text}); open it without ?mode=ro to write. Nothing was changed."
            return StoreError(msg)
        msg = f"Cannot {action}{where} SQLite store {self.path!r}: {text}; nothing was changed."
        return StoreError(msg)

    def index_damaged(self, action: str, where: str, reason: str) -> CorruptStoreError:
        """Return the error for a keyword index found damaged or missing, pointing at the rebuild.

        Args:
            action: What the call did, as in ``"Cannot {action}..."``.
            where: ``" session 'id' of"``, or ``""`` for a call on the whole store.
            reason: What was found (the driver's message).
        """
        msg = (
            f"Cannot {action}{where} SQLite store {self.path!r}: its keyword index is damaged or "
            f"missing ({reason}); nothing was changed. Rebuild the index from the stored items "
            "with store.rebuild_keyword_index()."
        )
        return CorruptStoreError(msg)

    # -- following writers -----------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_ino, info.st_size, info.st_mtime_ns

    def follow_writers(self) -> None:
        """On a handle reading the file as immutable, open it again if a writer has changed it since.

        A writer at work has a -wal file: the handle then reads through
        SQLite's shared memory like any reader and sees each commit. A file
        changed with no -wal left (a writer came and went) is read afresh,
        still as immutable. Two ``stat`` calls per read, on this handle only.
        """
        if not self._immutable:
            return
        active = os.path.exists(f"{self.path}-wal")
        stamp = self._file_stamp()
        if not active and stamp == self._stamp:
            return
        old = self._con
        self._immutable = not active
        self._stamp = stamp
        self._con = self._connect()
        old.close()
        with self._opening():
            self._setup()
        if self._vec:
            self._vec = _load_sqlite_vec(self._con, None, self.path)

    # -- opening ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _opening(self) -> Iterator[None]:
        """Report the driver's errors while the file is opened as :meth:`error` names them."""
        try:
            yield
        except StoreError:
            raise
        except sqlite3.Error as exc:
            raise self.error("open", "", exc) from exc

    def _connect(self) -> sqlite3.Connection:
        # A path written with a leading "//" would read as a URI authority; POSIX
        # treats extra leading slashes as one.
        absolute = "/" + os.path.abspath(self.path).lstrip("/")
        _refuse_directory(self.path, absolute)
        self._opened += 1
        uri = f"file:{urllib.parse.quote(absolute)}?mode={'ro' if self.read_only else 'rw'}"
        if self._immutable:
            uri += "&immutable=1"
        try:
            return sqlite3.connect(
                uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            msg = f"Cannot open SQLite store {self.path!r}: {exc}; check that the directory exists and is writable."
            raise StoreError(msg) from exc

    def _create_file(self) -> None:
        # Created here rather than by SQLite so that it is private from the first byte.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            os.close(os.open(self.path, flags, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            msg = f"Cannot create SQLite store {self.path!r}: {exc}; check that the directory exists and is writable."
            raise StoreError(msg) from exc

    def _check_whole_pages(self) -> None:
        """Refuse an SQLite file whose size is not a whole number of its pages (cut short), before SQLite writes to it.

        SQLite opens such a file and goes on writing to it, growing it back
        over the lost bytes; the rows in the cut-off part are then gone or
        damaged. A file that does not start with SQLite's header is left to
        the schema check, which names it.
        """
        try:
            with open(self.path, "rb") as file:
                header = file.read(_SQLITE_HEADER_SIZE)
                size = os.fstat(file.fileno()).st_size
        except OSError:
            return  # a missing or unreadable file is reported by the connection that follows
        if 0 < size < _SQLITE_HEADER_SIZE:
            # SQLite takes a 1-byte file for an empty database and writes a new
            # store over it; no SQLite file is shorter than its header.
            msg = (
                f"SQLite store {self.path!r} is {size} bytes long, shorter than an SQLite "
                f"header ({_SQLITE_HEADER_SIZE} bytes): it is not an SQLite database, or one cut "
                "short; it was left unchanged. Restore it from a backup or open another path."
            )
            raise CorruptStoreError(msg)
        if not header.startswith(_SQLITE_MAGIC):
            return  # not SQLite: the schema check names it
        (raw,) = struct.unpack(">H", header[16:18])
        page_size = 65536 if raw == 1 else raw
        if page_size < 512 or page_size & (page_size - 1) or size % page_size == 0:
            return  # an impossible page size: SQLite itself reports the file as damaged
        msg = (
            f"SQLite store {self.path!r} is damaged: it is {size} bytes long, not a whole number "
            f"of its {page_size}-byte pages, so it was cut short; it was left unchanged. Restore "
            "it from a backup or open another path."
        )
        raise CorruptStoreError(msg)

    def _setup(self) -> None:
        con = self._con
        version = self._kvmemory_version()
        if version == SCHEMA_VERSION or (self.read_only and version in READ_ONLY_LAYOUTS):
            # A file of the layout before the keyword index reads the same, searched by scanning.
            self._no_tables = version == 0
            self._indexed = version >= READS_AS_CURRENT
            self._folds = version == 0 or version > INDEXED_EAGERLY
            self._keyed = version == 0 or version > NO_RECORD_KEYS
            self._logged = version == 0 or version > NO_CHANGE_LOG
            self._lengths = version == 0 or version > NO_LENGTH_INDEX
            self._nonced = version == 0 or version > NO_NONCE
            if not self.read_only:
                self._use_wal()
            return
        if self.read_only:
            msg = f"SQLite store {self.path!r} has schema version {version}; opened read-only it cannot be migrated to {SCHEMA_VERSION}. Open it once writable to migrate it."
            raise SchemaVersionError(msg)
        self._use_wal()
        with self.transaction():
            found = self._kvmemory_version()  # another process may have migrated it meanwhile
            reached = migrate(MIGRATIONS, found, con, store=f"SQLite store {self.path!r}")
            con.execute(f"PRAGMA user_version={reached}")
        self._folds = self._keyed = self._logged = self._lengths = self._nonced = True

    def _kvmemory_version(self) -> int:
        """Return the file's schema version (0 when empty); refuse a file that is not a kvmemory store."""
        con = self._con
        # One read transaction, so that the version and the tables come from one
        # snapshot even while another process creates the store.
        outer = con.in_transaction
        if not outer:
            con.execute("BEGIN")
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            # Read as bytes: a damaged or hostile file's schema may hold text
            # that is not UTF-8, which the sqlite3 module cannot decode.
            try:
                schema = con.execute(
                    "SELECT CAST(type AS BLOB), CAST(name AS BLOB), CAST(tbl_name AS BLOB),"
                    " CAST(sql AS BLOB) FROM sqlite_master"
                ).fetchall()
            except (UnicodeDecodeError, sqlite3.DatabaseError) as exc:
                # SQLite could not parse the schema, and its message quotes bytes that are not
                # UTF-8: Python 3.11's sqlite3 raises the decoding error, 3.10's an error whose
                # message is empty. Any other database error is reported as it is.
                if isinstance(exc, sqlite3.DatabaseError) and str(exc):
                    raise
                reason = str(exc) or "SQLite's own message could not be decoded"
                msg = (
                    f"SQLite file {self.path!r} is damaged: its schema is malformed and holds text "
                    f"that is not UTF-8 ({reason}); it was left unchanged. Restore it from a backup "
                    "or open another path."
                )
                raise CorruptStoreError(msg) from exc
        finally:
            if not outer:
                con.execute("COMMIT")
        names = {name for kind, name in self._schema_text(schema) if kind == "table"}
        ours = "kvmemory_items" in names and "kvmemory_sessions" in names
        if version > SCHEMA_VERSION:
            return check_schema_version(
                version, SCHEMA_VERSION, store=f"SQLite store {self.path!r}"
            )
        if (version == 0 and names) or (version > 0 and not ours):
            msg = (
                f"SQLite file {self.path!r} is not a kvmemory store: it holds other tables "
                f"({', '.join(sorted(names)) or 'none'}, user_version {version}); it was left "
                "unchanged. Point the URL at a kvmemory store or at a new file."
            )
            raise CorruptStoreError(msg)
        return check_schema_version(version, SCHEMA_VERSION, store=f"SQLite store {self.path!r}")

    def _schema_text(self, rows: list[tuple[bytes | None, ...]]) -> list[tuple[str, str]]:
        """Return the schema rows as ``(type, name)``, refusing any text that is not UTF-8."""
        checked = []
        for row in rows:
            try:
                kind, name, *_ = [(value or b"").decode() for value in row]
            except UnicodeDecodeError as exc:
                msg = (
                    f"SQLite file {self.path!r} is damaged: its schema holds text that is not "
                    f"UTF-8 ({(row[1] or b'')[:40]!r}: {exc}); it was left unchanged. Restore it "
                    "from a backup or open another path."
                )
                raise CorruptStoreError(msg) from exc
            checked.append((kind, name))
        return checked

    def _use_wal(self) -> None:
        con = self._con
        # Switching a new file to WAL needs it to itself, and SQLite answers
        # "database is locked" at once, without its busy handler, while another
        # process is creating or migrating the store: wait for it here instead.
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        if (
            str(mode).lower() != "wal"
        ):  # pragma: no cover - only on file systems without shared memory
            msg = f"SQLite store {self.path!r} cannot use WAL mode (got {mode!r})."
            raise StoreError(msg)
        con.execute(f"PRAGMA synchronous={self.synchronous.upper()}")


# Two vectors of kvmemory's layout (little-endian float32) whose cosine is 0.6: the
# extension reads vectors in the machine's byte order, and is used only where it
# reads ours as written.
_PROBE: Final = "SELECT 1.0 - vec_distance_cosine(?, ?)"
_PROBE_VECTORS: Final = (struct.pack("<2f", 1.0, 0.0), struct.pack("<2f", 0.6, 0.8))


def _load_sqlite_vec(con: sqlite3.Connection, wanted: bool | None, path: str) -> bool:
    """Load the sqlite-vec extension into ``con``; return whether searches use it.

    ``wanted`` is ``None`` to use it when it loads and reads kvmemory's
    vectors, ``True`` to raise when it cannot, ``False`` not to load it.
    Extension loading is switched on only for the load itself, so SQL run
    later on the connection cannot load other libraries.
    """
    if wanted is False:
        return False
    try:
        sqlite_vec = importlib.import_module("sqlite_vec")
    except ImportError as exc:
        if wanted:
            raise missing_dependency("sqlite_vec", "sqlite-vec") from exc
        return False
    enable = getattr(con, "enable_load_extension", None)
    if enable is None:
        problem = "this Python's sqlite3 module was built without extension loading"
    else:
        try:
            enable(True)
            try:
                sqlite_vec.load(con)
            finally:
                enable(False)
            cosine = con.execute(_PROBE, _PROBE_VECTORS).fetchone()[0]
        except (sqlite3.Error, OSError) as exc:
            problem = f"loading it failed ({exc})"
        else:
            if cosine is not None and abs(cosine - 0.6) < 1e-6:
                return True
            problem = f"it computed {cosine!r} for a cosine of 0.6 (another byte order?)"
    if wanted:
        msg = (
            f"SQLite store {path!r} cannot use the sqlite-vec extension: {problem}. Use a "
            "Python whose sqlite3 module can load extensions (a Linux distribution's python3 "
            "usually can), or open the store without sqlite_vec=True to search with numpy."
        )
        raise StoreError(msg)
    return False


def _refuse_directory(path: str, absolute: str) -> None:
    """Raise :class:`StoreError` naming the fix if ``path`` is a directory (SQLite says only "disk I/O error" there)."""
    if not os.path.isdir(path):
        return
    fix = (
        f"it holds a JSONL store: open it as 'jsonl://{absolute}'"
        if os.path.isfile(os.path.join(path, "kvmemory-store.json"))
        else "pass the path of a SQLite file, or 'jsonl://DIR' for a JSONL store folder"
    )
    msg = f"Cannot open SQLite store {path!r}: it is a directory, not a file; {fix}."
    raise StoreError(msg)
