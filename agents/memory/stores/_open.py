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

        conninfo, options = _postgres_options(text)
        _check_libpq_options(conninfo, text)
        return PostgresStore(
            conninfo,
            read_only=read_only,
            pgvector=options["pgvector"] == "auto",
            min_size=int(options["pool_min"]),
            max_size=int(options["pool_max"]),
            timeout=float(options["pool_timeout"]),
        )
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
    _no_options(text, options, ("synchronous", "timeout", "mode", "sqlite_vec"))
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
    )


_SQLITE_VEC: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


# kvmemory's own options of a PostgreSQL URL, with their defaults; the rest goes to libpq.
_POSTGRES_OPTIONS = {"pgvector": "auto", "pool_min": "1", "pool_max": "4", "pool_timeout": "30"}


def _postgres_options(text: str) -> tuple[str, dict[str, str]]:
    """Split kvmemory's own options (``pgvector``, ``pool_min``, ``pool_max``, ``pool_timeout``) from a PostgreSQL URL, checked.

    Returns:
        The URL for libpq (without them) and every option's value (the default where not given).
    """
    base, mark, query = text.partition("?")
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True) if mark else []
    options = dict(_POSTGRES_OPTIONS)
    for name in _POSTGRES_OPTIONS:
        chosen = [value for key, value in pairs if key == name]
        if len(chosen) > 1:
            msg = f"Option {name} is given twice in {_redact(text)!r}; give it once."
            raise exceptions.InvalidStoreURLError(msg)
        if chosen:
            options[name] = chosen[0]
    if options["pgvector"] not in ("auto", "off"):
        msg = (
            f"Option pgvector={options['pgvector']!r} in {_redact(text)!r} must be 'auto' or 'off'."
        )
        raise exceptions.InvalidStoreURLError(msg)
    sizes = {}
    for name, least in (("pool_min", 0), ("pool_max", 1)):
        value = options[name]
        if not (value.isascii() and value.isdigit()) or int(value) < least:
            msg = f"Option {name}={value!r} in {_redact(text)!r} must be a whole number >= {least} (connections)."
            raise exceptions.InvalidStoreURLError(msg)
        sizes[name] = int(value)
    if sizes["pool_max"] < sizes["pool_min"]:
        msg = (
            f"Option pool_max={sizes['pool_max']} in {_redact(text)!r} is below "
            f"pool_min={sizes['pool_min']}; the pool cannot keep more connections than it may open."
        )
        raise exceptions.InvalidStoreURLError(msg)
    try:
        timeout = float(options["pool_timeout"])
    except ValueError:
        timeout = -1.0
    if not 0 < timeout < math.inf:
        msg = f"Option pool_timeout={options['pool_timeout']!r} in {_redact(text)!r} must be a finite number of seconds > 0."
        raise exceptions.InvalidStoreURLError(msg)
    connect = [value for key, value in pairs if key == "connect_timeout"]
    if connect and not (connect[-1].isascii() and connect[-1].isdigit()):
        msg = f"Option connect_timeout={connect[-1]!r} in {_redact(text)!r} must be a whole number of seconds >= 0 (0 waits forever)."
        raise exceptions.InvalidStoreURLError(msg)
    rest = [(name, value) for name, value in pairs if name not in _POSTGRES_OPTIONS]
    conninfo = base + ("?" + urllib.parse.urlencode(rest) if rest else "")
    return conninfo, options


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
            "names (libpq's connection parameters, plus kvmemory's pgvector=auto|off, pool_min, pool_max and pool_timeout)."
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
