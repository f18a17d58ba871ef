"""smolagents in and out: record an agent's memory in kvmemory, and restore it into a new agent.

smolagents keeps an agent's memory in RAM (``agent.memory``: a system prompt
and a list of ``TaskStep``, ``ActionStep`` and ``PlanningStep`` objects), so
it is lost when the process ends. :class:`SmolagentsRecorder` is a step
callback that writes every step to a kvmemory ``Memory`` (a stored one, from
``open_memory``, makes it durable) as the agent runs, and
:meth:`SmolagentsRecorder.restore` rebuilds ``agent.memory`` in a new agent
from it, so that ``agent.run(next_task, reset=False)`` continues where the
old process stopped and ``agent.replay()`` shows the whole run.

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
  "tool_calls", "raw", "token_usage"}``, tool calls as ``{"id", "name",
  "arguments"}``.

Any other field that holds a PIL image (a code agent's ``action_output``)
is stored as PNG bytes and read back as those bytes; any other value goes
through the codec under the memory's ``on_unencodable`` policy.

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

import dataclasses
import io
import reprlib
import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agents.memory._item import MemoryItem
from agents.memory.exceptions import (
    AgentMemoryError,
    ArgumentTypeError,
    CorruptSessionError,
    missing_dependency,
)
from agents.memory.memory import Memory

__all__ = ["KINDS", "SmolagentsRecorder", "full_steps", "restore_steps", "succinct_steps"]

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
        return [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in value]
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


def _step_item(step: Any, kind: str, run: int, step_key: str) -> MemoryItem:
    fields: dict[str, Any] = {"kind": kind, "run": run}
    for spec in dataclasses.fields(step):
        name = step_key if spec.name == "step_number" else spec.name
        fields[name] = _encode_field(spec.name, getattr(step, spec.name))
    return MemoryItem(**fields)


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
        calls = []
        for index, call in enumerate(_list(value, name)):
            path = f"{name}[{index}]"
            call = _mapping(call, path, ("id", "name", "arguments"))
            calls.append(
                sm.memory.ToolCall(
                    name=_typed(call["name"], f"{path}.name", _is_str, "a str"),
                    arguments=call["arguments"],
                    id=_typed(call["id"], f"{path}.id", _is_str, "a str"),
                )
            )
        return calls
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
    _, items = _latest_run(memory, run)
    system: str | None = None
    steps: list[Any] = []
    for position, item in enumerate(items):
        if item.get_value("kind") == "system_prompt":
            system = item.get_value("system_prompt")
            if not isinstance(system, str):
                msg = f"Field 'system_prompt' of item {position} (system_prompt) holds {_describe(system)}, not a str; the row was not written by SmolagentsRecorder or was altered."
                raise CorruptSessionError(msg)
        else:
            steps.append(_step_of(item, memory.step_key, sm, position))
    return system, steps


class SmolagentsRecorder:
    """A smolagents step callback that writes the agent's memory to a kvmemory ``Memory``.

    Pass it as a step callback (``ToolCallingAgent(..., step_callbacks=[recorder])``)
    or call :meth:`attach`. Each time it is called it writes, in order, the
    steps of ``agent.memory`` it has not written yet (the task step of each
    run included), the step being finalized, and the system prompt whenever
    it changes. A new ``agent.memory.steps`` list (``agent.run(task)``
    resets it) starts a new ``run``.

    Args:
        memory: Where the steps go; a stored memory (``open_memory``) makes them durable.

    Raises:
        CorruptSessionError: if an item of ``memory`` recorded before holds a
            ``run`` that is not an int from 0 to 2**63 - 1 (naming the item).
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.run = max((number for number, _ in _recorded(memory)), default=0)
        self._steps: list[Any] | None = None  # the agent's steps list this run writes
        self._written: dict[int, Any] = {}  # id(step) -> step, for the steps of this run
        self._system: str | None = None
        self._attached: dict[int, None] = {}

    def attach(self, agent: Any) -> None:
        """Register the recorder on ``agent`` for every step kind (planning steps are written at once)."""
        if id(agent) in self._attached:
            return
        sm = _smolagents()
        agent.step_callbacks.register(sm.memory.MemoryStep, self)
        self._attached[id(agent)] = None

    def __call__(self, memory_step: Any, agent: Any = None) -> None:
        """Write the steps of ``agent.memory`` not written yet, then ``memory_step``.

        Raises:
            ArgumentTypeError: if smolagents did not pass the agent (register the recorder as a step callback).
        """
        if agent is None:
            msg = "SmolagentsRecorder needs the agent: register it as a step callback (step_callbacks=[recorder] or recorder.attach(agent))."
            raise ArgumentTypeError(msg)
        self.write(agent, memory_step)

    def write(self, agent: Any, current: Any = None) -> None:
        """Write what ``agent.memory`` holds that is not written yet, then ``current`` (a step being finalized)."""
        sm = _smolagents()
        steps = agent.memory.steps
        if steps is not self._steps:
            self._steps = steps
            self._written = {}
            self._system = None
            self.run += 1
        step_key = self.memory.step_key
        items: list[MemoryItem] = []
        system = agent.memory.system_prompt.system_prompt
        if system != self._system:
            items.append(MemoryItem(kind="system_prompt", run=self.run, system_prompt=system))
            self._system = system
        for step in [*steps, current]:
            if step is None or id(step) in self._written:
                continue
            kind = _kind_of(step, sm)
            if kind is None:
                continue
            items.append(_step_item(step, kind, self.run, step_key))
            self._written[id(step)] = step
        if items:
            self.memory.add_memory_items(items)

    def restore(self, agent: Any, *, run: int | None = None) -> None:
        """Rebuild ``agent.memory`` from the recorded run and go on recording it.

        After this, ``agent.run(next_task, reset=False)`` continues the run
        (the model sees the same messages it would have seen had the old
        process gone on), and ``agent.replay()`` shows it.

        Args:
            agent: A new smolagents agent (its current memory is replaced).
            run: The run to restore (default: the newest).

        Raises:
            MissingDependencyError: if smolagents is not installed.
            CorruptSessionError: naming the item and field that cannot be read
                back as a step (see :func:`restore_steps`); the agent's memory
                is left as it was.
        """
        sm = _smolagents()
        system, steps = restore_steps(self.memory, run=run)
        if system is None and not steps:
            self.attach(agent)  # nothing recorded: the agent's next run is the first
            return
        agent.memory.steps = steps
        if system is not None:
            agent.memory.system_prompt = sm.memory.SystemPromptStep(system_prompt=system)
        self._steps = steps
        self._written = {id(step): step for step in steps}
        self._system = system
        self.run, _ = _latest_run(self.memory, run)
        self.attach(agent)


# -- views ----------------------------------------------------------------------------


def full_steps(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """Return every step's fields as fresh dicts, like smolagents' ``get_full_steps()``.

    Works on any kvmemory session; items of a recorded smolagents run keep
    their ``kind`` and ``run``; system prompt items are left out, as
    smolagents leaves its system prompt out of its steps.
    """
    return [item.to_dict() for item in source if item.get_value("kind") != "system_prompt"]


def succinct_steps(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """Return :func:`full_steps` without the bulky ``model_input_messages``, like ``get_succinct_steps()``."""
    return [
        {key: value for key, value in step.items() if key != "model_input_messages"}
        for step in full_steps(source)
    ]
