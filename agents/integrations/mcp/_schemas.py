"""The tools a server offers: names, descriptions for a model, input and output JSON schemas.

Every tool answers with structured content that validates against its
``outputSchema`` (and a text block holding the same JSON); an error answers
``isError: true`` with ``{"error": {"message": ..., "argument": ...}}`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from agents.integrations.mcp._limits import (
    MAX_IMAGES,
    MAX_ITEMS,
    MAX_K,
    MAX_QUERY_CHARS,
    MAX_TOKENS,
)

__all__ = ["MODES", "ROLES", "ToolSpec", "tool_specs"]

ROLES: Final = ("system", "user", "assistant", "tool")
"""The roles ``record_message`` takes."""
MODES: Final = ("keyword", "semantic", "hybrid")
"""The search modes; the last two need an embedder."""


@attrs.frozen
class ToolSpec:
    """One tool as ``tools/list`` shows it.

    Args:
        name: The tool's name.
        description: What it does, written for a model.
        input_schema: The JSON schema of its arguments (closed: no other argument is taken).
        output_schema: The JSON schema its structured content validates against.
        writes: Whether it changes the store.
        destructive: Whether it removes data.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    writes: bool = attrs.field(default=False, kw_only=True)
    destructive: bool = attrs.field(default=False, kw_only=True)


def _object(
    properties: dict[str, Any], required: Sequence[str] = (), *, closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if closed:
        schema["additionalProperties"] = False
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
_STEP: Final = {"type": ["integer", "string"]}

# -- what the tools answer ---------------------------------------------------------------

_FIELDS_OUT: Final = {
    "type": "object",
    "description": (
        "The item's fields as JSON; a value JSON cannot hold (bytes, a date, NaN "
        'recorded in Python) is an object tagged {"$kv": TYPE, "v": ...}.'
    ),
}


def _entry(*, scored: bool | None) -> dict[str, Any]:
    """The schema of one item: scored ``True`` always has a score, ``None`` may have one."""
    properties: dict[str, Any] = {
        "session": {"type": "string"},
        "seq": {"type": "integer", "description": "The item's position in the store."},
        "fields": _FIELDS_OUT,
    }
    required = ["session", "seq", "fields"]
    if scored is not False:
        properties["score"] = {
            "type": "number",
            "description": "How well it matched (search hits).",
        }
        if scored:
            required.append("score")
    return _object(properties, required)


def _items(*, scored: bool | None = False) -> dict[str, Any]:
    return {"type": "array", "items": _entry(scored=scored)}


_RECORDED: Final = _object(
    {
        "session": {"type": "string"},
        "seq": {"type": "integer"},
        "step": {**_STEP, "description": "The step the item was recorded as."},
    },
    ["session", "seq", "step"],
)
_HISTORY: Final = _object(
    {
        "session": {"type": "string"},
        "items": _items(),
        "tokens": {"type": "integer", "description": "The tokens the items take (estimated)."},
        "dropped": {"type": "integer", "description": "Older items left out by the budget."},
    },
    ["session", "items", "tokens", "dropped"],
)
_HITS: Final = _object(
    {
        "query": {"type": "string"},
        "mode": {"type": "string", "enum": list(MODES)},
        "hits": _items(scored=True),
    },
    ["query", "mode", "hits"],
)
_RECALLED: Final = _object(
    {"session": {"type": "string"}, "query": {"type": "string"}, "items": _items(scored=None)},
    ["session", "query", "items"],
)
_SESSIONS: Final = _object(
    {
        "sessions": {
            "type": "array",
            "items": _object(
                {"session": {"type": "string"}, "items": {"type": "integer"}},
                ["session", "items"],
            ),
        }
    },
    ["sessions"],
)
_SHOWN: Final = _object({"session": {"type": "string"}, "items": _items()}, ["session", "items"])
_DELETED: Final = _object(
    {"session": {"type": "string"}, "step": _STEP, "deleted": {"type": "integer"}},
    ["session", "step", "deleted"],
)


def _writers(session_required: tuple[str, ...]) -> list[ToolSpec]:
    return [
        ToolSpec(
            "record_step",
            "Save one step of your work to memory: free-form fields such as "
            "thought, action, observation, result. A 'step' number is assigned "
            "(last step + 1) unless fields hold one. Returns the step and its seq.",
            _object(
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
            _RECORDED,
            writes=True,
        ),
        ToolSpec(
            "record_message",
            "Save one chat message to memory (role and content), for a "
            "conversation you want to remember across runs.",
            _object(
                {
                    "session": _SESSION_ARG,
                    "role": {"type": "string", "enum": list(ROLES)},
                    "content": {"type": "string", "description": "The message text."},
                    "name": {"type": "string", "description": "The speaker's name, if any."},
                    "images": _IMAGES_ARG,
                    "fields": {
                        "type": "object",
                        "description": "Extra fields kept with the message (tags, ids); never sent as message text.",
                    },
                },
                [*session_required, "role", "content"],
            ),
            _RECORDED,
            writes=True,
        ),
    ]


def _readers(session_required: tuple[str, ...], modes: list[str]) -> list[ToolSpec]:
    return [
        ToolSpec(
            "recent_history",
            "Read the newest items of a session that fit a token budget, oldest "
            "first: what happened so far, ready to put in your context.",
            _object(
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
            _HISTORY,
        ),
        ToolSpec(
            "search",
            "Find the items that best match a query, best first. Keyword search "
            "ranks by BM25; semantic and hybrid search (when offered) also match meaning. "
            "Without a session, every session you may read is searched.",
            _object(
                {
                    "session": _SESSION_ARG,
                    "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
                    "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 5},
                    "mode": {"type": "string", "enum": modes, "default": "keyword"},
                    "keys": _KEYS_ARG,
                },
                ["query"],
            ),
            _HITS,
        ),
        ToolSpec(
            "recall",
            "Search a session and add its newest items: the earlier steps that "
            "match the query plus the latest ones, in session order, each once.",
            _object(
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
            _RECALLED,
        ),
        ToolSpec(
            "list_sessions",
            "List the sessions you may read, with how many items each holds.",
            _object(
                {
                    "prefix": {
                        "type": "string",
                        "description": "Only sessions whose ids start with this.",
                        "maxLength": 128,
                    }
                }
            ),
            _SESSIONS,
        ),
        ToolSpec(
            "show_steps",
            "Show the items of a range of steps (from_step to to_step, both included), "
            "or of the listed steps.",
            _object(
                {
                    "session": _SESSION_ARG,
                    "from_step": {"type": "integer"},
                    "to_step": {"type": "integer"},
                    "steps": {"type": "array", "items": _STEP, "maxItems": MAX_ITEMS},
                },
                session_required,
            ),
            _SHOWN,
        ),
    ]


def tool_specs(*, one_session: bool, read_only: bool, semantic: bool) -> list[ToolSpec]:
    """Return the tools a server offers, in the order ``tools/list`` shows them.

    Args:
        one_session: The server serves one session, so ``session`` may be left out.
        read_only: Offer no tool that writes.
        semantic: The server has an embedder, so semantic and hybrid search are offered.
    """
    session_required: tuple[str, ...] = () if one_session else ("session",)
    modes = list(MODES) if semantic else ["keyword"]
    tools = [] if read_only else _writers(session_required)
    tools += _readers(session_required, modes)
    if not read_only:
        tools.append(
            ToolSpec(
                "delete_step",
                "Delete every item of one step from a session (for a wrong or secret entry).",
                _object({"session": _SESSION_ARG, "step": _STEP}, [*session_required, "step"]),
                _DELETED,
                writes=True,
                destructive=True,
            )
        )
    return tools
