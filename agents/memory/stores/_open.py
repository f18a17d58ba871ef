"""Open a store from its URL: the URL forms, their options and the checks on them."""

from __future__ import annotations

import math
import os
import urllib.parse

from agents.memory import exceptions
from agents.memory.stores._core.checks import check_store_path
from agents.memory.stores._core.checks import redact_url as _redact
from agents.memory.stores._ram import InMemoryStore
from agents.memory.stores._sqlite.backend import SQLiteStore
from agents.memory.stores._store import Store

__all__ = ["open_store"]

_SCHEMES = ("sqlite", "jsonl", "postgresql", "postgres", "memory")


def open_store(url: str | os.PathLike[str], *, read_only: bool = False) -> Store:
    """Open the store named by ``url`` (see the module docs for the forms).

    Args:
        url: A store URL, or a filesystem path for a SQLite file.
        read_only: Open for inspection: nothing is created, migrated or
            written (a missing file or directory is an error, not a new
            store), and every write call raises :class:`StoreError`. Same as
            ``?mode=ro`` on a SQLite URL.

    Returns:
        An open store; close it with ``close()`` or a ``with`` block.

    Raises:
        InvalidStoreURLError: for an unknown scheme, an empty path, a path
            holding a NUL character or an unknown option.
        StoreNotFoundError: for a missing store opened read-only.
        CorruptStoreError: if the file or directory is not a kvmemory store (it is left unchanged).
        SchemaVersionError: if a newer kvmemory wrote the store, or an older
            one needs a migration that ``read_only`` forbids.
        MissingDependencyError: for ``postgresql://`` without the ``postgres``
            extra, or ``?sqlite_vec=on`` without the ``sqlite-vec`` extra.
        StoreUnreachableError: if a PostgreSQL server cannot be reached.
        StoreError: if the store cannot be opened, or ``?sqlite_vec=on`` and
            this Python's ``sqlite3`` cannot load the extension.
    """
    text = os.fspath(url)
    if type(text) is not str:
        msg = f"A store URL must be text, got {url!r}."
        raise exceptions.InvalidStoreURLError(msg)
    if "://" not in text:
        if not text:
            msg = "The store URL is empty; pass 'sqlite:///path/to/file.db' or a file path."
            raise exceptions.InvalidStoreURLError(msg)
        return SQLiteStore(text, read_only=read_only)
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme not in _SCHEMES:
        msg = (
            f"Unknown store URL scheme {scheme!r} in {_redact(text)!r}; use one of "
            "'sqlite:///path.db', 'jsonl:///dir', 'postgresql://...', 'memory://' or a bare file path."
        )
        raise exceptions.InvalidStoreURLError(msg)
    if scheme in ("postgresql", "postgres"):
        from agents.memory.stores._postgres.backend import PostgresStore

        conninfo, pgvector = _pgvector_option(text)
        _check_libpq_options(conninfo, text)
        return PostgresStore(conninfo, read_only=read_only, pgvector=pgvector)
    raw_path, _, query = rest.partition("?")
    options = _options(text, query)
    path = urllib.parse.unquote(raw_path)
    if scheme == "memory":
        _no_options(text, options, ())
        return InMemoryStore(path, read_only=read_only)
    if not path:
        msg = f"Store URL {text!r} has no path; write {scheme}:///absolute/path or {scheme}://relative/path."
        raise exceptions.InvalidStoreURLError(msg)
    check_store_path(path)
    if scheme == "jsonl":
        from agents.memory.stores._jsonl.backend import JSONLStore

        _no_options(text, options, ("fsync",))
        fsync = options.get("fsync", "always")
        if fsync not in ("always", "never"):
            msg = f"Option fsync={fsync!r} in {text!r} must be 'always' or 'never'."
            raise exceptions.InvalidStoreURLError(msg)
        return JSONLStore(path, fsync=fsync == "always", read_only=read_only, url=text)
    _no_options(text, options, ("synchronous", "timeout", "mode", "sqlite_vec", "keyword_fold"))
    synchronous = options.get("synchronous", "full").lower()
    if synchronous not in ("full", "normal", "off"):
        msg = f"Option synchronous={synchronous!r} in {text!r} must be 'full', 'normal' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    mode = options.get("mode", "rwc")
    if mode not in ("ro", "rw", "rwc"):
        msg = f"Option mode={mode!r} in {text!r} must be 'ro' or 'rwc'."
        raise exceptions.InvalidStoreURLError(msg)
    vec = options.get("sqlite_vec", "auto")
    if vec not in _SQLITE_VEC:
        msg = f"Option sqlite_vec={vec!r} in {text!r} must be 'auto', 'on' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    fold = options.get("keyword_fold", "batched")
    if fold not in ("batched", "lazy"):
        msg = f"Option keyword_fold={fold!r} in {text!r} must be 'batched' or 'lazy'."
        raise exceptions.InvalidStoreURLError(msg)
    try:
        timeout = float(options.get("timeout", "30"))
    except ValueError:
        timeout = -1.0
    if not (timeout >= 0 and math.isfinite(timeout)):
        msg = f"Option timeout={options.get('timeout')!r} in {text!r} must be a finite number of seconds >= 0."
        raise exceptions.InvalidStoreURLError(msg)
    return SQLiteStore(
        path,
        synchronous=synchronous,  # type: ignore[arg-type]  # checked against the three names above
        timeout=timeout,
        read_only=read_only or mode == "ro",
        url=text,
        sqlite_vec=_SQLITE_VEC[vec],
        keyword_fold=fold,  # type: ignore[arg-type]  # checked against the two names above
    )


_SQLITE_VEC: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _pgvector_option(text: str) -> tuple[str, bool]:
    """Split kvmemory's own ``pgvector=auto|off`` from a PostgreSQL URL; the rest goes to libpq as it is."""
    base, mark, query = text.partition("?")
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True) if mark else []
    chosen = [value for name, value in pairs if name == "pgvector"]
    if not chosen:
        return text, True
    if len(chosen) > 1 or chosen[0] not in ("auto", "off"):
        msg = f"Option pgvector in {_redact(text)!r} must be given once, as 'auto' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    rest = [(name, value) for name, value in pairs if name != "pgvector"]
    conninfo = base + ("?" + urllib.parse.urlencode(rest) if rest else "")
    return conninfo, chosen[0] == "auto"


def _check_libpq_options(conninfo: str, text: str) -> None:
    """Name a connection option libpq does not know before connecting, instead of reporting the server unreachable."""
    try:
        import psycopg.conninfo
    except ImportError:
        return  # PostgresStore names the missing extra
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        msg = (
            f"PostgreSQL URL {_redact(text)!r} cannot be parsed by libpq: {exc}. Check the option "
            "names (libpq's connection parameters, plus kvmemory's pgvector=auto|off)."
        )
        raise exceptions.InvalidStoreURLError(msg) from exc


def _options(url: str, query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key in options:
            msg = f"Option {key!r} is given twice in {url!r}."
            raise exceptions.InvalidStoreURLError(msg)
        options[key] = value
    return options


def _no_options(url: str, options: dict[str, str], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(allowed) if allowed else "none"
        msg = f"Unknown option {unknown[0]!r} in store URL {url!r}; the options of this store are: {known}."
        raise exceptions.InvalidStoreURLError(msg)
