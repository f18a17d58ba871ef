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
  messages) as PNG bytes;
* errors as ``{"type": "AgentToolExecutionError", "message": ...}``;
* timing as ``{"start_time", "end_time"}``, token usage as
  ``{"input_tokens", "output_tokens"}``;
* chat messages (model input and output) as ``{"role", "content",
  "tool_calls", "raw", "token_usage"}``, tool calls as ``{"id", "name",
  "arguments"}``.

Any other field that holds a PIL image (a code agent's ``action_output``)
is stored as PNG bytes and read back as those bytes; any other value goes
through the codec under the memory's ``on_unencodable`` policy.

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
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agents.memory._item import MemoryItem
from agents.memory.exceptions import ArgumentTypeError, CorruptSessionError, missing_dependency
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


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
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


def _image(data: Any, where: str) -> Any:
    from PIL import Image

    if not isinstance(data, (bytes, bytearray)):
        msg = f"{where} holds {type(data).__name__}, not image bytes; the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg)
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _decode_content(content: Any, where: str) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {**part, "image": _image(part["image"], where)}
        if isinstance(part, Mapping)
        and part.get("type") == "image"
        and isinstance(part.get("image"), (bytes, bytearray))
        else part
        for part in content
    ]


def _decode_usage(value: Any, sm: Any) -> Any:
    if value is None:
        return None
    return sm.monitoring.TokenUsage(
        input_tokens=value["input_tokens"], output_tokens=value["output_tokens"]
    )


def _decode_message(value: Mapping[str, Any], sm: Any, where: str) -> Any:
    models = sm.models
    role = value["role"]
    if role in models.MessageRole.roles():
        role = models.MessageRole(role)
    calls = value.get("tool_calls")
    return models.ChatMessage(
        role=role,
        content=_decode_content(value.get("content"), where),
        tool_calls=None
        if calls is None
        else [
            models.ChatMessageToolCall(
                function=models.ChatMessageToolCallFunction(**call["function"]),
                id=call["id"],
                type=call["type"],
            )
            for call in calls
        ],
        raw=value.get("raw"),
        token_usage=_decode_usage(value.get("token_usage"), sm),
    )


def _decode_error(value: Mapping[str, Any], sm: Any) -> Any:
    utils = sm.utils
    cls = getattr(utils, str(value.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, utils.AgentError)):
        cls = utils.AgentError
    # smolagents errors log themselves when made: give them a logger that prints nothing.
    silent = sm.monitoring.AgentLogger(level=sm.monitoring.LogLevel.OFF)
    return cls(value["message"], silent)


def _decode_field(name: str, value: Any, sm: Any, where: str) -> Any:
    if value is None:
        return None
    if name in _IMAGE_LISTS:
        return [_image(data, f"{where}, field {name!r}") for data in value]
    if name in _MESSAGE_LISTS:
        return [_decode_message(message, sm, f"{where}, field {name!r}") for message in value]
    if name in _MESSAGES:
        return _decode_message(value, sm, f"{where}, field {name!r}")
    if name == "tool_calls":
        return [
            sm.memory.ToolCall(name=c["name"], arguments=c["arguments"], id=c["id"]) for c in value
        ]
    if name == "error":
        return _decode_error(value, sm)
    if name == "timing":
        return sm.monitoring.Timing(start_time=value["start_time"], end_time=value["end_time"])
    if name == "token_usage":
        return _decode_usage(value, sm)
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
            except (KeyError, TypeError, ValueError) as exc:
                msg = f"Field {source!r} of {where} cannot be read as smolagents' {spec.name} ({type(exc).__name__}: {exc})."
                raise CorruptSessionError(msg) from exc
    try:
        return cls(**kwargs)
    except TypeError as exc:
        msg = f"{where} lacks fields smolagents' {cls.__name__} needs ({exc}); the session was not written by SmolagentsRecorder."
        raise CorruptSessionError(msg) from exc


def _latest_run(memory: Memory, run: int | None) -> tuple[int, list[MemoryItem]]:
    items = [item for item in memory if item.get_value("kind") in KINDS]
    if not items:
        return 0, []
    wanted = run if run is not None else max(int(item.get_value("run") or 0) for item in items)
    return wanted, [item for item in items if item.get_value("run") == wanted]


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
        CorruptSessionError: naming an item that cannot be read back as a step.
    """
    sm = _smolagents()
    _, items = _latest_run(memory, run)
    system: str | None = None
    steps: list[Any] = []
    for position, item in enumerate(items):
        if item.get_value("kind") == "system_prompt":
            system = item.get_value("system_prompt")
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
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.run = max(
            (int(item.get_value("run") or 0) for item in memory if item.get_value("kind") in KINDS),
            default=0,
        )
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
            CorruptSessionError: naming an item that cannot be read back as a step.
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
