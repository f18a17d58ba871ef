"""smolagents in and out: record an agent's memory in kvmemory, and restore it into a new agent.

smolagents keeps an agent's memory in RAM (``agent.memory``: a system prompt
and a list of ``TaskStep``, ``ActionStep`` and ``PlanningStep`` objects), so
it is lost when the process ends. :class:`SmolagentsRecorder` is a step
callback that writes every step to a kvmemory ``Memory`` (a stored one, from
``open_memory``, makes it durable) as the agent runs, after the step's other
callbacks, and writes later changes to steps it wrote (a callback that clears
older screenshots). :meth:`SmolagentsRecorder.restore` rebuilds
``agent.memory``, ``agent.task`` and a ``CodeAgent``'s Python variables in a
new agent from it, so that ``agent.run(next_task, reset=False)`` continues
where the old process stopped and ``agent.replay()`` shows the whole run.

Each step is one item with ``kind`` (``"system_prompt"``, ``"task"``,
``"planning"`` or ``"action"``), ``run`` (counts the agent's memory resets)
and the step's fields under their smolagents names, except that an action
step's ``step_number`` is the memory's step key. Values are kept losslessly:

* images (``task_images``, ``observations_images``, image parts of chat
  messages) as PNG bytes; an image in a mode PNG cannot hold is converted
  first (CMYK, YCbCr, LAB, HSV, RGBX to RGB; RGBa and PA to RGBA; La to LA;
  I, F and the other 16-bit modes to 16-bit greyscale ``I;16``, clipped to
  0..65535 with fractions dropped), so that no image stops the agent's run;
* errors as ``{"type": "AgentToolExecutionError", "message": ...}``;
* timing as ``{"start_time", "end_time"}``, token usage as
  ``{"input_tokens", "output_tokens"}``;
* chat messages (model input and output) as ``{"role", "content",
  "tool_calls", "raw", "token_usage"}``; tool calls, there and in
  ``tool_calls``, in smolagents' shape ``{"id", "type", "function":
  {"name", "arguments"}}``.

Any other field that holds a PIL image (a code agent's ``action_output``)
is stored as PNG bytes and read back as those bytes; any other value is
kept if the codec can write it. A value it cannot write is left out and
named, with its type, in the item's ``left_out`` field (an
:class:`UnsavedValueWarning` says so): recording never stops the run.

A ``CodeAgent``'s action items also carry the Python variables the step
changed (``python_state``), removed (``python_state_removed``) or could not
save (``python_state_left_out``); :func:`restore_python_state` replays them.

Stored rows are untrusted input (another process or machine may have
written them): restoring checks the shape of every field it reads, decodes
image bytes only when they are PNG (the one format the recorder writes;
an EPS file would make Pillow run Ghostscript) and only up to
``PIL.Image.MAX_IMAGE_PIXELS`` pixels, and raises ``CorruptSessionError``
naming the item and field of anything else, leaving the agent as it was.

Restored errors are instances of the smolagents error class of that name
(``AgentError`` for a class smolagents does not define); a message's
``raw`` API response comes back as the JSON data it was stored as.

:func:`full_steps` and :func:`succinct_steps` are the views smolagents'
``get_full_steps()`` and ``get_succinct_steps()`` give, for any kvmemory
session, without smolagents.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import operator
import reprlib
import struct
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agents.memory._item import MemoryItem
from agents.memory.exceptions import (
    AgentMemoryError,
    ArgumentTypeError,
    CorruptSessionError,
    InvalidArgumentError,
    missing_dependency,
)
from agents.memory.memory import Memory

__all__ = [
    "KINDS",
    "SmolagentsRecorder",
    "UnsavedValueWarning",
    "full_steps",
    "restore_python_state",
    "restore_steps",
    "succinct_steps",
]

KINDS: Final[tuple[str, ...]] = ("system_prompt", "task", "planning", "action")
"""The ``kind`` of each item the recorder writes."""

_IMAGE_LISTS: Final = ("task_images", "observations_images")
_MESSAGE_LISTS: Final = ("model_input_messages",)
_MESSAGES: Final = ("model_output_message",)


def _smolagents() -> Any:
    try:
        import smolagents.memory
        import smolagents.models
        import smolagents.monitoring
        import smolagents.utils
    except ImportError as exc:
        raise missing_dependency("smolagents", "smolagents") from exc
    return smolagents


# -- encoding: smolagents objects -> JSON-able values (and bytes) ---------------


_PNG_MODES: Final = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I;16", "I;16B"})
"""Pillow modes that PNG holds as they are; others are converted before saving."""


def _png_mode(image: Any) -> Any:
    # An agent's image may be in any Pillow mode; a step callback that raises
    # kills the agent's run, so convert to the nearest mode PNG holds.
    mode = image.mode
    if mode in _PNG_MODES:
        return image
    if mode == "La":  # premultiplied alpha: Pillow converts it to LA only
        return image.convert("LA")
    if mode == "F" or mode == "I" or mode.startswith("I;"):
        # 32-bit and float greyscale -> 16-bit greyscale (clipped, fractions dropped);
        # F goes through I because Pillow's direct F -> I;16 passes through 8 bits.
        return (image.convert("I") if mode == "F" else image).convert("I;16")
    return image.convert("RGBA" if mode.endswith(("A", "a")) else "RGB")


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    _png_mode(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _is_image(value: Any) -> bool:
    try:
        from PIL import Image
    except ImportError:  # without Pillow there are no PIL images to encode
        return False
    return isinstance(value, Image.Image)


def _encode_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {**part, "image": _png(part["image"])}
        if isinstance(part, Mapping) and _is_image(part.get("image"))
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
    if name in _IMAGE_LISTS:
        return [_png(image) for image in value]
    if name in _MESSAGE_LISTS:
        return [_encode_message(message) for message in value]
    if name in _MESSAGES:
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
    if _is_image(value):
        return _png(value)  # an image result (action_output): PNG bytes, read back as bytes
    return value


def _kind_of(step: Any, sm: Any) -> str | None:
    memory = sm.memory
    if isinstance(step, memory.ActionStep):
        return "action"
    if isinstance(step, memory.PlanningStep):
        return "planning"
    if isinstance(step, memory.TaskStep):
        return "task"
    return None  # FinalAnswerStep and others are not part of agent.memory.steps


def _type_name(value: Any) -> str:
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
        return False, None, {key: _type_name(value)}
    if _saveable(encoded):
        return True, encoded, {}
    if (name in _MESSAGE_LISTS and isinstance(encoded, list)) or name in _MESSAGES:
        messages = encoded if name in _MESSAGE_LISTS else [encoded]
        raws = [m.get("raw") if isinstance(m, dict) else None for m in messages]
        bad = [raw is not None and not _saveable(raw) for raw in raws]
        if any(bad):
            kept = [
                {**m, "raw": None} if dropped else m
                for m, dropped in zip(messages, bad, strict=True)
            ]
            out = kept if name in _MESSAGE_LISTS else kept[0]
            if _saveable(out):
                types = sorted({_type_name(raw) for raw, b in zip(raws, bad, strict=True) if b})
                return True, out, {f"{key}.raw": ", ".join(types)}
    return False, None, {key: _type_name(value)}


def _step_fields(
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
    for name in _field_names(step):
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


def _field_names(step: Any) -> tuple[str, ...]:
    """Return the dataclass field names of a step's class (read once per class)."""
    cls = type(step)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(spec.name for spec in dataclasses.fields(step))
    return names


# -- decoding: stored values -> smolagents objects ---------------------------------


_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_PNG_IHDR: Final = b"\x00\x00\x00\x0dIHDR"


def _png_size(data: bytes, where: str) -> tuple[int, int]:
    """Return the width and height a PNG's header claims, refusing bytes that are not PNG."""
    if not data.startswith(_PNG_SIGNATURE) or data[8:16] != _PNG_IHDR or len(data) < 24:
        msg = (
            f"{where} holds {len(data)} bytes that are not a PNG image; SmolagentsRecorder writes "
            "PNG only and restore decodes nothing else (other formats can make Pillow run "
            "external programs). The row was not written by SmolagentsRecorder or was altered."
        )
        raise CorruptSessionError(msg)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _image(data: Any, where: str) -> Any:
    """Decode stored image bytes: PNG only, within Pillow's pixel limit, fully read.

    Stored rows are untrusted: the bytes are checked to be PNG before Pillow
    sees them, Pillow is told to try its PNG decoder alone (an EPS file would
    make it call Ghostscript), and a header claiming more pixels than
    ``PIL.Image.MAX_IMAGE_PIXELS`` is refused before any pixel is decoded.
    """
    if not isinstance(data, (bytes, bytearray)):
        msg = f"{where} holds {type(data).__name__}, not image bytes; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    data = bytes(data)
    width, height = _png_size(data, where)
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        msg = (
            f"{where} holds a PNG image of {width}x{height} pixels, more than "
            f"PIL.Image.MAX_IMAGE_PIXELS ({limit}); it was not decoded. Raise that limit "
            "to restore images this large from a session you trust."
        )
        raise CorruptSessionError(msg)
    try:
        image = Image.open(io.BytesIO(data), formats=["PNG"])
        image.load()
    # Pillow reports damaged image data with many exception types (OSError,
    # SyntaxError, ValueError, EOFError, zlib.error, struct.error, its
    # decompression bomb errors); each means the stored bytes are not a PNG
    # image the recorder wrote.
    except Exception as exc:
        msg = f"{where} holds PNG bytes that cannot be decoded ({type(exc).__name__}: {exc}); the row is damaged."
        raise CorruptSessionError(msg) from exc
    return image


class _Invalid(ValueError):
    """A stored value of the wrong shape; :func:`_step_of` names the item and field."""


def _describe(value: Any) -> str:
    """Name a stored value's type and show its start (bounded: a row may hold anything)."""
    if _is_int(value) and value.bit_length() > 64:
        return f"int of {value.bit_length()} bits"
    try:
        return f"{type(value).__name__} {reprlib.repr(value)}"
    except ValueError:  # an int inside it has more digits than Python writes out
        return type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _mapping(value: Any, path: str, required: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        msg = f"{path}: expected an object, got {_describe(value)}"
        raise _Invalid(msg)
    missing = [key for key in required if key not in value]
    if missing:
        msg = f"{path}: lacks {', '.join(map(repr, missing))}"
        raise _Invalid(msg)
    return value


def _typed(value: Any, path: str, check: Any, expected: str) -> Any:
    if not check(value):
        msg = f"{path}: expected {expected}, got {_describe(value)}"
        raise _Invalid(msg)
    return value


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_opt_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _list(value: Any, path: str) -> list[Any]:
    return list(_typed(value, path, lambda v: isinstance(v, list), "a list"))


def _decode_content(content: Any, where: str, path: str) -> Any:
    if content is None or isinstance(content, str):
        return content
    parts = []
    for index, part in enumerate(_list(content, f"{path}.content")):
        part = _mapping(part, f"{path}.content[{index}]", ())
        if part.get("type") == "image" and isinstance(part.get("image"), (bytes, bytearray)):
            part = {**part, "image": _image(part["image"], f"{where}, {path}.content[{index}]")}
        parts.append(dict(part))
    return parts


def _decode_usage(value: Any, sm: Any, path: str) -> Any:
    if value is None:
        return None
    value = _mapping(value, path, ("input_tokens", "output_tokens"))
    return sm.monitoring.TokenUsage(
        input_tokens=_typed(value["input_tokens"], f"{path}.input_tokens", _is_int, "an int"),
        output_tokens=_typed(value["output_tokens"], f"{path}.output_tokens", _is_int, "an int"),
    )


def _decode_message_call(call: Any, models: Any, path: str) -> Any:
    call = _mapping(call, path, ("id", "type", "function"))
    function = _mapping(call["function"], f"{path}.function", ("name", "arguments"))
    return models.ChatMessageToolCall(
        function=models.ChatMessageToolCallFunction(
            name=_typed(function["name"], f"{path}.function.name", _is_str, "a str"),
            arguments=function["arguments"],
            description=_typed(
                function.get("description"), f"{path}.function.description", _is_opt_str, "a str"
            ),
        ),
        id=_typed(call["id"], f"{path}.id", _is_str, "a str"),
        type=_typed(call["type"], f"{path}.type", _is_str, "a str"),
    )


def _decode_message(value: Any, sm: Any, where: str, path: str) -> Any:
    models = sm.models
    value = _mapping(value, path, ("role",))
    role = _typed(value["role"], f"{path}.role", _is_str, "a str")
    if role in models.MessageRole.roles():
        role = models.MessageRole(role)
    calls = value.get("tool_calls")
    return models.ChatMessage(
        role=role,
        content=_decode_content(value.get("content"), where, path),
        tool_calls=None
        if calls is None
        else [
            _decode_message_call(call, models, f"{path}.tool_calls[{index}]")
            for index, call in enumerate(_list(calls, f"{path}.tool_calls"))
        ],
        raw=value.get("raw"),
        token_usage=_decode_usage(value.get("token_usage"), sm, f"{path}.token_usage"),
    )


def _decode_error(value: Any, sm: Any) -> Any:
    value = _mapping(value, "error", ("message",))
    message = _typed(value["message"], "error.message", _is_str, "a str")
    utils = sm.utils
    name = value.get("type")
    cls = getattr(utils, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, utils.AgentError)):
        cls = utils.AgentError
    # smolagents errors log themselves when made: give them a logger that prints nothing.
    silent = sm.monitoring.AgentLogger(level=sm.monitoring.LogLevel.OFF)
    return cls(message, silent)


def _decode_timing(value: Any, sm: Any) -> Any:
    value = _mapping(value, "timing", ("start_time",))
    start = _typed(value["start_time"], "timing.start_time", _is_number, "a number")
    end = value.get("end_time")
    _typed(end, "timing.end_time", lambda v: v is None or _is_number(v), "a number or null")
    return sm.monitoring.Timing(start_time=start, end_time=end)


_TEXT_FIELDS: Final = {"task": False, "plan": False, "code_action": True, "observations": True}
"""String fields of the steps, and whether ``None`` is allowed."""


def _decode_tool_call(call: Any, sm: Any, path: str) -> Any:
    call = _mapping(call, path, ("id",))
    if "function" in call:  # smolagents' shape: {"id", "type", "function": {"name", "arguments"}}
        function = _mapping(call["function"], f"{path}.function", ("name", "arguments"))
        name, arguments, where = function["name"], function["arguments"], f"{path}.function.name"
    else:  # sessions written by earlier kvmemory versions: {"id", "name", "arguments"}
        call = _mapping(call, path, ("id", "name", "arguments"))
        name, arguments, where = call["name"], call["arguments"], f"{path}.name"
    return sm.memory.ToolCall(
        name=_typed(name, where, _is_str, "a str"),
        arguments=arguments,
        id=_typed(call["id"], f"{path}.id", _is_str, "a str"),
    )


def _decode_field(name: str, value: Any, sm: Any, where: str) -> Any:
    if name in _TEXT_FIELDS:
        nullable = _TEXT_FIELDS[name]
        check = _is_opt_str if nullable else _is_str
        return _typed(value, name, check, "a str or null" if nullable else "a str")
    if name == "step_number":
        return _typed(value, name, _is_int, "an int")
    if name == "is_final_answer":
        return _typed(value, name, lambda v: isinstance(v, bool), "a bool")
    if name == "model_output":
        return _typed(
            value, name, lambda v: v is None or isinstance(v, (str, list)), "a str, a list or null"
        )
    if value is None:
        return None
    if name in _IMAGE_LISTS:
        return [_image(data, f"{where}, field {name!r}") for data in _list(value, name)]
    if name in _MESSAGE_LISTS:
        return [
            _decode_message(message, sm, where, f"{name}[{index}]")
            for index, message in enumerate(_list(value, name))
        ]
    if name in _MESSAGES:
        return _decode_message(value, sm, where, name)
    if name == "tool_calls":
        return [
            _decode_tool_call(call, sm, f"{name}[{index}]")
            for index, call in enumerate(_list(value, name))
        ]
    if name == "error":
        return _decode_error(value, sm)
    if name == "timing":
        return _decode_timing(value, sm)
    if name == "token_usage":
        return _decode_usage(value, sm, name)
    return value


def _step_of(item: MemoryItem, step_key: str, sm: Any, position: int) -> Any:
    kind = item.get_value("kind")
    classes = {
        "task": sm.memory.TaskStep,
        "planning": sm.memory.PlanningStep,
        "action": sm.memory.ActionStep,
    }
    cls = classes[kind]
    where = f"item {position} ({kind} step)"
    kwargs: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):
        source = step_key if spec.name == "step_number" else spec.name
        if source in item:
            try:
                kwargs[spec.name] = _decode_field(spec.name, item[source], sm, where)
            except AgentMemoryError:
                raise
            # A stored row is untrusted: smolagents' constructors may fail on a
            # value of the right shape in ways of their own; each is named here.
            except Exception as exc:
                detail = str(exc) if isinstance(exc, _Invalid) else f"{type(exc).__name__}: {exc}"
                msg = f"Field {source!r} of {where} cannot be read as smolagents' {spec.name} ({detail}); the row was not written by SmolagentsRecorder or was altered."
                raise CorruptSessionError(msg) from exc
    try:
        return cls(**kwargs)
    except TypeError as exc:
        msg = f"{where} lacks fields smolagents' {cls.__name__} needs ({exc}); the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg) from exc


def _run_of(item: MemoryItem, index: int) -> int:
    """Return an item's ``run``, refusing anything but an int from 0 to 2**63 - 1 (a missing one is 0)."""
    value = item.get_value("run")
    if value is None:
        return 0
    if not _is_int(value) or not 0 <= value < 2**63:
        msg = f"Field 'run' of item {index} holds {_describe(value)}; SmolagentsRecorder writes a run number (an int from 1 to 2**63 - 1). The row was altered; fix or remove it."
        raise CorruptSessionError(msg)
    return int(value)


def _recorded(memory: Memory) -> list[tuple[int, MemoryItem]]:
    """Return the recorder's items with their runs, checking every run number."""
    return [
        (_run_of(item, index), item)
        for index, item in enumerate(memory)
        if isinstance(item.get_value("kind"), str) and item.get_value("kind") in KINDS
    ]


def _latest_run(memory: Memory, run: int | None) -> tuple[int, list[MemoryItem]]:
    recorded = _recorded(memory)
    if not recorded:
        return 0, []
    wanted = run if run is not None else max(number for number, _ in recorded)
    return wanted, [item for number, item in recorded if number == wanted]


def _restored(
    memory: Memory, run: int | None, sm: Any
) -> tuple[int, str | None, list[tuple[MemoryItem, Any]]]:
    """Return the run's number, its system prompt and each step item with the step read from it."""
    wanted, items = _latest_run(memory, run)
    system: str | None = None
    pairs: list[tuple[MemoryItem, Any]] = []
    for position, item in enumerate(items):
        if item.get_value("kind") == "system_prompt":
            system = item.get_value("system_prompt")
            if not isinstance(system, str):
                msg = f"Field 'system_prompt' of item {position} (system_prompt) holds {_describe(system)}, not a str; the row was not written by SmolagentsRecorder or was altered."
                raise CorruptSessionError(msg)
        else:
            pairs.append((item, _step_of(item, memory.step_key, sm, position)))
    return wanted, system, pairs


def restore_steps(memory: Memory, *, run: int | None = None) -> tuple[str | None, list[Any]]:
    """Return the system prompt and the steps of a recorded run as real smolagents objects.

    Args:
        memory: A session written by :class:`SmolagentsRecorder`.
        run: The run to restore (default: the newest).

    Returns:
        ``(system_prompt, steps)``: the run's newest system prompt (``None``
        if none was recorded) and its ``TaskStep``, ``ActionStep`` and
        ``PlanningStep`` objects in order.

    Raises:
        MissingDependencyError: if smolagents is not installed.
        CorruptSessionError: naming the item and field that cannot be read
            back as a step: a value of the wrong shape, a ``run`` that is not
            an int from 0 to 2**63 - 1, image bytes that are not a whole PNG
            or claim more pixels than ``PIL.Image.MAX_IMAGE_PIXELS``.
    """
    sm = _smolagents()
    _, system, pairs = _restored(memory, run, sm)
    return system, [step for _, step in pairs]


def _checked_state(
    item: MemoryItem, where: str
) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    changed = item.get_value(_STATE)
    removed = item.get_value(_STATE_REMOVED)
    left_out = item.get_value(_STATE_LEFT_OUT)
    if changed is not None and not (
        isinstance(changed, dict) and all(type(name) is str for name in changed)
    ):
        msg = f"Field {_STATE!r} of {where} holds {type(changed).__name__}, not a dict of variables by name; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    if removed is not None and not (
        isinstance(removed, list) and all(type(name) is str for name in removed)
    ):
        msg = f"Field {_STATE_REMOVED!r} of {where} holds {type(removed).__name__}, not a list of variable names; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    if left_out is not None and not (
        isinstance(left_out, dict)
        and all(type(name) is str and type(why) is str for name, why in left_out.items())
    ):
        msg = f"Field {_STATE_LEFT_OUT!r} of {where} holds {type(left_out).__name__}, not a dict of type names by variable; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    return changed or {}, removed or [], left_out or {}


def restore_python_state(
    memory: Memory, *, run: int | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Return the Python variables a recorded ``CodeAgent`` run held after its last recorded step.

    Each action item carries the variables of the agent's Python executor
    that changed in that step (``python_state``), the names that went
    (``python_state_removed``) and those whose values could not be saved
    (``python_state_left_out``); this replays them in order. Works without
    smolagents.

    Args:
        memory: A session written by :class:`SmolagentsRecorder`.
        run: The run to read (default: the newest).

    Returns:
        ``(variables, left_out)``: fresh copies of the saved variables by
        name, and the type of each variable that could not be saved (it is
        missing from ``variables``).

    Raises:
        CorruptSessionError: naming an item whose state fields are damaged.
    """
    _, items = _latest_run(memory, run)
    variables: dict[str, Any] = {}
    left: dict[str, str] = {}
    for position, item in enumerate(items):
        if item.get_value("kind") != "action":
            continue
        changed, removed, left_out = _checked_state(item, f"item {position} (action step)")
        for name in removed:
            variables.pop(name, None)
            left.pop(name, None)
        for name, value in changed.items():
            variables[name] = value
            left.pop(name, None)
        for name, why in left_out.items():
            variables.pop(name, None)
            left[name] = why
    return copy.deepcopy(variables), left


# -- recording ------------------------------------------------------------------------


def _check_names(
    variables: Mapping[str, Any], agent: Any, executor: Any, sm: Any, run: int
) -> None:
    """Refuse restored variables named like the executor's tools or internals.

    The agent's code cannot assign such names (smolagents refuses to erase a
    tool), so a recorded run cannot hold them; put into the executor's
    state they would hide the tool from the code.
    """
    from smolagents.local_python_executor import BASE_PYTHON_TOOLS

    taken = set(_EXECUTOR_INTERNALS) | set(BASE_PYTHON_TOOLS)
    for names in (
        getattr(agent, "tools", None),
        getattr(agent, "managed_agents", None),
        getattr(executor, "additional_functions", None),
    ):
        if isinstance(names, Mapping):
            taken.update(name for name in names if isinstance(name, str))
    clashes = sorted(name for name in variables if name in taken)
    if clashes:
        msg = (
            f"The Python state of run {run} holds variable(s) {', '.join(map(repr, clashes))}, named "
            "like a tool or an internal name of the agent's executor, which the agent's code cannot "
            "assign: the rows were not written by SmolagentsRecorder or were altered. The agent was "
            "left as it was."
        )
        raise CorruptSessionError(msg)


class UnsavedValueWarning(UserWarning):
    """A value of a smolagents step or of a ``CodeAgent``'s Python state cannot be saved; it was left out."""


_STATE: Final = "python_state"
_STATE_REMOVED: Final = "python_state_removed"
_STATE_LEFT_OUT: Final = "python_state_left_out"
_OWN_FIELDS: Final = frozenset({_STATE, _STATE_REMOVED, _STATE_LEFT_OUT})
# Names the executor keeps for itself in its state (print buffer, operation count).
_EXECUTOR_INTERNALS: Final = frozenset({"__name__", "_print_outputs", "_operations_count"})
# Values of these types cannot change while the executor holds the same object.
_IMMUTABLE: Final = frozenset({int, float, complex, str, bytes, bool, type(None)})
# Lists up to this long have their elements in a step's signature (images, tool calls).
_SIGNATURE_ELEMENTS: Final = 64


def _signature(step: Any) -> list[tuple[Any, ...]]:
    """Return what each of a step's fields is now: the value, and a list's length and elements.

    Comparing two signatures by identity tells, without encoding anything,
    which fields were set again or had a list grow, shrink or have an
    element replaced since the step was written.
    """
    out: list[tuple[Any, ...]] = []
    for name in _field_names(step):
        value = getattr(step, name)
        if type(value) is list:
            count = len(value)
            out.append((value, count, *value) if count <= _SIGNATURE_ELEMENTS else (value, count))
        else:
            out.append((value,))
    return out


def _ids(step: Any) -> tuple[int, ...]:
    """Return the identities in :func:`_signature`, flat: equal tuples mean no field changed.

    The fields' ids come first, then each list's length and its elements'
    ids. The record keeps the signature's objects alive, so their ids
    cannot be reused by new objects while they are compared.
    """
    values = _getter(step)(step)
    ids = tuple(map(id, values))
    lists = [value for value in values if type(value) is list]
    if not lists:
        return ids
    tail: list[int] = []
    for value in lists:
        tail.append(len(value))
        if len(value) <= _SIGNATURE_ELEMENTS:
            tail.extend(map(id, value))
    return ids + tuple(tail)


_GETTERS: dict[type, Any] = {}


def _getter(step: Any) -> Any:
    """Return a function that reads all of a step's fields at once, as a tuple (made once per class)."""
    cls = type(step)
    getter = _GETTERS.get(cls)
    if getter is None:
        names = _field_names(step)
        read = operator.attrgetter(*names)
        getter = _GETTERS[cls] = read if len(names) > 1 else (lambda s: (read(s),))
    return getter


def _same(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if a is not b and not (type(a) is int and type(b) is int and a == b):
            return False
    return True


def _changed_names(
    step: Any, old: list[tuple[Any, ...]], new: list[tuple[Any, ...]]
) -> frozenset[str]:
    names = _field_names(step)
    if len(old) != len(new):
        return frozenset(names)
    return frozenset(
        name for name, was, now in zip(names, old, new, strict=True) if not _same(was, now)
    )


def _differs(stored: Any, value: Any) -> bool:
    try:
        return bool(stored != value)
    except Exception:  # values without a truthful == (arrays): write them again
        return True


def _ends_run(step: Any, sm: Any) -> bool:
    """Return whether ``step`` is the last of an ``agent.run``: the final answer, or the step at max_steps.

    smolagents calls step callbacks with its ``FinalAnswerStep`` only since
    late 2025; the final action step is recognised on every version.
    """
    if isinstance(step, sm.memory.FinalAnswerStep):
        return True
    if not isinstance(step, sm.memory.ActionStep):
        return False
    return bool(step.is_final_answer) or isinstance(step.error, sm.utils.AgentMaxStepsError)


class _Record:
    """A step of the current run, the item it was written to, and its signature when written."""

    __slots__ = ("ids", "item", "kind", "listed", "signature", "step")

    def __init__(self, step: Any, kind: str, item: MemoryItem, *, listed: bool) -> None:
        self.step = step
        self.kind = kind
        self.item = item
        self.listed = listed  # seen in agent.memory.steps (not only passed as the current step)
        self.signature = _signature(step)
        self.ids = _ids(step)


class SmolagentsRecorder:
    """A smolagents step callback that writes the agent's memory to a kvmemory ``Memory``.

    Pass it as a step callback (``ToolCallingAgent(..., step_callbacks=[recorder])``)
    or call :meth:`attach`. Either way it writes after every other callback
    of a step has run: called from the list, it registers itself once more
    (as :meth:`attach` does) to run last and writes from there, so a
    screenshot a later callback attaches is in the record.

    Each time it runs it writes, in order, the steps of ``agent.memory`` it
    has not written yet (the task step of each run included), the step being
    finalized, the system prompt whenever it changes, and for a
    ``CodeAgent`` the Python variables its code changed. It also looks again
    at the ``recheck_last`` steps written before and, at the end of each
    ``agent.run``, at every step written during it, and writes what changed
    since (a callback that clears older steps' images). A new
    ``agent.memory.steps`` list (``agent.run(task)`` resets it) starts a new
    ``run``. The recorder's own work per step is the same whatever the
    length of the run; the model inputs smolagents keeps with each step grow
    with it (see ``keep_model_inputs``).

    A value that cannot be saved (``range(3)``, an instance of a class the
    agent's code defined) never stops the run: the rest of the step is
    written, the field is named in the item's ``left_out`` (variables in
    ``python_state_left_out``) and an :class:`UnsavedValueWarning` says so.

    Args:
        memory: Where the steps go; a stored memory (``open_memory``) makes them durable.
        recheck_last: How many earlier steps to compare again at each step (0: only at the end of a run).
        keep_model_inputs: Write each step's ``model_input_messages``. They hold
            the whole history so far, so writing them costs more at each step of
            a long run; without them a restored step has ``None`` there, and
            the model's next input is the same (smolagents builds it from the
            other fields).

    Raises:
        InvalidArgumentError: if ``recheck_last`` is not a whole number of at
            least 0, or ``keep_model_inputs`` not a bool.
        CorruptSessionError: if an item of ``memory`` recorded before holds a
            ``run`` that is not an int from 0 to 2**63 - 1 (naming the item).
    """

    def __init__(
        self, memory: Memory, *, recheck_last: int = 4, keep_model_inputs: bool = True
    ) -> None:
        if type(recheck_last) is not int or recheck_last < 0:
            msg = f"recheck_last must be a whole number of at least 0, got {recheck_last!r}."
            raise InvalidArgumentError(msg)
        if not isinstance(keep_model_inputs, bool):
            msg = f"keep_model_inputs must be True or False, got {keep_model_inputs!r}."
            raise InvalidArgumentError(msg)
        self.memory = memory
        self.recheck_last = recheck_last
        self.keep_model_inputs = keep_model_inputs
        self._skip = frozenset() if keep_model_inputs else frozenset({"model_input_messages"})
        self.run = max((number for number, _ in _recorded(memory)), default=0)
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        self._start_run(None)

    def _start_run(self, steps: list[Any] | None) -> None:
        self._steps = steps  # the agent's steps list this run writes
        self._seen = 0  # how many entries of it were looked at
        self._last: Any = None  # the entry at _seen - 1 then
        self._records: dict[int, _Record] = {}  # id(step) -> record
        self._order: list[_Record] = []
        self._swept = 0  # records before this were compared at the end of an agent.run
        self._system: str | None = None
        # A CodeAgent's variables as last written: name -> (value, its encoding or None).
        self._vars: dict[str, tuple[Any, bytes | None]] = {}

    def attach(self, agent: Any) -> None:
        """Register the recorder on ``agent`` for every step kind, after the callbacks registered so far."""
        if agent in self._attached:
            return
        sm = _smolagents()
        agent.step_callbacks.register(sm.memory.MemoryStep, self._record)
        self._attached.add(agent)

    def __call__(self, memory_step: Any, agent: Any = None) -> None:
        """Make sure the recorder runs after every other callback of each step (see the class).

        Raises:
            ArgumentTypeError: if smolagents did not pass the agent (register the recorder as a step callback).
        """
        if agent is None:
            msg = "SmolagentsRecorder needs the agent: register it as a step callback (step_callbacks=[recorder] or recorder.attach(agent))."
            raise ArgumentTypeError(msg)
        # smolagents calls the callbacks of the step's class before those of
        # MemoryStep, so the registration made here runs later in this very
        # step, after the callbacks listed behind the recorder.
        self.attach(agent)

    def _record(self, memory_step: Any, agent: Any = None) -> None:
        if agent is None:
            msg = "SmolagentsRecorder needs the agent: register it as a step callback (step_callbacks=[recorder] or recorder.attach(agent))."
            raise ArgumentTypeError(msg)
        self.write(agent, memory_step)

    def write(self, agent: Any, current: Any = None) -> None:
        """Write what ``agent.memory`` holds that is not written yet, then ``current`` (a step being finalized).

        Also writes what changed in the last ``recheck_last`` steps written
        before and, when ``current`` ends an ``agent.run`` (smolagents'
        ``FinalAnswerStep``, the final-answer action step or the one at
        ``max_steps``), in every step written since the last run ended.
        Values that cannot be saved are left out (see the class).

        Raises:
            StoreError: if a stored memory cannot write (the agent's steps are unchanged).
        """
        sm = _smolagents()
        steps: list[Any] = agent.memory.steps
        if steps is not self._steps:
            self._start_run(steps)
            self.run += 1
        elif self._seen > len(steps) or (self._seen and steps[self._seen - 1] is not self._last):
            self._forget_removed(steps)
        step_key = self.memory.step_key
        # What this call changes, to undo if the memory refuses the items (a store error).
        undo = (self._seen, self._last, self._system, self._swept, dict(self._vars))
        items: list[MemoryItem] = []
        system = agent.memory.system_prompt.system_prompt
        if system != self._system:
            items.append(MemoryItem(kind="system_prompt", run=self.run, system_prompt=system))
            self._system = system
        before = len(self._order)
        for step in steps[self._seen :]:
            record = self._records.get(id(step))
            if record is not None:
                record.listed = True
            else:
                self._add(step, sm, step_key, items, listed=True)
        if steps:
            self._seen = len(steps)
            self._last = steps[-1]
        if current is not None and id(current) not in self._records:
            self._add(current, sm, step_key, items, listed=False)
        added = self._order[before:]
        actions = [record for record in added if record.kind == "action"]
        if actions:
            newest = actions[-1]
            newest.item.add_values_from_dict(self._python_state(agent, newest))
        start = max(before - self.recheck_last, 0)
        if _ends_run(current, sm):
            start = min(start, self._swept)
            self._swept = len(self._order)
        changed: list[tuple[_Record, list[tuple[Any, ...]], frozenset[str]]] = []
        for record in self._order[start:before]:
            ids = _ids(record.step)
            if ids == record.ids:
                continue
            now = _signature(record.step)
            names = _changed_names(record.step, record.signature, now)
            if names:
                changed.append((record, now, names))
            else:
                record.signature, record.ids = now, ids
        if items:
            try:
                self.memory.add_memory_items(items)
            except BaseException:
                # Nothing was added: forget this call's steps, so the next call writes them.
                for record in self._order[before:]:
                    del self._records[id(record.step)]
                del self._order[before:]
                self._seen, self._last, self._system, self._swept, self._vars = undo
                raise
        for record, now, names in changed:
            self._update(record, step_key, names)
            record.signature, record.ids = now, _ids(record.step)

    def sync(self, agent: Any) -> None:
        """Write every change to the steps of the run since they were written, comparing each in full.

        For changes the recorder does not see by itself: a step older than
        ``recheck_last`` changed between two ``agent.run`` calls, or an
        object changed in place (an image's pixels). Costs one encoding of
        every step of the run.
        """
        self.write(agent)
        step_key = self.memory.step_key
        for record in self._order:
            self._update(record, step_key)

    def _add(
        self, step: Any, sm: Any, step_key: str, items: list[MemoryItem], *, listed: bool
    ) -> None:
        kind = _kind_of(step, sm)
        if kind is None:
            return
        fields, left_out = _step_fields(step, kind, self.run, step_key, skip=self._skip)
        if left_out:
            self._warn_fields(step, kind, left_out)
        record = _Record(step, kind, MemoryItem(**fields), listed=listed)
        self._records[id(step)] = record
        self._order.append(record)
        items.append(record.item)

    def _update(self, record: _Record, step_key: str, names: frozenset[str] | None = None) -> None:
        """Write what changed in a recorded step: the fields ``names`` (default: all of them)."""
        item = record.item
        step = record.step
        fields, left_out = _step_fields(
            step, record.kind, self.run, step_key, names, skip=self._skip
        )
        read = _field_names(step) if names is None else names
        keys = {step_key if name == "step_number" else name for name in read}
        stored = item.get_value("left_out")
        before = dict(stored) if isinstance(stored, dict) else {}
        after = {
            key: why for key, why in before.items() if key.split(".")[0] not in keys
        } | left_out
        if any(before.get(key) != why for key, why in left_out.items()):
            self._warn_fields(step, record.kind, left_out)
        if names is None:
            fields.pop("left_out", None)
            keys |= {key for key in item.attributes if key not in _OWN_FIELDS}
        for key, value in fields.items():
            if key not in item or _differs(item[key], value):
                item.set_value(key, value)
        for key in keys:
            if key not in fields and key != "left_out" and key in item:
                item.delete_value(key)
        if after != before:
            if after:
                item.set_value("left_out", after)
            else:
                item.delete_value("left_out")
        if names is None:
            record.signature, record.ids = _signature(step), _ids(step)

    def _forget_removed(self, steps: list[Any]) -> None:
        """Delete the items of steps taken out of ``agent.memory.steps`` (found by one pass over it)."""
        present = {id(step) for step in steps}
        gone = [r for r in self._order if r.listed and id(r.step) not in present]
        if gone:
            self.memory.delete_items([record.item for record in gone])
            kept = [r for r in self._order if not (r.listed and id(r.step) not in present)]
            self._order = kept
            self._records = {id(record.step): record for record in kept}
        self._swept = min(self._swept, len(self._order))
        self._seen = 0
        self._last = None

    def _where(self, step: Any, kind: str) -> str:
        number = getattr(step, "step_number", None)
        return f"{kind} step {number}" if number is not None else f"{kind} step"

    def _warn_fields(self, step: Any, kind: str, left_out: Mapping[str, str]) -> None:
        names = ", ".join(f"{name!r} (got {why})" for name, why in left_out.items())
        msg = (
            f"Field(s) {names} of {self._where(step, kind)} of run {self.run} cannot be saved; "
            "the rest of the step was written, the item's 'left_out' names them, and a restored "
            "step has their defaults (None). Keep such values as text, numbers, lists or dicts to save them."
        )
        warnings.warn(msg, UnsavedValueWarning, stacklevel=4)

    def _python_state(self, agent: Any, record: _Record) -> dict[str, Any]:
        """Return the fields that record how the agent's Python variables changed since the last action step."""
        executor = getattr(agent, "python_executor", None)
        state = getattr(executor, "state", None)
        if not isinstance(state, dict):
            return {}  # not a CodeAgent, or an executor that keeps its state in another process
        changed: dict[str, Any] = {}
        left_out: dict[str, str] = {}
        present: set[str] = set()
        for name, value in list(state.items()):
            if type(name) is not str or name in _EXECUTOR_INTERNALS:
                continue
            present.add(name)
            known = self._vars.get(name)
            if (
                known is not None
                and known[0] is value
                and (known[1] is None or type(value) in _IMMUTABLE)
            ):
                continue  # the same object: still unsaveable, or cannot have changed
            try:
                data = MemoryItem(v=value).to_json_bytes()
            except Exception:  # any failure means "cannot be saved": the run goes on
                left_out[name] = _type_name(value)
                self._vars[name] = (value, None)
                continue
            if known is None or known[1] != data:
                changed[name] = MemoryItem.from_json(data)["v"]  # a copy, as a store keeps it
            self._vars[name] = (value, data)
        removed = [name for name in self._vars if name not in present]
        for name in removed:
            del self._vars[name]
        fields: dict[str, Any] = {}
        if changed:
            fields[_STATE] = changed
        if removed:
            fields[_STATE_REMOVED] = removed
        if left_out:
            fields[_STATE_LEFT_OUT] = left_out
            names = ", ".join(f"{name!r} (got {why})" for name, why in left_out.items())
            msg = (
                f"Python variable(s) {names} of the CodeAgent after {self._where(record.step, 'action')} "
                f"of run {self.run} cannot be saved; the other variables were, the item's "
                f"{_STATE_LEFT_OUT!r} names these, and after a restore they are undefined until the "
                "agent's code creates them again."
            )
            warnings.warn(msg, UnsavedValueWarning, stacklevel=4)
        return fields

    def restore(self, agent: Any, *, run: int | None = None) -> None:
        """Rebuild ``agent.memory`` (and a ``CodeAgent``'s Python variables) from the recorded run and go on recording it.

        After this, ``agent.run(next_task, reset=False)`` continues the run
        (the model sees the same messages it would have seen had the old
        process gone on), ``agent.replay()`` shows it, and ``agent.task`` is
        the run's last task. A ``CodeAgent`` with smolagents' local executor
        gets back the variables that were saved (see
        :func:`restore_python_state`); those that were not are named in an
        :class:`UnsavedValueWarning`.

        Args:
            agent: A new smolagents agent (its current memory is replaced).
            run: The run to restore (default: the newest).

        Raises:
            MissingDependencyError: if smolagents is not installed.
            CorruptSessionError: naming the item and field that cannot be read
                back as a step (see :func:`restore_steps`) or whose Python
                state is damaged; the agent is left as it was.
        """
        sm = _smolagents()
        wanted, system, pairs = _restored(self.memory, run, sm)
        if system is None and not pairs:
            self.attach(agent)  # nothing recorded: the agent's next run is the first
            return
        variables, left_out = restore_python_state(self.memory, run=wanted)
        executor: Any = getattr(agent, "python_executor", None)
        state = getattr(executor, "state", None)
        if isinstance(state, dict):
            _check_names(variables, agent, executor, sm, wanted)
        steps = [step for _, step in pairs]
        agent.memory.steps = steps
        if system is not None:
            agent.memory.system_prompt = sm.memory.SystemPromptStep(system_prompt=system)
        tasks = [step.task for step in steps if isinstance(step, sm.memory.TaskStep)]
        if tasks:
            agent.task = tasks[-1]
        self._start_run(steps)
        self.run = wanted
        self._system = system
        for item, step in pairs:
            record = _Record(step, str(item.get_value("kind")), item, listed=True)
            self._records[id(step)] = record
            self._order.append(record)
        self._seen = len(steps)
        self._last = steps[-1] if steps else None
        self._swept = len(self._order)
        if isinstance(state, dict) and (variables or left_out):
            executor.send_variables(variables)
            self._vars = {
                name: (value, MemoryItem(v=value).to_json_bytes())
                for name, value in variables.items()
            }
            if left_out:
                names = ", ".join(f"{name!r} ({why})" for name, why in left_out.items())
                msg = (
                    f"Python variable(s) {names} of run {wanted} were not saved and are undefined "
                    "in the restored agent; a step that uses them fails until the agent's code "
                    "creates them again."
                )
                warnings.warn(msg, UnsavedValueWarning, stacklevel=2)
        self.attach(agent)


# -- views ----------------------------------------------------------------------------


def full_steps(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """Return every step's fields as fresh dicts, like smolagents' ``get_full_steps()``.

    Works on any kvmemory session; items of a recorded smolagents run keep
    their ``kind`` and ``run`` (and, where the recorder wrote them,
    ``left_out`` and a ``CodeAgent``'s ``python_state`` fields); system
    prompt items are left out, as smolagents leaves its system prompt out of
    its steps.
    """
    return [item.to_dict() for item in source if item.get_value("kind") != "system_prompt"]


def succinct_steps(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """Return :func:`full_steps` without the bulky ``model_input_messages``, like ``get_succinct_steps()``."""
    return [
        {key: value for key, value in step.items() if key != "model_input_messages"}
        for step in full_steps(source)
    ]
