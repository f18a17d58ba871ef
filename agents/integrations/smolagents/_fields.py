"""smolagents steps as item fields: encoding each field into values the codec writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from agents.integrations.smolagents._images import encode_image, encode_png, is_image
from agents.memory import MemoryItem
from agents.memory.exceptions import missing_dependency

KINDS: Final[tuple[str, ...]] = ("system_prompt", "task", "planning", "action")
"""The ``kind`` of each item the recorder writes."""

IMAGE_LISTS: Final = ("task_images", "observations_images")
"""Step fields that hold a list of images."""
MESSAGE_LISTS: Final = ("model_input_messages",)
"""Step fields that hold a list of chat messages."""
MESSAGES: Final = ("model_output_message",)
"""Step fields that hold one chat message."""


def load_smolagents() -> Any:
    """Import and return smolagents with the modules the integration uses.

    Raises:
        MissingDependencyError: naming the extra ``kvmemory[smolagents]``.
    """
    try:
        import smolagents.memory
        import smolagents.models
        import smolagents.monitoring
        import smolagents.utils
    except ImportError as exc:
        raise missing_dependency("smolagents", "smolagents") from exc
    return smolagents


def _encode_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {**part, "image": encode_image(part["image"])}
        if isinstance(part, Mapping) and is_image(part.get("image"))
        else part
        for part in content
    ]


def _encode_tool_call(call: Any) -> dict[str, Any]:
    function = call.function
    out: dict[str, Any] = {
        "id": call.id,
        "type": call.type,
        "function": {"name": function.name, "arguments": function.arguments},
    }
    if function.description is not None:
        out["function"]["description"] = function.description
    return out


def _encode_usage(usage: Any) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


def _encode_raw(raw: Any) -> Any:
    dump = getattr(raw, "model_dump", None)  # an API client's response object
    return dump() if callable(dump) else raw


def _encode_message(message: Any) -> dict[str, Any]:
    role = message.role
    return {
        "role": getattr(role, "value", role),
        "content": _encode_content(message.content),
        "tool_calls": None
        if message.tool_calls is None
        else [_encode_tool_call(call) for call in message.tool_calls],
        "raw": _encode_raw(message.raw),
        "token_usage": _encode_usage(message.token_usage),
    }


def _encode_field(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in IMAGE_LISTS:
        return [encode_image(image) for image in value]
    if name in MESSAGE_LISTS:
        return [_encode_message(message) for message in value]
    if name in MESSAGES:
        return _encode_message(value)
    if name == "tool_calls":
        # smolagents' own shape (ToolCall.dict()), with the arguments as they were.
        return [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in value
        ]
    if name == "error":
        return {"type": type(value).__name__, "message": str(value.message)}
    if name == "timing":
        return {"start_time": value.start_time, "end_time": value.end_time}
    if name == "token_usage":
        return _encode_usage(value)
    if isinstance(value, str):
        return str(value)  # smolagents' AgentText and other str subclasses, as text
    if is_image(value):
        return encode_png(value)  # an image result (action_output): PNG bytes, read back as bytes
    return value


def kind_of(step: Any, sm: Any) -> str | None:
    """Return the ``kind`` a step is recorded as, or ``None`` for a step that is not recorded."""
    memory = sm.memory
    if isinstance(step, memory.ActionStep):
        return "action"
    if isinstance(step, memory.PlanningStep):
        return "planning"
    if isinstance(step, memory.TaskStep):
        return "task"
    return None  # FinalAnswerStep and others are not part of agent.memory.steps


def type_name(value: Any) -> str:
    """Return a value's type as ``module.Class`` (builtins by their bare name), to name what was left out."""
    cls = type(value)
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


_LEAVES: Final = frozenset({str, int, float, bool, bytes, type(None)})


def _plain(value: Any) -> bool:
    """Return whether ``value`` is made of JSON-like containers and scalars only (the codec surely writes it)."""
    cls = type(value)
    if cls in _LEAVES:
        return True
    if cls is list or cls is tuple:
        return all(map(_plain, value))
    if cls is dict:
        return all(type(key) is str for key in value) and all(map(_plain, value.values()))
    return False


def _encodes(fields: Mapping[str, Any]) -> bool:
    """Return whether the codec writes ``fields`` under the strict policy."""
    try:
        MemoryItem(**fields).to_json_bytes()
    except Exception:  # any failure means "cannot be saved": recording must not break the run
        return False
    return True


def _saveable(encoded: Any) -> bool:
    try:
        plain = _plain(encoded)
    except RecursionError:  # nested deeper than Python walks: let the codec judge
        plain = False
    return plain or _encodes({"v": encoded})


def _field_value(name: str, key: str, value: Any) -> tuple[bool, Any, dict[str, str]]:
    """Return whether a step's field can be saved, its stored form, and what was left out of it.

    A chat message whose ``raw`` API response cannot be saved is kept
    without it (``raw`` is ``None``; ``"<key>.raw"`` names its type), so a
    client's response object never costs the message.
    """
    try:
        encoded = _encode_field(name, value)
    except Exception:  # an odd value (a broken image) is left out, never raised
        return False, None, {key: type_name(value)}
    if _saveable(encoded):
        return True, encoded, {}
    if (name in MESSAGE_LISTS and isinstance(encoded, list)) or name in MESSAGES:
        messages = encoded if name in MESSAGE_LISTS else [encoded]
        raws = [m.get("raw") if isinstance(m, dict) else None for m in messages]
        bad = [raw is not None and not _saveable(raw) for raw in raws]
        if any(bad):
            kept = [
                {**m, "raw": None} if dropped else m
                for m, dropped in zip(messages, bad, strict=True)
            ]
            out = kept if name in MESSAGE_LISTS else kept[0]
            if _saveable(out):
                types = sorted({type_name(raw) for raw, b in zip(raws, bad, strict=True) if b})
                return True, out, {f"{key}.raw": ", ".join(types)}
    return False, None, {key: type_name(value)}


def step_fields(
    step: Any,
    kind: str,
    run: int,
    step_key: str,
    names: frozenset[str] | None = None,
    skip: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], dict[str, str]]:
    """Return a step's item fields and, by field key, the type of each value left out.

    A value that cannot be encoded (``range(3)``, an instance of a class the
    agent's code defined) is left out of the fields, so that the rest is
    kept. With ``names``, only those smolagents fields are read, and
    ``kind``, ``run`` and ``left_out`` are not given; fields in ``skip`` are
    never read.
    """
    fields: dict[str, Any] = {"kind": kind, "run": run} if names is None else {}
    left_out: dict[str, str] = {}
    for name in field_names(step):
        if (names is not None and name not in names) or name in skip:
            continue
        key = step_key if name == "step_number" else name
        ok, out, missing = _field_value(name, key, getattr(step, name))
        if ok:
            fields[key] = out
        left_out.update(missing)
    if left_out and names is None:
        fields["left_out"] = left_out
    return fields, left_out


_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(step: Any) -> tuple[str, ...]:
    """Return the dataclass field names of a step's class (read once per class)."""
    cls = type(step)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(spec.name for spec in dataclasses.fields(step))
    return names


class UnsavedValueWarning(UserWarning):
    """A value of a smolagents step or of a ``CodeAgent``'s Python state cannot be saved; it was left out."""


# A CodeAgent's Python variables: set or changed, removed, and left out, in each action item.
STATE: Final = "python_state"
STATE_REMOVED: Final = "python_state_removed"
STATE_LEFT_OUT: Final = "python_state_left_out"
OWN_FIELDS: Final = frozenset({STATE, STATE_REMOVED, STATE_LEFT_OUT})
# Names the executor keeps for itself in its state (print buffer, operation count).
EXECUTOR_INTERNALS: Final = frozenset({"__name__", "_print_outputs", "_operations_count"})
