"""Reading a dump of smolagents' ``agent.memory.get_full_steps()`` back in, as a recorded run."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import orjson

from agents.integrations.smolagents._decode import recorded, step_of
from agents.integrations.smolagents._fields import UnsavedValueWarning, load_smolagents, type_name
from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import CorruptSessionError

if TYPE_CHECKING:
    from agents.memory.stores import Store

_SOURCE: Final = "smolagents-dump"
"""The ``source`` a session read from a dump has in its metadata."""

_MESSAGE_FIELDS: Final = ("model_input_messages", "model_output_message")
_IMAGE_FIELDS: Final = ("task_images", "observations_images")
_USAGE_KEYS: Final = ("input_tokens", "output_tokens")


def _kind(step: Mapping[str, Any]) -> str | None:
    if "step_number" in step:
        return "action"
    if "plan" in step:
        return "planning"
    if "task" in step:
        return "task"
    return None


def _usage(value: Any) -> Any:
    # smolagents writes total_tokens too; it is the sum, made again by TokenUsage.
    if isinstance(value, Mapping) and all(key in value for key in _USAGE_KEYS):
        return {key: value[key] for key in _USAGE_KEYS}
    return value


def _message(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    message = dict(value)
    if "token_usage" in message:
        message["token_usage"] = _usage(message["token_usage"])
    return message


def _fields(step: Mapping[str, Any], kind: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Return a dumped step's item fields, in the recorder's shape, and the image fields left out."""
    fields: dict[str, Any] = {"kind": kind, "run": 1}
    left_out: dict[str, str] = {}
    for name, value in step.items():
        if name in _IMAGE_FIELDS and value:
            # JSON holds no images: what is there is a stand-in (a repr, a dict of attributes).
            left_out[name] = type_name(value)
            continue
        if name == "timing" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "duration"}  # duration is computed
        elif name == "token_usage":
            value = _usage(value)
        elif name == "model_input_messages" and isinstance(value, list):
            value = [_message(message) for message in value]
        elif name == "model_output_message":
            value = _message(value)
        elif name == "tool_calls" and value == []:
            value = None  # smolagents dumps a step without tool calls as []
        fields[name] = value
    if left_out:
        fields["left_out"] = left_out
    return fields, left_out


def _load(source: str | os.PathLike[str]) -> Any:
    name = os.fspath(source)
    with open(name, "rb") as stream:
        data = stream.read()
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        msg = f"smolagents dump {name!r} is not valid JSON ({exc}); nothing was read."
        raise CorruptSessionError(msg) from exc


def read_smolagents_dump(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]], *, step_key: str = "step"
) -> Memory:
    """Read a dump of smolagents' ``agent.memory.get_full_steps()`` as a recorded run.

    smolagents' examples save an agent's memory with
    ``json.dump(agent.memory.get_full_steps(), f)``. Each step of such a file
    becomes one item in the shape :class:`SmolagentsRecorder` writes
    (``kind``, ``run`` 1, the step's fields; an action's ``step_number``
    under ``step_key``), so that ``SmolagentsRecorder(memory).restore(agent)``
    and :func:`restore_steps` read it, and :func:`get_full_steps` gives the
    dump's steps back.

    A dump cannot carry everything a recorded run does: no system prompt
    (a restored agent keeps its own), no images (JSON holds none: an image
    field that is not empty is left out, named in the item's ``left_out``,
    with an :class:`UnsavedValueWarning`), no ``CodeAgent`` variables, no
    difference between no tool calls and an empty list (read as none), and
    a text that looked like JSON was already parsed by smolagents.

    Args:
        source: The dump's path, or the list of step dicts itself.
        step_key: The memory's step key (where action step numbers go).

    Returns:
        A new memory with one item per step, in order; its metadata is
        ``{"source": "smolagents-dump"}``.

    Raises:
        FileNotFoundError: if there is no file at ``source``.
        CorruptSessionError: if the file is not JSON, not a list, or a step
            is not a smolagents step dict or holds a value that cannot be
            read back as that step (naming the step's index and field).
        MissingDependencyError: if smolagents is not installed.
    """
    if isinstance(source, (str, os.PathLike)):
        name = f"smolagents dump {os.fspath(source)!r}"
        data = _load(source)
    else:
        name, data = "the smolagents dump given", source
    if not isinstance(data, list):
        msg = (
            f"{name} holds {type(data).__name__}, not the list of step dicts "
            "agent.memory.get_full_steps() gives; nothing was read."
        )
        raise CorruptSessionError(msg)
    sm = load_smolagents()
    items: list[MemoryItem] = []
    for index, step in enumerate(data):
        kind = _kind(step) if isinstance(step, Mapping) else None
        if kind is None:
            got = (
                f"keys {sorted(map(str, step))}"
                if isinstance(step, Mapping)
                else type(step).__name__
            )
            msg = (
                f"Step {index} of {name} is not a smolagents step dict: expected "
                "an ActionStep's (step_number, timing, ...), a PlanningStep's (plan, timing, ...) "
                f"or a TaskStep's (task, ...), got {got}; nothing was read."
            )
            raise CorruptSessionError(msg)
        fields, left_out = _fields(step, kind)
        step_of(
            MemoryItem(**fields),
            "step_number",
            sm,
            index,
            where=f"step {index} of {name}",
            cause="the file is not a dump of smolagents' get_full_steps(), or was altered; nothing was read",
        )
        if "step_number" in fields and step_key != "step_number":
            fields[step_key] = fields.pop("step_number")
        item = MemoryItem(**fields)
        if left_out:
            names = ", ".join(map(repr, left_out))
            msg = (
                f"Field(s) {names} of step {index} of {name} hold no images "
                "(JSON cannot); the step was read without them, and its 'left_out' names them."
            )
            warnings.warn(msg, UnsavedValueWarning, stacklevel=2)
        items.append(item)
    return Memory(items, step_key=step_key, metadata={"source": _SOURCE})


def import_smolagents_dump(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    store: Any,
    session_id: str,
    *,
    step_key: str = "step",
    append: bool = False,
) -> int:
    """Write a ``get_full_steps()`` dump into a store session, all or nothing; return the number of steps.

    The steps are read with :func:`read_smolagents_dump`. Appended to a
    session that already holds recorded runs, they are the next run.

    Args:
        source: The dump's path, or the list of step dicts itself.
        store: A store URL or path, or an open store (left open).
        session_id: The session to write.
        step_key: The session's step key.
        append: Append to a session that already holds items (refused by default).

    Raises:
        CorruptSessionError: naming the step that cannot be read; nothing is written.
        InvalidSessionIdError: for a bad session id, or a non-empty session without ``append``.
        StoreError: if the store cannot be written; nothing is written.
    """
    from agents.memory.stores import check_session_id
    from agents.service import import_memory

    check_session_id(session_id)
    memory = read_smolagents_dump(source, step_key=step_key)

    def number_the_run(opened: Store, held: int) -> None:
        # Appended to recorded runs, the dump is the next run.
        if held:
            before = Memory(opened.read(session_id, on_unknown_class="base"), step_key=step_key)
            run = max((number for number, _ in recorded(before)), default=0) + 1
            for item in memory:
                item.set_value("run", run)

    return import_memory(memory, store, session_id, append=append, before_append=number_the_run)
