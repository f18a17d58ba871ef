"""``kvmemory``: inspect, replay, convert and export agent sessions.

A SOURCE is a session file (``.json`` or ``.jsonl``, as written by
``Memory.save``, or UFO's bare JSON array) or a store URL
(``sqlite:///runs.db``, a ``.db`` path, ``jsonl:///dir``,
``postgresql://...``) together with ``--session ID``.

Loading never imports code: an item whose class is not defined in this
process is shown as a plain ``MemoryItem`` with all its fields, and a module
planted beside a session or in the current directory is never run. Text from
a session is printed with its control characters escaped (``\\x1b``).

Examples::

    kvmemory sessions sqlite:///runs.db
    kvmemory show runs.db --session run-1 --keys step,action --last 5
    kvmemory replay session.json
    kvmemory replay runs.db --session run-1 --html run-1.html
    kvmemory convert runs.db --session run-1 run-1.jsonl
    kvmemory stats session.json
    kvmemory import ufo-log logs/my_task --store runs.db --session ufo-1
    kvmemory import smolagents-dump steps.json --store runs.db --session agent-1
    kvmemory mcp runs.db --prefix agent-
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import orjson

from agents import __version__
from agents.agent import escape_controls
from agents.agent._replay import fold, plural
from agents.memory import (
    AgentMemoryError,
    Memory,
    MemoryItem,
    SessionPages,
    read_session_pages,
    write_session,
)
from agents.memory._keys import unmatched_key_message
from agents.memory.exceptions import InvalidSessionIdError

__all__ = ["main"]

_FILE_SUFFIXES = (".json", ".jsonl")
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def _is_file_source(source: str) -> bool:
    return "://" not in source and source.endswith(_FILE_SUFFIXES)


def _open_existing_store(url: str) -> Any:
    """Open a store read-only, for inspection: nothing is created, migrated or written."""
    from agents.memory.stores import open_store

    path = url[len("sqlite://") :].partition("?")[0] if url.startswith("sqlite://") else url
    if "://" not in path and not os.path.exists(path):
        msg = f"No store file {path!r}; check the path (a new store is only created by convert)."
        raise _UsageError(msg)
    return open_store(url, read_only=True)


@contextlib.contextmanager
def _session_pages(source: str, session: str | None) -> Iterator[SessionPages]:
    """Open the session file SOURCE for reading a page at a time; check ``--session``."""
    try:
        with read_session_pages(source, size=_PAGE, on_unknown_class="base") as pages:
            if session is not None and pages.session_id not in (None, session):
                msg = f"{source!r} holds session {pages.session_id!r}, not {session!r}."
                raise _UsageError(msg)
            yield pages
    except FileNotFoundError as exc:
        msg = f"No session file {source!r}; check the path."
        raise _UsageError(msg) from exc


def _read(source: str, session: str | None) -> Memory:
    """Return the session named by SOURCE (and ``--session`` for a store) as a memory."""
    if _is_file_source(source):
        try:
            memory = Memory.from_file(source, on_unknown_class="base")
        except FileNotFoundError as exc:
            msg = f"No session file {source!r}; check the path."
            raise _UsageError(msg) from exc
        if session is not None and memory.session_id not in (None, session):
            msg = f"{source!r} holds session {memory.session_id!r}, not {session!r}."
            raise _UsageError(msg)
        return memory
    with _open_session_store(source, session) as (store, name):
        info = store.session_info(name)
        return Memory(
            store.read(name, on_unknown_class="base"),
            session_id=name,
            step_key=_step_key_of(info),
            metadata=info.metadata if info is not None else None,
        )


def _step_key_of(info: Any) -> str:
    """Return the step key a store keeps for a session (``"step"`` for one it does not know)."""
    return info.step_key if info is not None else "step"


@contextlib.contextmanager
def _open_session_store(source: str, session: str | None) -> Iterator[tuple[Any, str]]:
    """Open the store SOURCE and check that it has ``session``; yield both."""
    if session is None:
        msg = f"{source!r} is a store; name the session with --session ID (list them with: kvmemory sessions {source})."
        raise _UsageError(msg)
    with _open_existing_store(source) as store:
        if session not in store.sessions():
            msg = f"Store {source!r} has no session {session!r}; list them with: kvmemory sessions {source}"
            raise _UsageError(msg)
        yield store, session


class _UsageError(AgentMemoryError, ValueError):
    """A command-line mistake, reported without a traceback."""


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def _count(text: str) -> int:
    """Parse ``--last N``: a whole number of items, 0 or more."""
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        msg = f"expected a number of items, 0 or more, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return count


_MOST_HITS = 2**63 - 1  # what every store's search takes (Store.search's k)


def _hits(text: str) -> int:
    """Parse ``search -k N``: a whole number of hits, 1 or more (0 is no search)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= _MOST_HITS:
        msg = f"expected a number of hits from 1 to 2**63 - 1, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return count


def _steps(text: str) -> list[Any]:
    """Parse ``--steps``: comma-separated step numbers, or JSON strings for text steps."""
    steps: list[Any] = []
    for part in _split(text) or []:
        try:
            step = orjson.loads(part)
        except orjson.JSONDecodeError:
            step = None
        if type(step) not in (int, float, str):
            msg = (
                f"expected step numbers such as 1,2,5 (a text step in JSON quotes, "
                f"'\"plan\"'), got {part!r}"
            )
            raise argparse.ArgumentTypeError(msg)
        steps.append(step)
    if not steps:
        msg = f"expected step numbers such as 1,2,5, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return steps


def _print(out: IO[str], text: str) -> None:
    """Write one line of output, its control characters escaped."""
    out.write(escape_controls(text) + "\n")


def _print_json(out: IO[str], value: Any, *, default: Callable[[Any], Any] = str) -> None:
    """Write ``value`` as one line of JSON, control characters escaped the JSON way."""
    try:
        data = orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        # orjson refuses an int beyond 64 bits without asking ``default``: write those as text.
        data = orjson.dumps(
            _long_ints_as_text(value), default=default, option=orjson.OPT_NON_STR_KEYS
        )
    out.write(escape_controls(data.decode(), json=True) + "\n")


def _long_ints_as_text(value: Any) -> Any:
    """Return ``value`` with every int beyond 64 bits (as a key too) as its decimal text, collections as lists and dicts."""
    if type(value) is not bool and isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, dict):
        return {_long_ints_as_text(key): _long_ints_as_text(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_long_ints_as_text(item) for item in value]
    return value


def _plain_value(value: Any) -> Any:
    """Return a value JSON cannot hold as plain JSON: bytes as base64, collections as lists, else text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _cmd_sessions(args: argparse.Namespace, out: IO[str]) -> int:
    listed: list[dict[str, Any]] = []
    with _open_existing_store(args.store) as store:
        for session in store.sessions():
            try:
                listed.append({"session": session, "items": store.count(session)})
            except InvalidSessionIdError:
                # One row written by other means must not hide the other sessions.
                listed.append(
                    {"session": session, "items": None, "error": "not a valid session id"}
                )
    if args.json:
        _print_json(out, listed)
        return 0
    for entry in listed:
        count = (
            plural(entry["items"], "item")
            if entry["items"] is not None
            else "not a valid session id; kvmemory cannot read this session"
        )
        _print(out, f"{entry['session']}\t{count}")
    if not listed:
        _print(out, "no sessions")
    return 0


def _selected(args: argparse.Namespace) -> Memory:
    if not _is_file_source(args.source) and (args.last is not None or args.steps is not None):
        # The store reads only the items asked for, whatever the length of the session.
        with _open_session_store(args.source, args.session) as (store, name):
            step_key = _step_key_of(store.session_info(name))
            if args.last is not None:
                records = store.tail(name, args.last, steps=args.steps, on_unknown_class="base")
                items = [record.item for record in records]
            else:
                items = store.read(name, steps=args.steps, on_unknown_class="base")
        return Memory(items, session_id=name, step_key=step_key)
    memory = _read(args.source, args.session)
    items = memory.content if args.steps is None else memory.items_of_steps(args.steps)
    if args.last is not None:
        items = items[-args.last :] if args.last else []
    return Memory(items, step_key=memory.step_key, session_id=memory.session_id)


def _projected(args: argparse.Namespace, keys: list[str]) -> list[dict[str, Any]]:
    """Return the chosen keys of a store session's items, cut down by the store itself."""
    with _open_session_store(args.source, args.session) as (store, name):
        if args.last is None:
            rows: list[dict[str, Any]] = store.project(name, keys, steps=args.steps)
            return rows
        records = store.tail(name, args.last, steps=args.steps, on_unknown_class="base")
    return [{key: r.item[key] for key in keys if key in r.item} for r in records]


def _cmd_show(args: argparse.Namespace, out: IO[str]) -> int:
    if args.plain and not args.json:
        msg = "--plain chooses the form of --json output; pass both: --json --plain."
        raise _UsageError(msg)
    keys = _split(args.keys)
    if keys is not None and not args.json and not _is_file_source(args.source):
        rows = _projected(args, keys)
        for fields in rows:
            _print(out, _show_line(fields))
        if _unmatched(keys, rows):
            with _open_session_store(args.source, args.session) as (store, name):
                present = list(store.summary(name).fields)
            _warn_unmatched(keys, rows, present)
        return 0
    memory = _selected(args)
    if keys is not None and not args.json:
        rows = [item.filter(keys) for item in memory]
        for fields in rows:
            _print(out, _show_line(fields))
        present = list(dict.fromkeys(key for item in memory for key in item))
        _warn_unmatched(keys, rows, present)
        return 0
    if args.json and args.plain:
        rows = [item.to_dict() if keys is None else item.filter(keys) for item in memory]
        _print_json(out, rows, default=_plain_value)
        return 0
    if args.json:
        if keys is not None:
            memory = Memory(
                [type(item).from_mapping(item.filter(keys)) for item in memory],
                step_key=memory.step_key,
            )
        out.write(
            escape_controls(memory.to_json_bytes(on_unencodable="repr").decode(), json=True) + "\n"
        )
        return 0
    for item in memory:
        _print(out, _show_line(item.to_dict()))
    return 0


def _show_line(fields: dict[str, Any]) -> str:
    """One item as ``show`` prints it: ``key=value`` pairs, each long value folded as ``replay`` folds it."""
    return "  ".join(f"{key}={fold(repr(value))}" for key, value in fields.items())


def _unmatched(keys: list[str], rows: list[dict[str, Any]]) -> list[str]:
    return [key for key in keys if not any(key in row for row in rows)]


def _warn_unmatched(keys: list[str], rows: list[dict[str, Any]], present: list[str]) -> None:
    """Warn on stderr about each key no shown item holds, with the suggestion ``Memory.project()`` gives."""
    for key in _unmatched(keys, rows):
        message = unmatched_key_message(
            (key,), len(rows), present, consequence="nothing is shown for it", alias_hint=False
        )
        _print(sys.stderr, f"kvmemory: warning: {message}")


def _cmd_search(args: argparse.Namespace, out: IO[str]) -> int:
    """Search one session of a store, or many of them in one ranking."""
    from agents.service import SessionService

    if args.session is not None and args.prefix is not None:
        msg = "pass either --session ID or --prefix P, not both."
        raise _UsageError(msg)
    with _open_existing_store(args.store) as store:
        service = SessionService(store, embedder=_embedder(args.embedder))
        if args.session is not None:
            if args.session not in store.sessions():
                msg = f"Store {args.store!r} has no session {args.session!r}; list them with: kvmemory sessions {args.store}"
                raise _UsageError(msg)
            found = service.search(args.session, args.query, args.k, mode=args.mode)
            hits = [(args.session, hit.seq, hit.score, hit.item) for hit in found]
        else:
            many = service.search_sessions(args.query, args.k, prefix=args.prefix, mode=args.mode)
            hits = [(hit.session_id, hit.seq, hit.score, hit.item) for hit in many]
        step_keys = {session: service.step_key(session) for session, *_ in hits}
    if args.json:
        rows = [
            {"session": session, "seq": seq, "score": score, "fields": item.to_dict()}
            for session, seq, score, item in hits
        ]
        _print_json(out, rows, default=_plain_value)
        return 0
    for session, seq, score, item in hits:
        fields = item.to_dict()
        step_key = step_keys[session]
        where = f"step {fields.pop(step_key)!r}" if step_key in fields else "no step"
        _print(out, f"{session} · {where} · seq {seq} · score {score:.4f}")
        _print(out, "  " + _show_line(fields))
    if not hits:
        _print(out, "no hits")
    return 0


def _cmd_replay(args: argparse.Namespace, out: IO[str]) -> int:
    from agents.agent import replay

    memory = _selected(args)
    if args.html is not None:
        from agents.agent import replay_html

        replay_html(memory, args.html)
        _print(out, f"wrote the timeline of {len(memory)} items to {args.html}")
        return 0
    replay(memory, file=out, color=args.color)
    return 0


def _cmd_stats(args: argparse.Namespace, out: IO[str]) -> int:
    from agents.memory.stores import SessionSummary
    from agents.service import SessionService, cost_keys_of

    cost_keys = _split(args.cost_field)
    if _is_file_source(args.source):
        memory = _read(args.source, args.session)
        cost_keys = cost_keys or list(cost_keys_of(memory.metadata))
        counts = SessionSummary.of(
            [memory.content], step_key=memory.step_key, cost_key=cost_keys[0]
        )
        cost = counts.cost + sum(
            SessionSummary.of([memory.content], cost_key=key).cost for key in cost_keys[1:]
        )
        session = memory.session_id
    else:
        # Counted a page at a time: the session is never held whole.
        with _open_session_store(args.source, args.session) as (store, session):
            stats = SessionService(store).stats(session, tuple(cost_keys or ()))
            counts, cost, cost_keys = stats.summary, stats.cost, list(stats.cost_keys)
    if args.json:
        summary = {
            "session": session,
            "items": counts.items,
            "steps": counts.steps,
            "first_step": counts.first_step,
            "last_step": counts.last_step,
            "total_cost": round(cost, 6),
            "cost_fields": cost_keys,
            "fields": counts.fields,
        }
        _print_json(out, summary)
        return 0
    _print(out, f"session: {session or '-'}")
    _print(out, f"items: {counts.items}")
    span = f" ({counts.first_step!r} .. {counts.last_step!r})" if counts.steps else ""
    _print(out, f"steps: {counts.steps}{span}")
    _print(out, f"total cost: {round(cost, 6)}")
    _print(out, f"cost fields: {', '.join(cost_keys)}")
    _print(out, "fields:")
    for key, count in counts.fields.items():
        _print(out, f"  {key}: {count}")
    return 0


_PAGE = 1000
"""Items per page when a session is copied: what convert holds of a store session at once."""


@contextlib.contextmanager
def _progress(
    args: argparse.Namespace, total: int | None, what: str
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``, which moves a progress bar on the terminal (stderr).

    Without a ``total`` (a file read as it streams) the bar counts without an end.

    The bar needs the ``kvmemory[rich]`` extra; with ``--quiet``, output that
    is not a terminal, or without rich, ``advance`` does nothing.
    """
    if args.quiet or not sys.stderr.isatty():
        yield lambda n: None
        return
    try:
        from rich.console import Console
        from rich.progress import Progress
    except ImportError:
        yield lambda n: None
        return
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(escape_controls(what), total=total)
        yield lambda n: bar.advance(task, n)


def _advancing(
    pages: Iterator[list[MemoryItem]], advance: Callable[[int], None]
) -> Iterator[list[MemoryItem]]:
    for page in pages:
        yield page
        advance(len(page))


def _cmd_convert(args: argparse.Namespace, out: IO[str]) -> int:
    dest: str = args.dest
    if "://" not in dest and not dest.endswith(_FILE_SUFFIXES + _SQLITE_SUFFIXES):
        msg = (
            f"Cannot tell what to write to {dest!r} from its name; give a .json or .jsonl "
            f"file, a SQLite file ending in {', '.join(_SQLITE_SUFFIXES)}, or a store URL "
            f"(sqlite://{dest}, jsonl:///dir, postgresql://...)."
        )
        raise _UsageError(msg)
    if _is_file_source(dest) and os.path.exists(dest) and not args.force:
        msg = f"{dest!r} exists; pass --force to replace it."
        raise _UsageError(msg)
    if _is_file_source(args.source):
        if _is_file_source(dest):
            memory = _read(args.source, args.session)
            if args.step_key is not None:
                memory = Memory(
                    memory.content,
                    step_key=args.step_key,
                    session_id=memory.session_id,
                    metadata=memory.metadata,
                )
            memory.save(dest, on_unencodable=args.on_unencodable)
            _print(out, f"wrote {len(memory)} items to {dest}")
            return 0
        # A JSONL file is read a page at a time (a JSON document is one value, read whole).
        with _session_pages(args.source, args.session) as session:
            return _append_pages(
                args,
                out,
                session.pages,
                None,
                session.session_id,
                args.step_key or session.step_key,
            )
    # A store session is read a page at a time and never held whole.
    with _open_session_store(args.source, args.session) as (store, name):
        total = store.count(name)
        info = store.session_info(name)
        step_key = args.step_key or (info.step_key if info is not None else "step")
        pages = (
            [record.item for record in page]
            for page in store.pages(name, size=_PAGE, on_unknown_class="base")
        )
        if not _is_file_source(dest):
            return _append_pages(args, out, pages, total, name, step_key)
        with _progress(args, total, f"writing {dest}") as advance:
            written = write_session(
                dest,
                _advancing(pages, advance),
                session_id=name,
                step_key=step_key,
                metadata=info.metadata if info is not None else None,
                on_unencodable=args.on_unencodable,
            )
    _print(out, f"wrote {written} items to {dest}")
    return 0


def _append_pages(
    args: argparse.Namespace,
    out: IO[str],
    pages: Iterator[list[MemoryItem]],
    total: int | None,
    session_id: str | None,
    step_key: str,
) -> int:
    """Append pages of items to the target session of the store ``args.dest``."""
    from agents.memory.stores import open_store

    target = args.to_session or session_id or args.session
    if target is None:
        msg = f"{args.source!r} has no session id; name the target session with --to-session ID."
        raise _UsageError(msg)
    appended: list[int] = []
    with open_store(args.dest) as store:
        if store.count(target) and not args.force:
            msg = f"Session {target!r} of {args.dest!r} is not empty; pass --force to append to it."
            raise _UsageError(msg)
        try:
            with _progress(args, total, f"appending to {target}") as advance:
                for page in _advancing(pages, advance):
                    appended += store.append(
                        target, page, step_key=step_key, on_unencodable=args.on_unencodable
                    )
        except BaseException:
            # Each page is its own transaction: take back the pages this run appended.
            store.delete_seqs(target, appended)
            raise
    _print(out, f"appended {len(appended)} items to session {target!r} of {args.dest}")
    return 0


def _cmd_import_ufo_log(args: argparse.Namespace, out: IO[str]) -> int:
    from agents.integrations.ufo import LOG_FILE, import_ufo_log

    path: str = args.path
    if not os.path.isfile(path) and not os.path.isfile(os.path.join(path, LOG_FILE)):
        msg = (
            f"No UFO log at {path!r}: expected a log folder holding {LOG_FILE!r} "
            "(UFO's logs/<task name>/) or the log file itself; check the path."
        )
        raise _UsageError(msg)
    count = import_ufo_log(
        path,
        args.store,
        args.session,
        step_key=args.step_key,
        generation=args.generation,
        link_screenshots=args.link,
        allow_absolute=args.allow_absolute,
        append=args.append,
    )
    out.write(f"imported {count} steps into session {args.session!r} of {args.store}\n")
    return 0


def _cmd_import_smolagents_dump(args: argparse.Namespace, out: IO[str]) -> int:
    from agents.integrations.smolagents import import_smolagents_dump

    path: str = args.path
    if not os.path.isfile(path):
        msg = (
            f"No smolagents dump at {path!r}: expected the JSON file that "
            "json.dump(agent.memory.get_full_steps(), f) writes; check the path."
        )
        raise _UsageError(msg)
    count = import_smolagents_dump(
        path, args.store, args.session, step_key=args.step_key, append=args.append
    )
    out.write(f"imported {count} steps into session {args.session!r} of {args.store}\n")
    return 0


def _embedder(name: str | None) -> Any:
    """Return the embedder ``--embedder`` names (``hashing`` or ``wordllama``), or ``None``."""
    if name == "hashing":
        from agents.memory.search import HashingEmbedder

        return HashingEmbedder()
    if name == "wordllama":
        from agents.memory.search import WordLlamaEmbedder

        return WordLlamaEmbedder()
    return None


def _cmd_mcp(args: argparse.Namespace, out: IO[str]) -> int:
    """Serve a store over MCP: stdio by default (stdout then carries only the protocol)."""
    from agents.integrations._local import check_bind
    from agents.integrations.mcp import MemoryServer, Scope

    embedder = _embedder(args.embedder)
    token = os.environ.get(args.token_env) or None
    if not args.http and (args.host is not None or args.port is not None):
        msg = "--host and --port are for --http; stdio needs neither."
        raise _UsageError(msg)
    if args.http:
        check_bind(args.host or "127.0.0.1", token, server="MCP", token_env=args.token_env)
    with MemoryServer(
        args.store,
        scope=Scope(session=args.session, prefix=args.prefix),
        read_only=args.read_only,
        image_dir=args.images,
        poll_seconds=args.poll,
        embedder=embedder,
    ) as server:
        if args.http:
            from agents.integrations.mcp import DEFAULT_HTTP_PORT

            port = DEFAULT_HTTP_PORT if args.port is None else args.port
            server.serve_http(host=args.host or "127.0.0.1", port=port, token=token)
        else:
            import anyio

            anyio.run(server.run_stdio)
    return 0


def _cmd_serve(args: argparse.Namespace, out: IO[str]) -> int:
    """Serve a store's live view in the browser until interrupted (read-only)."""
    from agents.integrations._local import check_bind
    from agents.integrations.web import DEFAULT_PORT, serve

    embedder = _embedder(args.embedder)
    token = os.environ.get(args.token_env) or None
    check_bind(args.host, token, server="the live view", token_env=args.token_env)

    def ready(address: str) -> None:
        guard = "a token" if token is not None else "no token (loopback only)"
        _print(out, f"kvmemory: serving {args.store} read-only at {address}, with {guard}")
        out.flush()

    serve(
        args.store,
        host=args.host,
        port=DEFAULT_PORT if args.port is None else args.port,
        token=token,
        image_dirs=args.images,
        embedder=embedder,
        poll_seconds=args.poll,
        on_ready=ready,
    )
    return 0


def _seconds(text: str) -> float:
    """Parse ``--poll``: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        msg = f"expected a number of seconds above 0 and at most 3600, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _port(text: str) -> int:
    """Parse ``--port``: a TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 < value < 65536:
        msg = f"expected a TCP port from 1 to 65535, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvmemory",
        description="Inspect, replay, convert and export kvmemory agent sessions.",
        epilog=(
            "SOURCE is a .json/.jsonl session file, or a store URL or .db path with --session ID. "
            "Reading never imports code named by a session: items of classes this process "
            "does not define show as plain items."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kvmemory {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sessions = commands.add_parser("sessions", help="list the sessions of a store")
    sessions.add_argument("store", help="store URL or SQLite path")
    sessions.add_argument(
        "--json", action="store_true", help='print a JSON list of {"session", "items"}'
    )
    sessions.set_defaults(run=_cmd_sessions)

    def source_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("source", help="session file, or store URL/path with --session")
        sub.add_argument("--session", help="session id (required for a store)")

    def selection_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--steps",
            type=_steps,
            help="comma-separated steps, e.g. 1,2,5 (a text step in JSON quotes: '\"plan\"')",
        )
        sub.add_argument("--last", type=_count, metavar="N", help="only the last N items")

    show = commands.add_parser("show", help="print items, or chosen keys of them")
    source_args(show)
    selection_args(show)
    show.add_argument("--keys", help="comma-separated keys to show, e.g. step,action")
    show.add_argument(
        "--json",
        action="store_true",
        help="print the items as kvmemory's lossless JSON (Memory.from_json reads it back)",
    )
    show.add_argument(
        "--plain",
        action="store_true",
        help=(
            "with --json: print one plain JSON object of fields per item, for scripts "
            "(dates as ISO text, bytes as base64, other values as text)"
        ),
    )
    show.set_defaults(run=_cmd_show)

    search = commands.add_parser(
        "search",
        help="search a store: one session, or many in one ranking",
        description=(
            "Search a store's sessions by keyword (BM25), or by meaning with --embedder. "
            "Without --session, every session (or those whose id starts with --prefix) is "
            "searched in one ranking whose statistics are those of the sessions searched, "
            "so scores of different sessions compare."
        ),
    )
    search.add_argument("store", help="store URL or SQLite path")
    search.add_argument("query", help="the words to look for")
    search.add_argument("--session", help="search only this session")
    search.add_argument("--prefix", help="search only the sessions whose id starts with this")
    search.add_argument(
        "-k", type=_hits, default=10, metavar="N", help="how many hits, 1 or more (default 10)"
    )
    search.add_argument(
        "--mode",
        choices=("keyword", "semantic", "hybrid"),
        default="keyword",
        help="keyword (default), or semantic or hybrid with --embedder",
    )
    search.add_argument(
        "--embedder",
        choices=("hashing", "wordllama"),
        help="the model of the sessions' vectors, for semantic and hybrid search",
    )
    search.add_argument(
        "--json",
        action="store_true",
        help='print a JSON list of {"session", "seq", "score", "fields"} (fields as plain JSON)',
    )
    search.set_defaults(run=_cmd_search)

    replay = commands.add_parser("replay", help="print the session step by step")
    source_args(replay)
    selection_args(replay)
    replay.add_argument(
        "--color",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="colour the output (needs kvmemory[rich]); default: only on a terminal",
    )
    replay.add_argument(
        "--html",
        metavar="FILE",
        help="write a self-contained HTML timeline to FILE instead of printing",
    )
    replay.set_defaults(run=_cmd_replay)

    stats = commands.add_parser("stats", help="count items, steps, fields and cost")
    source_args(stats)
    stats.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    stats.add_argument(
        "--cost-field",
        metavar="NAMES",
        help=(
            "comma-separated numeric fields summed as cost (default: what the session's source "
            "wrote: llm_cost for a UFO 3 log, Cost for UFO 2, else cost)"
        ),
    )
    stats.set_defaults(run=_cmd_stats)

    convert = commands.add_parser("convert", help="copy a session to a file or another store")
    source_args(convert)
    convert.add_argument("dest", help="a .json/.jsonl file, or a store URL/path")
    convert.add_argument("--to-session", help="session id in the target store (default: the same)")
    convert.add_argument(
        "--step-key",
        metavar="KEY",
        help=(
            "the field that numbers the steps in the copy (default: the source's own), "
            "e.g. step_number for a smolagents get_full_steps() dump"
        ),
    )
    convert.add_argument(
        "--force", action="store_true", help="replace a file or append to a non-empty session"
    )
    convert.add_argument(
        "--on-unencodable",
        choices=("error", "repr", "drop"),
        default="error",
        help="what to do with values JSON cannot hold (default: error)",
    )
    convert.add_argument(
        "--quiet", action="store_true", help="no progress bar (shown on a terminal with rich)"
    )
    convert.set_defaults(run=_cmd_convert)

    imports = commands.add_parser("import", help="turn another tool's logs into a session")
    kinds = imports.add_subparsers(dest="kind", required=True, metavar="KIND")
    ufo = kinds.add_parser("ufo-log", help="a UFO run's log folder (response.log and screenshots)")
    ufo.add_argument("path", help="the log folder (logs/<task name>) or its response.log")
    ufo.add_argument("--store", required=True, help="store URL or SQLite path to write to")
    ufo.add_argument("--session", required=True, help="session id to write")
    ufo.add_argument(
        "--link",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="list the screenshots found in a 'screenshots' field (default: on)",
    )
    ufo.add_argument("--append", action="store_true", help="append to a non-empty session")
    ufo.add_argument(
        "--step-key",
        help="the field that names a step (default: Step for UFO 2 logs, session_step for UFO 3)",
    )
    ufo.add_argument(
        "--generation",
        choices=("auto", "ufo2", "ufo3"),
        default="auto",
        help="the UFO generation that wrote the log (default: recognised from its lines)",
    )
    ufo.add_argument(
        "--allow-absolute",
        action="store_true",
        help="also link screenshots named by an absolute path outside the log folder",
    )
    ufo.set_defaults(run=_cmd_import_ufo_log)
    dump = kinds.add_parser(
        "smolagents-dump",
        help="a JSON dump of smolagents' agent.memory.get_full_steps() (needs kvmemory[smolagents])",
    )
    dump.add_argument(
        "path", help="the JSON file json.dump(agent.memory.get_full_steps(), f) wrote"
    )
    dump.add_argument("--store", required=True, help="store URL or SQLite path to write to")
    dump.add_argument("--session", required=True, help="session id to write")
    dump.add_argument("--append", action="store_true", help="append to a non-empty session")
    dump.add_argument(
        "--step-key", default="step", help="the field that holds a step's number (default: step)"
    )
    dump.set_defaults(run=_cmd_import_smolagents_dump)

    mcp = commands.add_parser(
        "mcp",
        help="serve a store to any agent over the Model Context Protocol (needs kvmemory[mcp])",
        description=(
            "Serve STORE to MCP clients: tools to record, search and recall steps, "
            "resources with change notifications, and a history prompt. stdio by default."
        ),
    )
    mcp.add_argument(
        "store", help="store URL or SQLite path (created if missing, unless --read-only)"
    )
    scope = mcp.add_mutually_exclusive_group()
    scope.add_argument("--session", help="serve only this session")
    scope.add_argument(
        "--prefix", help="serve only the sessions whose ids start with P", metavar="P"
    )
    mcp.add_argument(
        "--read-only",
        action="store_true",
        help="offer no tool that writes; open the store read-only",
    )
    mcp.add_argument(
        "--images", metavar="DIR", help="the folder image paths sent by clients must lie in"
    )
    mcp.add_argument(
        "--embedder",
        choices=("hashing", "wordllama"),
        help="offer semantic and hybrid search with this embedder (hashing needs numpy; wordllama kvmemory[semantic])",
    )
    mcp.add_argument(
        "--poll",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how often to look for changes by other processes (default: 1)",
    )
    mcp.add_argument(
        "--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio"
    )
    mcp.add_argument("--host", help="address to bind with --http (default: 127.0.0.1)")
    mcp.add_argument("--port", type=_port, help="port to bind with --http (default: 8765)")
    mcp.add_argument(
        "--token-env",
        default="KVMEMORY_MCP_TOKEN",
        metavar="VAR",
        help="environment variable holding the bearer token HTTP clients must send "
        "(default: KVMEMORY_MCP_TOKEN); required to bind anywhere but 127.0.0.1",
    )
    mcp.set_defaults(run=_cmd_mcp)

    serve = commands.add_parser(
        "serve",
        help="watch a store's sessions live in the browser, read-only (needs kvmemory[serve])",
        description=(
            "Serve a page listing STORE's sessions, each opening a live timeline that shows "
            "steps as other processes append them. Only reads; binds 127.0.0.1 by default."
        ),
    )
    serve.add_argument("store", help="store URL or SQLite path (must exist; opened read-only)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port to bind (default: 8766)")
    serve.add_argument(
        "--token-env",
        default="KVMEMORY_SERVE_TOKEN",
        metavar="VAR",
        help="environment variable holding the token every request must bear "
        "(default: KVMEMORY_SERVE_TOKEN); required to bind anywhere but 127.0.0.1",
    )
    serve.add_argument(
        "--images",
        metavar="DIR",
        action="append",
        default=[],
        help="show image files inside DIR (repeatable); other image paths show as names",
    )
    serve.add_argument(
        "--embedder",
        choices=("hashing", "wordllama"),
        help="offer semantic and hybrid search for sessions whose vectors came from this model",
    )
    serve.add_argument(
        "--poll",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how often an open page asks for new steps (default: 1)",
    )
    serve.set_defaults(run=_cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None, *, out: IO[str] | None = None) -> int:
    """Run the ``kvmemory`` command line and return its exit status.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
        out: Where to print results (default: ``sys.stdout``).

    Returns:
        0 on success, 1 when the session or store could not be read or written,
        2 for a usage error.
    """
    args = _parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    try:
        status: int = args.run(args, stream)
    except _UsageError as exc:
        _print(sys.stderr, f"kvmemory: error: {exc}")
        return 2
    except (AgentMemoryError, OSError) as exc:
        _print(sys.stderr, f"kvmemory: error: {exc}")
        return 1
    return status


def _drop_current_directory() -> None:
    """Take the current directory off ``sys.path``, where ``python -m`` put it.

    ``python -m agents.cli`` starts with the current directory first on
    ``sys.path``, so any import made while sessions are read or shown (a class
    a session names, an optional extra such as rich loaded lazily) would find
    a module of that name planted beside the sessions being inspected. The
    ``agents`` package is already imported and finds its own modules through
    its package path, not ``sys.path[0]``.
    """
    if sys.path and not getattr(sys.flags, "safe_path", False):
        first = sys.path[0]
        if first == "" or os.path.abspath(first) == os.getcwd():
            del sys.path[0]


if __name__ == "__main__":
    _drop_current_directory()
    sys.exit(main())
