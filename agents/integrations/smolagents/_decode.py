"""Stored items back into smolagents steps, read as untrusted input; a CodeAgent's Python state."""

from __future__ import annotations

import copy
import dataclasses
import reprlib
from collections.abc import Mapping
from typing import Any, Final

from agents.integrations.smolagents._fields import (
    EXECUTOR_INTERNALS,
    IMAGE_LISTS,
    KINDS,
    MESSAGE_LISTS,
    MESSAGES,
    STATE,
    STATE_LEFT_OUT,
    STATE_REMOVED,
    load_smolagents,
)
from agents.integrations.smolagents._images import decode_image, is_image_record
from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import AgentMemoryError, CorruptSessionError


class _Invalid(ValueError):
    """A stored value of the wrong shape; :func:`step_of` names the item and field."""


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
        image = part.get("image")
        if part.get("type") == "image" and (
            isinstance(image, (bytes, bytearray)) or is_image_record(image)
        ):
            part = {
                **part,
                "image": decode_image(part["image"], f"{where}, {path}.content[{index}]"),
            }
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
    if name in IMAGE_LISTS:
        return [decode_image(data, f"{where}, field {name!r}") for data in _list(value, name)]
    if name in MESSAGE_LISTS:
        return [
            _decode_message(message, sm, where, f"{name}[{index}]")
            for index, message in enumerate(_list(value, name))
        ]
    if name in MESSAGES:
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


_ROW: Final = "the row was not written by SmolagentsRecorder or was altered"


def step_of(
    item: MemoryItem,
    step_key: str,
    sm: Any,
    position: int,
    *,
    where: str | None = None,
    cause: str = _ROW,
) -> Any:
    """Return the smolagents step an item holds, checked field by field as untrusted input.

    Raises:
        CorruptSessionError: naming ``where`` (default: ``item {position}``
            and its kind) and the field that cannot be read, then ``cause``.
    """
    kind = item.get_value("kind")
    classes = {
        "task": sm.memory.TaskStep,
        "planning": sm.memory.PlanningStep,
        "action": sm.memory.ActionStep,
    }
    cls = classes[kind]
    where = where or f"item {position} ({kind} step)"
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
                msg = f"Field {source!r} of {where} cannot be read as smolagents' {spec.name} ({detail}); {cause}."
                raise CorruptSessionError(msg) from exc
    try:
        return cls(**kwargs)
    except TypeError as exc:
        msg = f"{where} lacks fields smolagents' {cls.__name__} needs ({exc}); {cause}."
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


def recorded(memory: Memory) -> list[tuple[int, MemoryItem]]:
    """Return the recorder's items with their runs, checking every run number."""
    return [
        (_run_of(item, index), item)
        for index, item in enumerate(memory)
        if isinstance(item.get_value("kind"), str) and item.get_value("kind") in KINDS
    ]


def _latest_run(memory: Memory, run: int | None) -> tuple[int, list[MemoryItem]]:
    """Return the number of the run wanted (default: the newest) and its items, in order."""
    found = recorded(memory)
    if not found:
        return 0, []
    wanted = run if run is not None else max(number for number, _ in found)
    return wanted, [item for number, item in found if number == wanted]


def restored(
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
            pairs.append((item, step_of(item, memory.step_key, sm, position)))
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
    sm = load_smolagents()
    _, system, pairs = restored(memory, run, sm)
    return system, [step for _, step in pairs]


def _checked_state(
    item: MemoryItem, where: str
) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    changed = item.get_value(STATE)
    removed = item.get_value(STATE_REMOVED)
    left_out = item.get_value(STATE_LEFT_OUT)
    if changed is not None and not (
        isinstance(changed, dict) and all(type(name) is str for name in changed)
    ):
        msg = f"Field {STATE!r} of {where} holds {type(changed).__name__}, not a dict of variables by name; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    if removed is not None and not (
        isinstance(removed, list) and all(type(name) is str for name in removed)
    ):
        msg = f"Field {STATE_REMOVED!r} of {where} holds {type(removed).__name__}, not a list of variable names; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    if left_out is not None and not (
        isinstance(left_out, dict)
        and all(type(name) is str and type(why) is str for name, why in left_out.items())
    ):
        msg = f"Field {STATE_LEFT_OUT!r} of {where} holds {type(left_out).__name__}, not a dict of type names by variable; the session was not written by SmolagentsRecorder."
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


def check_names(variables: Mapping[str, Any], agent: Any, executor: Any, sm: Any, run: int) -> None:
    """Refuse restored variables named like the executor's tools or internals.

    The agent's code cannot assign such names (smolagents refuses to erase a
    tool), so a recorded run cannot hold them; put into the executor's
    state they would hide the tool from the code.
    """
    from smolagents.local_python_executor import BASE_PYTHON_TOOLS

    taken = set(EXECUTOR_INTERNALS) | set(BASE_PYTHON_TOOLS)
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
