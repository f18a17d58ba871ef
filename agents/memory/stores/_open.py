"""Open a store from its URL: the URL forms, their options and the checks on them.

Besides the built-in schemes, a URL may name a backend of another package:
one registered in this process with :func:`register_backend`, or one that an
installed distribution declares in the entry-point group
``kvmemory.backends`` (the name is the scheme, the object an opener), which
is how the ``kvmemory`` command, ``serve`` and ``mcp`` reach it without
importing code named on their command line.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
import threading
import urllib.parse
from typing import Final, Protocol

from agents.memory import exceptions
from agents.memory.stores._core.backend import Backend
from agents.memory.stores._core.checks import check_store_path
from agents.memory.stores._core.checks import redact_url as _redact
from agents.memory.stores._ram import InMemoryStore
from agents.memory.stores._sqlite.backend import SQLiteStore
from agents.memory.stores._store import Store

__all__ = ["ENTRY_POINT_GROUP", "BackendOpener", "open_store", "register_backend"]

_SCHEMES = ("sqlite", "jsonl", "postgresql", "postgres", "memory")

ENTRY_POINT_GROUP: Final = "kvmemory.backends"
"""The entry-point group in which an installed distribution names its backends' openers by URL scheme."""

_SCHEME: Final = re.compile(r"[a-z][a-z0-9+.-]{0,63}")


class BackendOpener(Protocol):
    """Open a backend from a store URL: what :func:`register_backend` takes.

    Called as ``opener(url, read_only=...)`` with the whole URL as the user
    wrote it (scheme included); it parses the rest itself and returns an
    open :class:`Backend`. Opened with ``read_only=True`` the backend
    creates, migrates and writes nothing and sets
    :attr:`Backend.read_only`; a store that does not exist is then
    :class:`~agents.memory.StoreNotFoundError`. A bad URL is
    :class:`~agents.memory.InvalidStoreURLError`.
    """

    def __call__(self, url: str, *, read_only: bool) -> Backend:
        """Return the open backend ``url`` names."""
        ...


_REGISTERED: dict[str, BackendOpener] = {}
_REGISTRY_LOCK: Final = threading.Lock()


def register_backend(scheme: str, opener: BackendOpener) -> None:
    """Make ``open_store("SCHEME://...")`` (and the async, CLI and server doors) open a backend of yours.

    ``open_store(url, read_only=...)`` then calls ``opener(url,
    read_only=read_only)`` and returns ``Store(backend)``;
    ``open_async_store(url)`` runs that store's calls on a worker thread.
    For the ``kvmemory`` command (``show``, ``serve``, ``mcp``, ...), which
    imports no code of yours, declare the opener in your distribution's
    entry points instead, group ``kvmemory.backends``, named by the scheme::

        [project.entry-points."kvmemory.backends"]
        jsonfile = "mypackage.backend:open_jsonfile"

    Registering the same opener again does nothing.

    Args:
        scheme: The URL scheme, lower case: a letter, then letters, digits,
            ``+``, ``-`` or ``.`` (64 characters at most).
        opener: Called as ``opener(url, read_only=...)``; returns a :class:`Backend`.

    Raises:
        StoreArgumentError: if ``scheme`` is not such a scheme, is a scheme
            kvmemory opens itself, or is registered to another opener; or
            if ``opener`` is not callable.
    """
    if type(scheme) is not str or not _SCHEME.fullmatch(scheme):
        msg = (
            f"register_backend() takes a lower-case URL scheme (a letter, then letters, digits, "
            f"'+', '-' or '.'; 64 at most) without '://', got {scheme!r}."
        )
        raise exceptions.StoreArgumentError(msg)
    if scheme in _SCHEMES:
        msg = f"Scheme {scheme!r} is kvmemory's own store; register your backend under another scheme."
        raise exceptions.StoreArgumentError(msg)
    if not callable(opener):
        msg = f"register_backend() takes an opener called as opener(url, read_only=...), got {opener!r}."
        raise exceptions.StoreArgumentError(msg)
    with _REGISTRY_LOCK:
        known = _REGISTERED.get(scheme)
        if known is not None and known is not opener:
            msg = (
                f"Scheme {scheme!r} is already registered to {known!r}; choose another scheme "
                f"for {opener!r}."
            )
            raise exceptions.StoreArgumentError(msg)
        _REGISTERED[scheme] = opener


def _opener_of(scheme: str, text: str) -> BackendOpener | None:
    """Return the opener registered for ``scheme``, or the one an installed distribution declares, or ``None``."""
    with _REGISTRY_LOCK:
        known = _REGISTERED.get(scheme)
    if known is not None:
        return known
    declared = [
        point
        for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if point.name == scheme
    ]
    if not declared:
        return None
    values = sorted({point.value for point in declared})
    if len(values) > 1:
        msg = (
            f"Scheme {scheme!r} of {_redact(text)!r} is declared by several installed "
            f"distributions ({', '.join(values)}, entry-point group {ENTRY_POINT_GROUP!r}); "
            "uninstall all but one."
        )
        raise exceptions.InvalidStoreURLError(msg)
    try:
        opener = declared[0].load()
    except Exception as exc:
        msg = (
            f"The backend for scheme {scheme!r} ({values[0]}, entry-point group "
            f"{ENTRY_POINT_GROUP!r}) cannot be loaded: {type(exc).__name__}: {exc}; "
            "reinstall the distribution that declares it."
        )
        raise exceptions.InvalidStoreURLError(msg) from exc
    if not callable(opener):
        msg = f"The entry point {values[0]} for scheme {scheme!r} is not an opener (a callable), got {opener!r}."
        raise exceptions.InvalidStoreURLError(msg)
    with _REGISTRY_LOCK:
        known = _REGISTERED.setdefault(scheme, opener)
    return known


def _open_registered(opener: BackendOpener, text: str, read_only: bool) -> Store:
    """Open a store over the backend ``opener`` opens, read-only as asked."""
    backend = opener(text, read_only=read_only)
    if not isinstance(backend, Backend):
        msg = (
            f"The opener for {_redact(text)!r} returned {backend!r} ({type(backend).__name__}); "
            "an opener returns a Backend (a subclass of agents.memory.stores.Backend)."
        )
        raise exceptions.StoreArgumentError(msg)
    try:
        return Store(backend, read_only=read_only or None)
    except BaseException:
        backend.close()
        raise


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
        opener = _opener_of(scheme, text)
        if opener is not None:
            return _open_registered(opener, text, read_only)
        msg = (
            f"Unknown store URL scheme {scheme!r} in {_redact(text)!r}; use one of "
            "'sqlite:///path.db', 'jsonl:///dir', 'postgresql://...', 'memory://' or a bare file path, "
            "or a scheme registered with register_backend() or declared by an installed "
            f"distribution in the entry-point group {ENTRY_POINT_GROUP!r}."
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
            vector_cache=options["vector_cache"],
            vector_cache_max_bytes=_max_bytes(options["vector_cache_max_bytes"], text),
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
        fsync = _choice(text, options, "fsync", ("always", "never"))
        return JSONLStore(path, fsync=fsync == "always", read_only=read_only, url=text)
    _no_options(
        text,
        options,
        (
            "synchronous",
            "timeout",
            "mode",
            "sqlite_vec",
            "keyword_fold",
            "keyword_snapshot",
            "vector_snapshot",
        ),
    )
    synchronous = options.get("synchronous", "full").lower()
    if synchronous not in ("full", "normal", "off"):
        msg = f"Option synchronous={synchronous!r} in {text!r} must be 'full', 'normal' or 'off'."
        raise exceptions.InvalidStoreURLError(msg)
    mode = options.get("mode", "rwc")
    if mode not in ("ro", "rw", "rwc"):
        msg = f"Option mode={mode!r} in {text!r} must be 'ro' or 'rwc'."
        raise exceptions.InvalidStoreURLError(msg)
    vec = _choice(text, options, "sqlite_vec", tuple(_SQLITE_VEC))
    fold = _choice(text, options, "keyword_fold", ("batched", "lazy"))
    snapshot = _choice(text, options, "keyword_snapshot", ("auto", "off"))
    coded = _choice(text, options, "vector_snapshot", ("auto", "off"))
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
        keyword_snapshot=snapshot,  # type: ignore[arg-type]  # checked against the two names above
        vector_snapshot=coded,  # type: ignore[arg-type]  # checked against the two names above
    )


_SQLITE_VEC: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _choice(text: str, options: dict[str, str], name: str, allowed: tuple[str, ...]) -> str:
    """Return the URL option ``name``'s value, one of ``allowed`` (the first where not given).

    Raises:
        InvalidStoreURLError: naming the option, its value and the values allowed.
    """
    value = options.get(name, allowed[0])
    if value not in allowed:
        listed = ", ".join(map(repr, allowed[:-1])) + f" or {allowed[-1]!r}"
        msg = f"Option {name}={value!r} in {text!r} must be {listed}."
        raise exceptions.InvalidStoreURLError(msg)
    return value


# kvmemory's own options of a PostgreSQL URL, with their defaults; the rest goes to libpq.
_POSTGRES_OPTIONS = {
    "pgvector": "auto",
    "pool_min": "1",
    "pool_max": "4",
    "pool_timeout": "30",
    "vector_cache": "auto",
    "vector_cache_max_bytes": "",
}


def _max_bytes(value: str, text: str) -> int | None:
    """Return the ``vector_cache_max_bytes`` option of a PostgreSQL URL (``None`` where not given: the environment's or the default).

    Raises:
        InvalidStoreURLError: if it is not a whole number of bytes.
    """
    if value == "":  # left out (an empty one is refused as the URL is split)
        return None
    if not (value.isascii() and value.isdigit()):
        msg = f"Option vector_cache_max_bytes={value!r} in {_redact(text)!r} must be a whole number of bytes (the coded vector files the cache folder keeps at most, 0 for none), or left out for $KVMEMORY_CACHE_MAX_BYTES or 4 GiB."
        raise exceptions.InvalidStoreURLError(msg)
    return int(value)


def _postgres_options(text: str) -> tuple[str, dict[str, str]]:
    """Split kvmemory's own options (``pgvector``, ``pool_min``, ``pool_max``, ``pool_timeout``, ``vector_cache``, ``vector_cache_max_bytes``) from a PostgreSQL URL, checked.

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
    if any(key == "vector_cache" and not value for key, value in pairs):
        msg = f"Option vector_cache in {_redact(text)!r} is empty; name a local folder for the coded part vectors, 'off' for none, or leave the option out (this user's cache folder)."
        raise exceptions.InvalidStoreURLError(msg)
    if any(key == "vector_cache_max_bytes" and not value for key, value in pairs):
        msg = f"Option vector_cache_max_bytes in {_redact(text)!r} is empty; give a whole number of bytes, or leave the option out ($KVMEMORY_CACHE_MAX_BYTES, else 4 GiB)."
        raise exceptions.InvalidStoreURLError(msg)
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
            "names (libpq's connection parameters, plus kvmemory's pgvector=auto|off, pool_min, pool_max, pool_timeout, vector_cache=auto|off|folder and vector_cache_max_bytes)."
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
