"""Memory for any agent: a kvmemory store served over the Model Context Protocol.

``kvmemory mcp STORE`` (or :class:`MemoryServer` in code) lets an agent in
any process, framework or language keep its steps and conversations in a
kvmemory store: the OpenAI Agents SDK, Claude Desktop and other MCP clients,
smolagents' MCP tools, TypeScript agents. The server speaks MCP over stdio,
or over streamable HTTP (bound to 127.0.0.1 unless a token guards it), with
the official ``mcp`` SDK (``pip install 'kvmemory[mcp]'``), imported when a
server is built.

What a client gets:

* **Tools**: ``record_step``, ``record_message``, ``recent_history`` (the
  newest items under a token budget, chosen by :class:`~agents.memory.prompt.Window`),
  ``search`` (keyword; semantic and hybrid when the server has an embedder),
  ``recall`` (hits merged with the newest steps), ``list_sessions``,
  ``show_steps`` and, unless the server is read-only, ``delete_step``. Each
  answers with compact text for the model and the same items as structured
  content.
* **Resources**: ``kvmemory://session/{id}`` (a session's counts) and
  ``kvmemory://session/{id}/last`` (its last steps), with change
  notifications when any process appends to or deletes from the session
  (the server polls the store).
* **Prompts**: ``history_so_far``, the recent history of a session as one
  user message.

A server serves one session, the sessions whose ids start with a prefix, or
a whole store (a :class:`Scope`), and never reads or writes outside it,
whatever a client sends. Every argument is checked before anything is
written: a bad one gets an error that names it, and the store is left as it
was.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
import re
import stat
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import attrs
import orjson

from agents import __version__
from agents.integrations._local import LOOPBACK, image_root
from agents.memory import (
    AgentMemoryError,
    EmbeddingError,
    InvalidArgumentError,
    MemoryItem,
    StoreError,
    UnmatchedKeyWarning,
)
from agents.memory.exceptions import missing_dependency
from agents.memory.prompt import (
    DEFAULT_IMAGE_KEYS,
    EstimateCounter,
    Window,
    render_json,
    render_text,
    select_window,
)
from agents.memory.stores import Store, StoredRecord, check_session_id, open_store

if TYPE_CHECKING:
    import mcp_types
    from mcp.server import Server
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession
    from starlette.types import ASGIApp, Receive, Send
    from starlette.types import Scope as ASGIScope

    from agents.memory.search import Embedder

__all__ = [
    "DEFAULT_HTTP_PORT",
    "DEFAULT_POLL_SECONDS",
    "MAX_FIELDS_BYTES",
    "MAX_IMAGE_BYTES",
    "MAX_QUERY_CHARS",
    "MemoryServer",
    "Scope",
    "ToolArgumentError",
]

DEFAULT_POLL_SECONDS: Final = 1.0
"""How often a server looks for changes other processes made to the sessions in its scope."""
DEFAULT_HTTP_PORT: Final = 8765
"""The port ``kvmemory mcp --http`` listens on unless told otherwise."""
MAX_FIELDS_BYTES: Final = 1024 * 1024
"""The largest item a client may record, as compact JSON (images not counted)."""
MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024
"""The largest image a client may attach, decoded (a data URL) or on disk (a path)."""
MAX_QUERY_CHARS: Final = 2000
"""The longest search query a client may send."""
MAX_IMAGES: Final = 8
"""The most images one recorded item may attach."""
MAX_FIELDS: Final = 200
"""The most fields one recorded item may hold."""
MAX_KEY_CHARS: Final = 200
"""The longest field name a client may use."""
MAX_K: Final = 50
"""The most hits one search returns."""
MAX_ITEMS: Final = 500
"""The most items one call returns (history, step ranges, listings)."""
MAX_TOKENS: Final = 200_000
"""The largest token budget a client may ask for."""
MAX_SESSIONS: Final = 1000
"""The most sessions a listing, a search or the change poller goes through."""
DEFAULT_LAST: Final = 20
"""How many items ``kvmemory://session/{id}/last`` shows."""

_URI_PREFIX: Final = "kvmemory://session/"
_LAST_URI: Final = re.compile(r"kvmemory://session/([^/?#]+)/last(?:/([0-9]{1,6}))?")
_SESSION_URI: Final = re.compile(r"kvmemory://session/([^/?#]+)")
_DATA_URL: Final = re.compile(r"data:(image/(?:png|jpeg|gif|webp));base64,([A-Za-z0-9+/=\s]*)")
_ROLES: Final = ("system", "user", "assistant", "tool")
_MODES: Final = ("keyword", "semantic", "hybrid")
_STEP: Final = "step"


class ToolArgumentError(InvalidArgumentError):
    """A tool, resource or prompt argument a client sent is invalid or outside the server's scope.

    Attributes:
        argument: The name of the argument at fault.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"Argument {argument!r}: {message}")
        self.argument = argument


def _check_prefix(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        check_session_id(value)


def _one_of(instance: Scope, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        check_session_id(value)
        if instance.prefix is not None:
            msg = "A scope is one session or a prefix of sessions, not both; pass session= or prefix=."
            raise InvalidArgumentError(msg)


@attrs.frozen
class Scope:
    """The sessions a server may read and write: one session, a prefix of session ids, or all.

    Args:
        session: Serve only this session.
        prefix: Serve only the sessions whose ids start with this text.
    """

    prefix: str | None = attrs.field(default=None, kw_only=True, validator=_check_prefix)
    session: str | None = attrs.field(default=None, kw_only=True, validator=_one_of)

    def allows(self, session_id: str) -> bool:
        """Return whether ``session_id`` lies inside the scope."""
        if self.session is not None:
            return session_id == self.session
        if self.prefix is not None:
            return session_id.startswith(self.prefix)
        return True

    def describe(self) -> str:
        """Return the scope in words, for messages and the server's instructions."""
        if self.session is not None:
            return f"only session {self.session!r}"
        if self.prefix is not None:
            return f"only the sessions whose ids start with {self.prefix!r}"
        return "every session of the store"


# -- argument checks ---------------------------------------------------------------------


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _int(args: Mapping[str, Any], name: str, default: int | None, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        raise ToolArgumentError(name, "is required; pass a whole number.")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        msg = (
            f"must be a whole number from {low} to {high}, got {_json_type(value)} {_brief(value)}."
        )
        raise ToolArgumentError(name, msg)
    if not low <= value <= high:
        raise ToolArgumentError(name, f"must be from {low} to {high}, got {value}.")
    return value


def _text(
    args: Mapping[str, Any], name: str, *, required: bool = True, limit: int = MAX_QUERY_CHARS
) -> str | None:
    value = args.get(name)
    if value is None:
        if required:
            raise ToolArgumentError(name, "is required; pass a string.")
        return None
    if type(value) is not str:
        raise ToolArgumentError(name, f"must be a string, got {_json_type(value)} {_brief(value)}.")
    if len(value) > limit:
        raise ToolArgumentError(name, f"is {len(value)} characters long; the limit is {limit}.")
    return value


def _keys(args: Mapping[str, Any], name: str = "keys") -> list[str] | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ToolArgumentError(
            name, f"must be a non-empty list of field names, got {_brief(value)}."
        )
    if len(value) > MAX_FIELDS:
        raise ToolArgumentError(name, f"holds {len(value)} names; the limit is {MAX_FIELDS}.")
    for key in value:
        if type(key) is not str or not key or len(key) > MAX_KEY_CHARS:
            raise ToolArgumentError(
                name, f"must hold field names (non-empty strings), got {_brief(key)}."
            )
    return list(value)


def _step_value(value: object, name: str) -> int | str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is int:
        return value
    if type(value) is str and 0 < len(value) <= MAX_KEY_CHARS:
        return value
    raise ToolArgumentError(
        name, f"must be a step: a whole number or a short string, got {_brief(value)}."
    )


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _no_unknown(args: Mapping[str, Any], schema: Mapping[str, Any], tool: str) -> None:
    known = schema.get("properties", {})
    unknown = sorted(name for name in args if name not in known)
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ToolArgumentError(
            unknown[0], f"is not an argument of {tool}; its arguments are: {allowed}."
        )


# -- rendering ---------------------------------------------------------------------------


def _plain(item: MemoryItem) -> dict[str, Any]:
    """Return an item's fields as JSON values (the codec's type tags for the rest)."""
    value = orjson.loads(render_json([item]))[0]
    return cast("dict[str, Any]", value)


def _entry(session: str, record: StoredRecord, **extra: Any) -> dict[str, Any]:
    return {"session": session, "seq": record.seq, **extra, "fields": _plain(record.item)}


def _render(entries: Sequence[Mapping[str, Any]], *, empty: str) -> str:
    """Return items as text a model reads well: a heading per item, then its fields as ``- key: value`` lines."""
    if not entries:
        return empty
    parts = []
    for entry in entries:
        fields = entry["fields"]
        # UFO's sessions name the step 'Step'; the heading shows whichever the item has.
        key = next((k for k in (_STEP, "Step") if k in fields), None)
        step = _brief(fields[key]) if key is not None else "-"
        head = f"## {entry['session']} step {step} (seq {entry['seq']}"
        if "score" in entry:
            head += f", score {entry['score']:.3f}"
        head += ")"
        body = render_text([{k: v for k, v in fields.items() if k != key}])
        parts.append(f"{head}\n{body}" if body else head)
    return "\n\n".join(parts)


# -- the server --------------------------------------------------------------------------


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


_SESSION_ARG: Final = {
    "type": "string",
    "description": "The session id (letters, digits, '_', '.', '-'). Optional when the server serves one session.",
    "maxLength": 128,
}
_IMAGES_ARG: Final = {
    "type": "array",
    "maxItems": MAX_IMAGES,
    "items": {"type": "string"},
    "description": (
        "Images to keep with the item: data URLs (data:image/png;base64,...) or paths "
        "inside the folder the server allows for images."
    ),
}
_KEYS_ARG: Final = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Only these fields of each item (default: all fields).",
}


class MemoryServer:
    """A kvmemory store served to MCP clients: tools, resources and a prompt over one scope.

    Example::

        server = MemoryServer("sqlite:///runs.db", scope=Scope(prefix="agent-"))
        anyio.run(server.run_stdio)

    Args:
        store: A store URL or path (the server opens and closes it), or an open store.
        scope: The sessions the server may touch (default: every session).
        read_only: Offer no tool that writes (recording, deleting); a store
            URL is then opened read-only.
        image_dir: The folder image paths sent by clients must lie in; without
            it, only data URLs are accepted.
        poll_seconds: How often to look for changes other processes made, for
            change notifications.
        embedder: The model semantic and hybrid search use; without it only
            keyword search is offered.
        name: The server name clients see.

    Raises:
        MissingDependencyError: naming the ``mcp`` extra when the SDK is missing.
        InvalidArgumentError: for a bad scope, folder or poll interval.
        StoreError: if the store cannot be opened.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        *,
        scope: Scope | None = None,
        read_only: bool = False,
        image_dir: str | os.PathLike[str] | None = None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        embedder: Embedder | None = None,
        name: str = "kvmemory",
    ) -> None:
        _sdk()
        if not isinstance(poll_seconds, (int, float)) or not 0 < poll_seconds <= 3600:
            msg = f"poll_seconds must be a number of seconds above 0 and at most 3600, got {poll_seconds!r}."
            raise InvalidArgumentError(msg)
        self.scope = scope if scope is not None else Scope()
        self.read_only = read_only
        self.poll_seconds = float(poll_seconds)
        self.embedder = embedder
        self.image_dir = None if image_dir is None else image_root(image_dir)
        self._owns_store = not isinstance(store, Store)
        self.store: Store = (
            store if isinstance(store, Store) else open_store(store, read_only=read_only)
        )
        self._name = name
        self._subscribers: dict[int, tuple[ServerSession, set[str]]] = {}
        self._watched: dict[str, int] = {}
        self._marks: dict[str, tuple[int, int]] = {}
        self._thread_limiter: Any = None
        try:
            self.server: Server[Any] = self._build()
        except BaseException:
            self.close()
            raise

    # -- public calls -------------------------------------------------------------------

    def close(self) -> None:
        """Close the store if the server opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> MemoryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until it disconnects."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def http_app(self, *, token: str | None = None, host: str = "127.0.0.1") -> ASGIApp:
        """Return the ASGI app that serves MCP over streamable HTTP at ``/mcp``.

        Args:
            token: When given, every request must carry ``Authorization: Bearer TOKEN``;
                others get 401 and reach nothing.
            host: The address the app is served on; a loopback address turns
                on the SDK's checks of the Host and Origin headers.

        Raises:
            InvalidArgumentError: if ``host`` is not a loopback address and no token is given.
        """
        _check_bind(host, token)
        app = self.server.streamable_http_app(host=host)
        return app if token is None else _TokenGate(app, token)

    def serve_http(
        self, *, host: str = "127.0.0.1", port: int = DEFAULT_HTTP_PORT, token: str | None = None
    ) -> None:
        """Serve MCP over streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted.

        Says where it listens on stderr (stdout stays free), once the bind is allowed.

        Raises:
            InvalidArgumentError: if ``host`` is not a loopback address and no token is given.
        """
        import sys

        import uvicorn

        app = self.http_app(token=token, host=host)
        where = f"[{host}]" if ":" in host else host
        guard = "a bearer token" if token is not None else "no token (loopback only)"
        print(f"kvmemory: serving MCP at http://{where}:{port}/mcp, with {guard}", file=sys.stderr)
        uvicorn.run(app, host=host, port=port, log_level="warning")

    # -- building the MCP server ---------------------------------------------------------

    def _build(self) -> Server[Any]:
        from mcp.server import Server
        from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

        self._bus = InMemorySubscriptionBus()
        self._listener = ListenHandler(self._bus)
        instructions = (
            "Long-term memory backed by a kvmemory store, serving "
            f"{self.scope.describe()}. Record each step or message as you go, and search "
            "or recall earlier ones instead of keeping everything in context."
        )
        return Server(
            self._name,
            version=__version__,
            instructions=instructions,
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        import anyio

        async with anyio.create_task_group() as group:
            group.start_soon(self._poll)
            try:
                yield {}
            finally:
                group.cancel_scope.cancel()

    def _tools(self) -> list[tuple[str, str, dict[str, Any], Callable[[Mapping[str, Any]], Any]]]:
        one = self.scope.session is not None
        session_required = () if one else ("session",)
        modes = ["keyword", "semantic", "hybrid"] if self.embedder is not None else ["keyword"]
        tools: list[tuple[str, str, dict[str, Any], Callable[[Mapping[str, Any]], Any]]] = []
        if not self.read_only:
            tools += [
                (
                    "record_step",
                    "Save one step of your work to memory: free-form fields such as "
                    "thought, action, observation, result. A 'step' number is assigned "
                    "(last step + 1) unless fields hold one. Returns the step and its seq.",
                    _schema(
                        {
                            "session": _SESSION_ARG,
                            "fields": {
                                "type": "object",
                                "description": 'The step\'s fields, e.g. {"thought": ..., "action": ..., "observation": ...}.',
                            },
                            "images": _IMAGES_ARG,
                        },
                        [*session_required, "fields"],
                    ),
                    self._record_step,
                ),
                (
                    "record_message",
                    "Save one chat message to memory (role and content), for a "
                    "conversation you want to remember across runs.",
                    _schema(
                        {
                            "session": _SESSION_ARG,
                            "role": {"type": "string", "enum": list(_ROLES)},
                            "content": {"type": "string", "description": "The message text."},
                            "name": {
                                "type": "string",
                                "description": "The speaker's name, if any.",
                            },
                            "images": _IMAGES_ARG,
                            "fields": {
                                "type": "object",
                                "description": "Extra fields kept with the message (tags, ids); never sent as message text.",
                            },
                        },
                        [*session_required, "role", "content"],
                    ),
                    self._record_message,
                ),
            ]
        tools += [
            (
                "recent_history",
                "Read the newest items of a session that fit a token budget, oldest "
                "first: what happened so far, ready to put in your context.",
                _schema(
                    {
                        "session": _SESSION_ARG,
                        "max_tokens": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_TOKENS,
                            "default": 2000,
                        },
                        "max_items": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_ITEMS,
                            "default": 50,
                        },
                        "keys": _KEYS_ARG,
                    },
                    session_required,
                ),
                self._recent_history,
            ),
            (
                "search",
                "Find the items that best match a query, best first. Keyword search "
                "ranks by BM25; semantic and hybrid search (when offered) also match meaning. "
                "Without a session, every session you may read is searched.",
                _schema(
                    {
                        "session": _SESSION_ARG,
                        "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
                        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 5},
                        "mode": {"type": "string", "enum": modes, "default": "keyword"},
                        "keys": _KEYS_ARG,
                    },
                    ["query"],
                ),
                self._search,
            ),
            (
                "recall",
                "Search a session and add its newest items: the earlier steps that "
                "match the query plus the latest ones, in session order, each once.",
                _schema(
                    {
                        "session": _SESSION_ARG,
                        "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
                        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 3},
                        "recent": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": MAX_ITEMS,
                            "default": 5,
                        },
                        "mode": {"type": "string", "enum": modes, "default": "keyword"},
                    },
                    [*session_required, "query"],
                ),
                self._recall,
            ),
            (
                "list_sessions",
                "List the sessions you may read, with how many items each holds.",
                _schema(
                    {
                        "prefix": {
                            "type": "string",
                            "description": "Only sessions whose ids start with this.",
                            "maxLength": 128,
                        }
                    }
                ),
                self._list_sessions,
            ),
            (
                "show_steps",
                "Show the items of a range of steps (from_step to to_step, both included), "
                "or of the listed steps.",
                _schema(
                    {
                        "session": _SESSION_ARG,
                        "from_step": {"type": "integer"},
                        "to_step": {"type": "integer"},
                        "steps": {
                            "type": "array",
                            "items": {"type": ["integer", "string"]},
                            "maxItems": MAX_ITEMS,
                        },
                    },
                    session_required,
                ),
                self._show_steps,
            ),
        ]
        if not self.read_only:
            tools.append(
                (
                    "delete_step",
                    "Delete every item of one step from a session (for a wrong or secret entry).",
                    _schema(
                        {"session": _SESSION_ARG, "step": {"type": ["integer", "string"]}},
                        [*session_required, "step"],
                    ),
                    self._delete_step,
                )
            )
        return tools

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        import mcp_types as types

        tools = []
        for name, description, schema, _ in self._tools():
            writes = name in ("record_step", "record_message", "delete_step")
            annotations = types.ToolAnnotations(
                read_only_hint=not writes,
                destructive_hint=name == "delete_step",
                idempotent_hint=not writes,
                open_world_hint=False,
            )
            tools.append(
                types.Tool(
                    name=name, description=description, input_schema=schema, annotations=annotations
                )
            )
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        found = {name: (schema, run) for name, _, schema, run in self._tools()}
        if params.name not in found:
            hint = " (this server is read-only)" if self.read_only else ""
            msg = f"Unknown tool {params.name!r}{hint}; the tools are: {', '.join(sorted(found))}."
            raise MCPError(types.INVALID_PARAMS, msg)
        schema, run = found[params.name]
        args = params.arguments or {}
        try:
            if not isinstance(args, dict):
                raise ToolArgumentError("arguments", "must be a JSON object.")
            _no_unknown(args, schema, params.name)
            text, structured = await self._in_thread(run, args)
        except ToolArgumentError as exc:
            return _error_result(str(exc), exc.argument)
        except AgentMemoryError as exc:
            return _error_result(str(exc), _argument_of(exc))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )

    async def _in_thread(self, run: Callable[[Any], Any], args: Any) -> Any:
        import anyio

        # Store calls block (SQLite waits on locks, PostgreSQL on the network): a worker
        # thread keeps the event loop serving other requests and notifications meanwhile.
        return await anyio.to_thread.run_sync(run, args, limiter=self._limiter())

    def _limiter(self) -> Any:
        import anyio

        if self._thread_limiter is None:
            # One store call at a time: a store handle is one connection.
            self._thread_limiter = anyio.CapacityLimiter(1)
        return self._thread_limiter

    # -- tools --------------------------------------------------------------------------

    def _session(self, args: Mapping[str, Any], *, required: bool = True) -> str | None:
        value = args.get("session")
        if value is None:
            if self.scope.session is not None:
                return self.scope.session
            if required:
                raise ToolArgumentError(
                    "session",
                    "is required: this server serves several sessions; list them with list_sessions.",
                )
            return None
        return self._in_scope(value, "session")

    def _in_scope(self, value: object, argument: str) -> str:
        try:
            session = check_session_id(value)
        except AgentMemoryError as exc:
            raise ToolArgumentError(argument, str(exc)) from exc
        if not self.scope.allows(session):
            raise ToolArgumentError(
                argument,
                f"session {session!r} is outside this server's scope ({self.scope.describe()}).",
            )
        return session

    def _fields(self, value: object, argument: str = "fields") -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ToolArgumentError(
                argument, f"must be a JSON object of fields, got {_json_type(value)}."
            )
        if len(value) > MAX_FIELDS:
            raise ToolArgumentError(
                argument, f"holds {len(value)} fields; the limit is {MAX_FIELDS}."
            )
        for key in value:
            if not key or len(key) > MAX_KEY_CHARS:
                raise ToolArgumentError(
                    argument,
                    f"field names must be 1 to {MAX_KEY_CHARS} characters, got {_brief(key)}.",
                )
        try:
            size = len(orjson.dumps(value))
        except (
            TypeError,
            orjson.JSONEncodeError,
        ) as exc:  # pragma: no cover - JSON arrives as JSON
            raise ToolArgumentError(argument, f"cannot be encoded as JSON ({exc}).") from exc
        if size > MAX_FIELDS_BYTES:
            raise ToolArgumentError(
                argument,
                f"is {size} bytes as JSON; the limit is {MAX_FIELDS_BYTES} (keep big data in files).",
            )
        fields = dict(value)
        for key in DEFAULT_IMAGE_KEYS:
            # Renderers and chat exports read image fields from disk: a path a client
            # names must pass the same checks as the images argument.
            if key in fields:
                refs = fields[key] if isinstance(fields[key], list) else [fields[key]]
                if len(refs) > MAX_IMAGES:
                    raise ToolArgumentError(
                        argument,
                        f"field {key!r} holds {len(refs)} images; the limit is {MAX_IMAGES}.",
                    )
                checked = [self._image(ref, argument) for ref in refs]
                fields[key] = checked if isinstance(fields[key], list) else checked[0]
        return fields

    def _images(self, args: Mapping[str, Any]) -> list[str]:
        value = args.get("images")
        if value is None:
            return []
        if not isinstance(value, list):
            raise ToolArgumentError(
                "images", f"must be a list of data URLs or paths, got {_json_type(value)}."
            )
        if len(value) > MAX_IMAGES:
            raise ToolArgumentError(
                "images", f"holds {len(value)} images; the limit is {MAX_IMAGES}."
            )
        return [self._image(ref) for ref in value]

    def _image(self, ref: object, argument: str = "images") -> str:
        if type(ref) is not str or not ref:
            raise ToolArgumentError(
                argument, f"must hold data URLs or paths (strings), got {_brief(ref)}."
            )
        if ref.startswith("data:"):
            if len(ref) > MAX_IMAGE_BYTES * 4 // 3 + 100:
                raise ToolArgumentError(
                    argument, f"a data URL is larger than the {MAX_IMAGE_BYTES} byte limit."
                )
            match = _DATA_URL.fullmatch(ref)
            if match is None:
                raise ToolArgumentError(
                    argument,
                    "a data URL must read data:image/(png|jpeg|gif|webp);base64,<base64 bytes>.",
                )
            try:
                data = base64.b64decode("".join(match.group(2).split()), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ToolArgumentError(
                    argument, f"a data URL holds invalid base64 ({exc})."
                ) from exc
            if not data:
                raise ToolArgumentError(argument, "a data URL holds no bytes.")
            return ref
        if self.image_dir is None:
            raise ToolArgumentError(
                argument,
                f"{_brief(ref)} is a path, and this server accepts no image paths; send a data URL, "
                "or start the server with an image folder (kvmemory mcp --images DIR).",
            )
        if "\x00" in ref:
            raise ToolArgumentError(argument, "a path holds a NUL character.")
        path = os.path.realpath(os.path.join(self.image_dir, ref))
        if os.path.commonpath([path, self.image_dir]) != self.image_dir:
            raise ToolArgumentError(
                argument, f"path {_brief(ref)} lies outside the image folder {self.image_dir!r}."
            )
        try:
            info = os.stat(path)
        except OSError as exc:
            raise ToolArgumentError(
                argument, f"path {_brief(ref)} cannot be read ({exc.strerror or exc})."
            ) from exc
        if not stat.S_ISREG(info.st_mode):
            raise ToolArgumentError(argument, f"path {_brief(ref)} is not a regular file.")
        if info.st_size > MAX_IMAGE_BYTES:
            raise ToolArgumentError(
                argument,
                f"file {_brief(ref)} is {info.st_size} bytes; the limit is {MAX_IMAGE_BYTES}.",
            )
        return path

    def _next_step(self, session: str) -> tuple[str, int]:
        """Return the session's step key and the step after its last one (1 for a new session)."""
        info = self.store.session_info(session)
        step_key = info.step_key if info is not None else _STEP
        last = self.store.tail(session, 1, on_unknown_class="base")
        if not last:
            return step_key, 1
        step = last[0].item.get_value(step_key)
        if type(step) is int:
            return step_key, step + 1
        return step_key, self.store.count(session) + 1

    def _append(self, session: str, item: MemoryItem, step_key: str) -> int:
        try:
            (seq,) = self.store.append(session, [item], step_key=step_key)
        except AgentMemoryError as exc:
            if isinstance(exc, StoreError):
                raise
            raise ToolArgumentError("fields", str(exc)) from exc
        return seq

    def _item(self, fields: dict[str, Any], argument: str) -> MemoryItem:
        try:
            return MemoryItem.from_mapping(fields)
        except AgentMemoryError as exc:
            raise ToolArgumentError(argument, str(exc)) from exc

    def _record_step(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        session = cast("str", self._session(args))
        if "fields" not in args:
            raise ToolArgumentError("fields", "is required: the step's fields as a JSON object.")
        fields = self._fields(args["fields"])
        images = self._images(args)
        if images:
            if "images" in fields:
                raise ToolArgumentError(
                    "images", "fields already hold 'images'; pass the images in one place."
                )
            fields["images"] = images
        step_key, step = self._next_step(session)
        if step_key in fields:
            fields[step_key] = _step_value(fields[step_key], "fields")
        else:
            fields = {step_key: step, **fields}
        seq = self._append(session, self._item(fields, "fields"), step_key)
        text = f"Recorded step {_brief(fields[step_key])} in session {session!r} (seq {seq})."
        return text, {"session": session, "seq": seq, "step": fields[step_key]}

    def _record_message(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        from agents.memory import from_messages

        session = cast("str", self._session(args))
        role = _text(args, "role")
        if role not in _ROLES:
            raise ToolArgumentError(
                "role", f"must be one of {', '.join(_ROLES)}, got {_brief(role)}."
            )
        content = cast("str", _text(args, "content", limit=MAX_FIELDS_BYTES))
        name = _text(args, "name", required=False, limit=MAX_KEY_CHARS)
        extra = self._fields(args["fields"]) if args.get("fields") is not None else {}
        clash = sorted(
            set(extra) & {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
        )
        if clash:
            raise ToolArgumentError(
                "fields", f"must not hold message keys ({', '.join(clash)}); use the arguments."
            )
        images = self._images(args)
        message: dict[str, Any] = {"role": role}
        if images:
            message["content"] = [
                {"type": "text", "text": content},
                *({"type": "image_url", "image_url": {"url": ref}} for ref in images),
            ]
        else:
            message["content"] = content
        if name is not None:
            message["name"] = name
        try:
            # Paths here were resolved inside the server's image folder by _image: read them.
            (item,) = from_messages([message], read_paths=True)
        except AgentMemoryError as exc:
            raise ToolArgumentError("content", str(exc)) from exc
        step_key, step = self._next_step(session)
        fields = {**item.to_dict(), **extra}
        fields[step_key] = _step_value(fields[step_key], "fields") if step_key in fields else step
        item = self._item(fields, "fields")
        seq = self._append(session, item, step_key)
        text = f"Recorded a {role} message as step {item[step_key]!r} in session {session!r} (seq {seq})."
        return text, {"session": session, "seq": seq, "step": item[step_key]}

    def _window(
        self, session: str, max_tokens: int, max_items: int, keys: list[str] | None
    ) -> tuple[list[dict[str, Any]], int, int]:
        records = self.store.tail(session, max_items, on_unknown_class="base")
        seq_of = {id(record.item): record.seq for record in records}
        window = Window(max_tokens=max_tokens, max_items=max_items, counter=EstimateCounter())
        with warnings.catch_warnings():
            # A key no kept item holds is not an error for a client: it reads fewer fields.
            warnings.simplefilter("ignore", UnmatchedKeyWarning)
            result = select_window([r.item for r in records], window, keys=keys)
        entries = []
        for item, fields in zip(result.items, result.records, strict=True):
            plain = orjson.loads(render_json([fields]))[0]
            entries.append({"session": session, "seq": seq_of[id(item)], "fields": plain})
        return entries, result.tokens, len(records) - len(result.items)

    def _recent_history(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        session = cast("str", self._session(args))
        max_tokens = _int(args, "max_tokens", 2000, 1, MAX_TOKENS)
        max_items = _int(args, "max_items", 50, 1, MAX_ITEMS)
        keys = _keys(args)
        entries, tokens, dropped = self._window(session, max_tokens, max_items, keys)
        text = _render(entries, empty=f"Session {session!r} holds no items yet.")
        return text, {"session": session, "items": entries, "tokens": tokens, "dropped": dropped}

    def _mode(self, args: Mapping[str, Any]) -> str:
        mode = args.get("mode", "keyword")
        if mode not in _MODES:
            raise ToolArgumentError(
                "mode", f"must be 'keyword', 'semantic' or 'hybrid', got {_brief(mode)}."
            )
        if mode != "keyword" and self.embedder is None:
            raise ToolArgumentError(
                "mode",
                f"{mode} search needs an embedder, and this server has none; use mode 'keyword' "
                "(or start the server with --embedder).",
            )
        return cast("str", mode)

    def _hits(
        self, session: str, query: str, k: int, mode: str, keys: list[str] | None
    ) -> list[dict[str, Any]]:
        try:
            hits = self.store.search(
                session,
                query,
                k,
                keys=keys,
                on_unknown_class="base",
                mode=mode,  # type: ignore[arg-type]  # checked against the three modes by _mode
                embedder=self.embedder,
            )
        except EmbeddingError as exc:
            raise ToolArgumentError("mode", str(exc)) from exc
        except AgentMemoryError as exc:
            if isinstance(exc, StoreError):
                raise
            raise ToolArgumentError("query", str(exc)) from exc
        return [
            _entry(session, StoredRecord(hit.seq, hit.item), score=round(hit.score, 6))
            for hit in hits
        ]

    def _search(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        session = self._session(args, required=False)
        query = cast("str", _text(args, "query"))
        k = _int(args, "k", 5, 1, MAX_K)
        mode = self._mode(args)
        keys = _keys(args)
        sessions = [session] if session is not None else self._sessions(None)
        found: list[dict[str, Any]] = []
        for name in sessions:
            found += self._hits(name, query, k, mode, keys)
        found.sort(key=lambda entry: -entry["score"])
        found = found[:k]
        text = _render(found, empty=f"No item matches {query!r}.")
        return text, {"query": query, "mode": mode, "hits": found}

    def _recall(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        session = cast("str", self._session(args))
        query = cast("str", _text(args, "query"))
        k = _int(args, "k", 3, 1, MAX_K)
        recent = _int(args, "recent", 5, 0, MAX_ITEMS)
        mode = self._mode(args)
        chosen = {entry["seq"]: entry for entry in self._hits(session, query, k, mode, None)}
        for record in self.store.tail(session, recent, on_unknown_class="base"):
            chosen.setdefault(record.seq, _entry(session, record))
        entries = [chosen[seq] for seq in sorted(chosen)]
        text = _render(entries, empty=f"Session {session!r} holds no items yet.")
        return text, {"session": session, "query": query, "items": entries}

    def _sessions(self, prefix: str | None) -> list[str]:
        names = [
            name
            for name in self.store.sessions()
            if self.scope.allows(name) and (prefix is None or name.startswith(prefix))
        ]
        return names[:MAX_SESSIONS]

    def _list_sessions(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        prefix = _text(args, "prefix", required=False, limit=128)
        listed = [
            {"session": name, "items": self.store.count(name)} for name in self._sessions(prefix)
        ]
        lines = [f"{entry['session']}: {entry['items']} items" for entry in listed]
        text = "\n".join(lines) if lines else f"No sessions yet ({self.scope.describe()})."
        return text, {"sessions": listed}

    def _show_steps(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        session = cast("str", self._session(args))
        if args.get("steps") is not None:
            if args.get("from_step") is not None or args.get("to_step") is not None:
                raise ToolArgumentError(
                    "steps", "pass either steps or from_step and to_step, not both."
                )
            listed = args["steps"]
            if not isinstance(listed, list) or not listed or len(listed) > MAX_ITEMS:
                raise ToolArgumentError(
                    "steps", f"must be a list of 1 to {MAX_ITEMS} steps, got {_brief(listed)}."
                )
            steps: list[int | str] = [_step_value(step, "steps") for step in listed]
        else:
            start = _int(args, "from_step", None, -(2**53), 2**53)
            end = _int(args, "to_step", start, -(2**53), 2**53)
            if end < start:
                raise ToolArgumentError(
                    "to_step", f"must not be below from_step ({start}), got {end}."
                )
            if end - start >= MAX_ITEMS:
                raise ToolArgumentError(
                    "to_step", f"spans {end - start + 1} steps; show at most {MAX_ITEMS} at a time."
                )
            steps = list(range(start, end + 1))
        records = self.store.records(session, steps=steps, on_unknown_class="base")[:MAX_ITEMS]
        entries = [_entry(session, record) for record in records]
        text = _render(entries, empty=f"Session {session!r} has no item at those steps.")
        return text, {"session": session, "items": entries}

    def _delete_step(self, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        session = cast("str", self._session(args))
        if "step" not in args:
            raise ToolArgumentError("step", "is required: the step whose items to delete.")
        step = _step_value(args["step"], "step")
        gone = self.store.delete_steps(session, [step])
        if not gone:
            raise ToolArgumentError(
                "step", f"session {session!r} has no item at step {step!r}; nothing was deleted."
            )
        return f"Deleted {gone} item(s) of step {step!r} from session {session!r}.", {
            "session": session,
            "step": step,
            "deleted": gone,
        }

    # -- resources ------------------------------------------------------------------------

    def _uri_session(self, uri: str) -> tuple[str, int | None]:
        """Return the session a resource URI names and, for a ``last`` URI, how many items."""
        match = _LAST_URI.fullmatch(uri)
        if match is not None:
            count = DEFAULT_LAST if match.group(2) is None else int(match.group(2))
            if not 1 <= count <= MAX_ITEMS:
                raise ToolArgumentError("uri", f"asks for {count} items; ask for 1 to {MAX_ITEMS}.")
            return self._in_scope(match.group(1), "uri"), count
        match = _SESSION_URI.fullmatch(uri)
        if match is None:
            raise ToolArgumentError(
                "uri",
                f"{_brief(uri)} is not a kvmemory resource; use kvmemory://session/ID or kvmemory://session/ID/last.",
            )
        return self._in_scope(match.group(1), "uri"), None

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        import mcp_types as types

        sessions = await self._in_thread(lambda _: self._sessions(None), {})
        resources = []
        for name in sessions:
            resources.append(
                types.Resource(
                    name=name,
                    uri=f"{_URI_PREFIX}{name}",
                    description=f"Counts of session {name!r}: items, steps, fields.",
                    mime_type="text/markdown",
                )
            )
            resources.append(
                types.Resource(
                    name=f"{name} (last steps)",
                    uri=f"{_URI_PREFIX}{name}/last",
                    description=f"The last {DEFAULT_LAST} items of session {name!r}.",
                    mime_type="text/markdown",
                )
            )
        return types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        import mcp_types as types

        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="session",
                    uri_template=f"{_URI_PREFIX}{{session}}",
                    description="Counts of a session: items, steps, fields.",
                    mime_type="text/markdown",
                ),
                types.ResourceTemplate(
                    name="last steps",
                    uri_template=f"{_URI_PREFIX}{{session}}/last/{{n}}",
                    description=f"The last n (1 to {MAX_ITEMS}) items of a session.",
                    mime_type="text/markdown",
                ),
            ]
        )

    def _resource_text(self, uri: str) -> str:
        session, count = self._uri_session(uri)
        if count is not None:
            records = self.store.tail(session, count, on_unknown_class="base")
            entries = [_entry(session, record) for record in records]
            return _render(entries, empty=f"Session {session!r} holds no items yet.")
        summary = self.store.summary(session)
        lines = [
            f"# Session {session}",
            f"items: {summary.items}",
            f"steps: {summary.steps}",
            f"first step: {_brief(summary.first_step)}",
            f"last step: {_brief(summary.last_step)}",
            "fields: " + ", ".join(f"{key} ({n})" for key, n in summary.fields.items()),
        ]
        return "\n".join(lines)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        import mcp_types as types

        uri = str(params.uri)
        text = await self._guarded(self._resource_text, uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)]
        )

    async def _guarded(self, run: Callable[[Any], str], value: Any) -> str:
        """Run ``run(value)`` in the worker thread, turning kvmemory's errors into MCP errors."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        try:
            return cast("str", await self._in_thread(run, value))
        except ToolArgumentError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc), {"argument": exc.argument}) from exc
        except AgentMemoryError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc

    async def _subscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        import mcp_types as types

        uri = str(params.uri)
        await self._guarded(lambda u: str(self._uri_session(u)), uri)
        await self._baseline([uri])
        key = id(ctx.session)
        entry = self._subscribers.setdefault(key, (ctx.session, set()))
        entry[1].add(uri)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any], params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        import mcp_types as types

        entry = self._subscribers.get(id(ctx.session))
        if entry is not None:
            entry[1].discard(str(params.uri))
        return types.EmptyResult()

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: mcp_types.SubscriptionsListenRequestParams
    ) -> mcp_types.SubscriptionsListenResult:
        """Serve a 2026 ``subscriptions/listen`` stream, noting its resources so the poller watches them."""
        uris = [str(uri) for uri in params.notifications.resource_subscriptions or ()]
        for uri in uris:
            self._watched[uri] = self._watched.get(uri, 0) + 1
        try:
            await self._baseline(uris)
            return await self._listener(ctx, params)
        finally:
            for uri in uris:
                self._watched[uri] -= 1
                if not self._watched[uri]:
                    del self._watched[uri]

    def _watched_uris(self) -> set[str]:
        uris = set(self._watched)
        for _, subscribed in self._subscribers.values():
            uris |= subscribed
        return uris

    async def _baseline(self, uris: Sequence[str]) -> None:
        """Note now how the sessions ``uris`` name stand, so a write right after a subscription is seen.

        Taken before the subscription is acknowledged: a mark the poller took
        later could already hold the client's next write, which then would
        never count as a change.
        """
        names = {name for name in map(self._uri_names, uris) if name is not None}
        fresh = names - set(self._marks)
        if fresh:
            with contextlib.suppress(AgentMemoryError):  # the poller takes the mark next time
                _, marks = await self._in_thread(self._snapshot, fresh)
                for name in fresh:
                    self._marks.setdefault(name, marks.get(name, (0, 0)))

    def _snapshot(self, sessions: set[str]) -> tuple[set[str], dict[str, tuple[int, int]]]:
        """Return the sessions in scope, and for the watched ones their count and last seq.

        A write changes one or the other: an append the last seq, a delete the count.
        """
        names = set(self._sessions(None))
        marks = {}
        for name in sorted(sessions & names):
            last = self.store.tail(name, 1, on_unknown_class="base")
            marks[name] = (self.store.count(name), last[0].seq if last else 0)
        return names, marks

    async def _poll(self) -> None:
        import anyio
        from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated

        listed: set[str] | None = None
        while True:
            uris = self._watched_uris()
            watched = {name for name in map(self._uri_names, uris) if name is not None}
            try:
                names, now = await self._in_thread(self._snapshot, watched)
            except AgentMemoryError:
                # The store is briefly unreachable (a restarting server): try again next time.
                await anyio.sleep(self.poll_seconds)
                continue
            if listed is not None and names != listed:
                await self._bus.publish(ResourcesListChanged())
            listed = names
            marks = self._marks
            changed = {
                name for name in watched if name in marks and now.get(name, (0, 0)) != marks[name]
            }
            for name in watched:
                marks[name] = now.get(name, (0, 0))
            # Forget sessions nobody watches any more; keep the marks subscriptions took meanwhile.
            current = {name for name in map(self._uri_names, self._watched_uris()) if name}
            for name in set(marks) - current:
                del marks[name]
            for uri in sorted(uris):
                if self._uri_names(uri) in changed:
                    await self._bus.publish(ResourceUpdated(uri))
            for name in sorted(changed):
                await self._notify_subscribers(name)
            await anyio.sleep(self.poll_seconds)

    async def _notify_subscribers(self, session: str) -> None:
        for key, (peer, uris) in list(self._subscribers.items()):
            for uri in sorted(uris):
                if self._uri_names(uri) == session:
                    try:
                        await peer.send_resource_updated(uri)
                    except Exception:  # a client that went away must not stop the poller
                        self._subscribers.pop(key, None)
                        break

    def _uri_names(self, uri: str) -> str | None:
        """Return the session a resource URI names, or ``None`` if it names none in scope."""
        match = _LAST_URI.fullmatch(uri) or _SESSION_URI.fullmatch(uri)
        if match is None:
            return None
        try:
            name = check_session_id(match.group(1))
        except AgentMemoryError:
            return None
        # A listener naming a session outside the scope hears nothing of it.
        return name if self.scope.allows(name) else None

    # -- prompts --------------------------------------------------------------------------

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListPromptsResult:
        import mcp_types as types

        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name="history_so_far",
                    description="The history of a session so far (its newest items under a token budget), as one message.",
                    arguments=[
                        types.PromptArgument(
                            name="session",
                            description="The session id.",
                            required=self.scope.session is None,
                        ),
                        types.PromptArgument(
                            name="max_tokens",
                            description="The token budget (default 2000).",
                            required=False,
                        ),
                    ],
                )
            ]
        )

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        if params.name != "history_so_far":
            msg = f"Unknown prompt {params.name!r}; the prompts are: history_so_far."
            raise MCPError(types.INVALID_PARAMS, msg, {"argument": "name"})
        args = dict(params.arguments or {})

        def history(args: dict[str, Any]) -> str:
            _no_unknown(args, {"properties": {"session": 0, "max_tokens": 0}}, "history_so_far")
            session = cast("str", self._session(args))
            budget = args.get("max_tokens", "2000")
            try:
                max_tokens = int(budget)
            except (TypeError, ValueError):
                raise ToolArgumentError(
                    "max_tokens", f"must be a whole number, got {_brief(budget)}."
                ) from None
            _int({"max_tokens": max_tokens}, "max_tokens", None, 1, MAX_TOKENS)
            entries, _, dropped = self._window(session, max_tokens, MAX_ITEMS, None)
            older = f" ({dropped} older items left out)" if dropped else ""
            body = _render(entries, empty="(no items yet)")
            return f"The history of session {session} so far{older}:\n\n{body}"

        text = await self._guarded(history, args)
        return types.GetPromptResult(
            description="The history so far",
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )


def _error_result(message: str, argument: str | None) -> mcp_types.CallToolResult:
    import mcp_types as types

    error: dict[str, Any] = {"message": message}
    if argument is not None:
        error["argument"] = argument
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)],
        structured_content={"error": error},
        is_error=True,
    )


def _argument_of(exc: AgentMemoryError) -> str | None:
    from agents.memory import InvalidQueryError, InvalidSessionIdError

    if isinstance(exc, InvalidSessionIdError):
        return "session"
    if isinstance(exc, InvalidQueryError):
        return "query"
    return None


def _check_bind(host: str, token: str | None) -> None:
    if token is not None and (type(token) is not str or len(token) < 16):
        msg = "The HTTP token must be a string of at least 16 characters; make one with: python -c 'import secrets; print(secrets.token_urlsafe())'."
        raise InvalidArgumentError(msg)
    if host not in LOOPBACK and token is None:
        msg = (
            f"Serving MCP on {host!r} lets other machines reach the store; set a token "
            "(KVMEMORY_MCP_TOKEN) to bind anywhere but 127.0.0.1."
        )
        raise InvalidArgumentError(msg)


class _TokenGate:
    """An ASGI wrapper that lets only requests bearing the token through."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # nothing is served there
            return
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", ()):
                if name.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self._expected):
                body = b'{"error":"missing or wrong token; send Authorization: Bearer TOKEN"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


def _sdk() -> Any:
    try:
        import mcp.server.lowlevel
    except ImportError as exc:
        raise missing_dependency("mcp", "mcp") from exc
    return mcp.server.lowlevel
