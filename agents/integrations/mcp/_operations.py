"""What each tool does: checked arguments in, one store call, structured content out.

Every method takes a tool's arguments as a client sent them, checks all of
them before it writes, and returns the tool's structured content (see
``_schemas``). A bad argument raises
:class:`~agents.integrations.mcp.ToolArgumentError` and leaves the store as it was.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from agents.integrations.mcp._checks import (
    brief,
    check_fields,
    check_integer,
    check_keys,
    check_step,
    check_text,
)
from agents.integrations.mcp._images import ImagePolicy
from agents.integrations.mcp._limits import (
    MAX_FIELDS_BYTES,
    MAX_ITEMS,
    MAX_K,
    MAX_KEY_CHARS,
    MAX_SESSIONS,
    MAX_STEP,
    MAX_TOKENS,
)
from agents.integrations.mcp._render import entry, plain
from agents.integrations.mcp._schemas import MODES, ROLES
from agents.integrations.mcp._scope import Scope, ToolArgumentError
from agents.memory import (
    AgentMemoryError,
    EmbeddingError,
    MemoryItem,
    StoreError,
    UnmatchedKeyWarning,
)
from agents.memory.prompt import EstimateCounter, Window, select_window
from agents.memory.stores import Store, StoredRecord, check_session_id
from agents.service import SessionService

if TYPE_CHECKING:
    from agents.memory.search import Embedder

__all__ = ["Operations"]

_STEP: Final = "step"
_MESSAGE_KEYS: Final = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
)


class Operations:
    """The tools' work over one store and scope.

    Args:
        store: The open store.
        scope: The sessions the tools may touch.
        images: The policy for images clients attach.
        embedder: The model semantic and hybrid search use, if any.
    """

    def __init__(
        self, store: Store, scope: Scope, images: ImagePolicy, embedder: Embedder | None
    ) -> None:
        self.store = store
        self.scope = scope
        self.images = images
        self.embedder = embedder
        self.service = SessionService(store, allows=scope.allows, embedder=embedder)

    # -- sessions in scope --------------------------------------------------------------

    def session(self, args: Mapping[str, Any], *, required: bool = True) -> str | None:
        """Return the ``session`` argument checked against the scope (the scope's one session if left out)."""
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
        return self.in_scope(value, "session")

    def in_scope(self, value: object, argument: str) -> str:
        """Return ``value`` as a session id inside the scope, or raise naming ``argument``."""
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

    # -- recording ------------------------------------------------------------------------

    def record_step(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Record one step (``fields``, ``images``) as the session's next step."""
        session = cast("str", self.session(args))
        if "fields" not in args:
            raise ToolArgumentError("fields", "is required: the step's fields as a JSON object.")
        fields = self._fields(args["fields"])
        images = self.images.check_list(args.get("images"))
        if images:
            if "images" in fields:
                raise ToolArgumentError(
                    "images", "fields already hold 'images'; pass the images in one place."
                )
            fields["images"] = images
        return self._append(session, fields)

    def record_message(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Record one chat message (``role``, ``content``, ``name``, ``images``, extra ``fields``)."""
        from agents.memory import from_messages

        session = cast("str", self.session(args))
        role = check_text(args, "role")
        if role not in ROLES:
            raise ToolArgumentError(
                "role", f"must be one of {', '.join(ROLES)}, got {brief(role)}."
            )
        content = cast("str", check_text(args, "content", limit=MAX_FIELDS_BYTES))
        name = check_text(args, "name", required=False, limit=MAX_KEY_CHARS)
        extra = self._fields(args["fields"]) if args.get("fields") is not None else {}
        clash = sorted(set(extra) & _MESSAGE_KEYS)
        if clash:
            raise ToolArgumentError(
                "fields", f"must not hold message keys ({', '.join(clash)}); use the arguments."
            )
        images = self.images.check_list(args.get("images"))
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
            # Image paths here were resolved inside the server's image folder: read them.
            (item,) = from_messages([message], read_paths=True)
        except AgentMemoryError as exc:
            raise ToolArgumentError("content", str(exc)) from exc
        return self._append(session, {**item.to_dict(), **extra})

    def _fields(self, value: object) -> dict[str, Any]:
        fields = check_fields(value, "fields")
        self.images.check_fields(fields, "fields")
        return fields

    def _append(self, session: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Append ``fields`` as one item, numbered in the write transaction unless it holds a step."""
        info = self.service.info(session)
        step_key = info.step_key if info is not None else _STEP
        if step_key in fields:
            fields[step_key] = check_step(fields[step_key], "fields")
        try:
            record = self.service.record(session, MemoryItem.from_mapping(fields))
        except AgentMemoryError as exc:
            if isinstance(exc, StoreError):
                raise
            raise ToolArgumentError("fields", str(exc)) from exc
        return {"session": session, "seq": record.seq, "step": record.item[step_key]}

    # -- reading --------------------------------------------------------------------------

    def window(
        self, session: str, max_tokens: int, max_items: int, keys: list[str] | None
    ) -> tuple[list[dict[str, Any]], int, int]:
        """Return the newest items that fit the budget (oldest first), their tokens, and how many were left out."""
        records = self.store.tail(session, max_items, on_unknown_class="base")
        seq_of = {id(record.item): record.seq for record in records}
        window = Window(max_tokens=max_tokens, max_items=max_items, counter=EstimateCounter())
        with warnings.catch_warnings():
            # A key no kept item holds is not an error for a client: it reads fewer fields.
            warnings.simplefilter("ignore", UnmatchedKeyWarning)
            result = select_window([r.item for r in records], window, keys=keys)
        entries = [
            {"session": session, "seq": seq_of[id(item)], "fields": plain(fields)}
            for item, fields in zip(result.items, result.records, strict=True)
        ]
        return entries, result.tokens, len(records) - len(result.items)

    def recent_history(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return the newest items of a session under ``max_tokens`` and ``max_items``."""
        session = cast("str", self.session(args))
        max_tokens = check_integer(args, "max_tokens", 2000, 1, MAX_TOKENS)
        max_items = check_integer(args, "max_items", 50, 1, MAX_ITEMS)
        keys = check_keys(args)
        entries, tokens, dropped = self.window(session, max_tokens, max_items, keys)
        return {"session": session, "items": entries, "tokens": tokens, "dropped": dropped}

    def show_steps(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return the items of steps ``from_step`` to ``to_step``, or of the listed ``steps``."""
        session = cast("str", self.session(args))
        if args.get("steps") is not None:
            if args.get("from_step") is not None or args.get("to_step") is not None:
                raise ToolArgumentError(
                    "steps", "pass either steps or from_step and to_step, not both."
                )
            listed = args["steps"]
            if not isinstance(listed, list) or not listed or len(listed) > MAX_ITEMS:
                raise ToolArgumentError(
                    "steps", f"must be a list of 1 to {MAX_ITEMS} steps, got {brief(listed)}."
                )
            steps: list[int | str] = [check_step(step, "steps") for step in listed]
        else:
            start = check_integer(args, "from_step", None, -MAX_STEP, MAX_STEP)
            end = check_integer(args, "to_step", start, -MAX_STEP, MAX_STEP)
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
        return {"session": session, "items": [entry(session, record) for record in records]}

    def delete_step(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Delete every item of ``step``; a step with no item is an error."""
        session = cast("str", self.session(args))
        if "step" not in args:
            raise ToolArgumentError("step", "is required: the step whose items to delete.")
        step = check_step(args["step"], "step")
        gone = self.store.delete_steps(session, [step])
        if not gone:
            raise ToolArgumentError(
                "step", f"session {session!r} has no item at step {step!r}; nothing was deleted."
            )
        return {"session": session, "step": step, "deleted": gone}

    # -- search ---------------------------------------------------------------------------

    def _mode(self, args: Mapping[str, Any]) -> str:
        mode = args.get("mode", "keyword")
        if mode not in MODES:
            raise ToolArgumentError(
                "mode", f"must be 'keyword', 'semantic' or 'hybrid', got {brief(mode)}."
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
        with self._search_errors():
            hits = self.service.search(session, query, k, mode=mode, keys=keys)
        return [
            entry(session, StoredRecord(hit.seq, hit.item), score=round(hit.score, 6))
            for hit in hits
        ]

    @contextlib.contextmanager
    def _search_errors(self) -> Iterator[None]:
        """Report a search's argument errors as the tool argument they come from."""
        try:
            yield
        except EmbeddingError as exc:
            raise ToolArgumentError("mode", str(exc)) from exc
        except AgentMemoryError as exc:
            if isinstance(exc, StoreError):
                raise
            raise ToolArgumentError("query", str(exc)) from exc

    def search(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return the ``k`` best hits for ``query`` in one session, or across every session in scope in one ranking."""
        session = self.session(args, required=False)
        query = cast("str", check_text(args, "query"))
        k = check_integer(args, "k", 5, 1, MAX_K)
        mode = self._mode(args)
        keys = check_keys(args)
        if session is not None:
            return {"query": query, "mode": mode, "hits": self._hits(session, query, k, mode, keys)}
        # One ranking over the sessions in scope, with their shared statistics: the
        # scores of different sessions compare, as one session's do.
        with self._search_errors():
            many = self.service.search_sessions(query, k, mode=mode, keys=keys)
        found = [
            entry(hit.session_id, StoredRecord(hit.seq, hit.item), score=round(hit.score, 6))
            for hit in many
        ]
        return {"query": query, "mode": mode, "hits": found}

    def recall(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return a session's hits for ``query`` merged with its ``recent`` newest items, in session order."""
        session = cast("str", self.session(args))
        query = cast("str", check_text(args, "query"))
        k = check_integer(args, "k", 3, 1, MAX_K)
        recent = check_integer(args, "recent", 5, 0, MAX_ITEMS)
        mode = self._mode(args)
        chosen = {one["seq"]: one for one in self._hits(session, query, k, mode, None)}
        for record in self.store.tail(session, recent, on_unknown_class="base"):
            chosen.setdefault(record.seq, entry(session, record))
        return {
            "session": session,
            "query": query,
            "items": [chosen[seq] for seq in sorted(chosen)],
        }

    # -- listing sessions -------------------------------------------------------------------

    def sessions(self, prefix: str | None) -> list[str]:
        """Return the ids of the sessions in scope (starting with ``prefix``), at most 1000."""
        return self.service.sessions(prefix)[:MAX_SESSIONS]

    def list_sessions(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Return the sessions in scope with their item counts."""
        prefix = check_text(args, "prefix", required=False, limit=128)
        listed = [
            {"session": name, "items": self.service.count(name)[0]}
            for name in self.sessions(prefix)
        ]
        return {"sessions": listed}
