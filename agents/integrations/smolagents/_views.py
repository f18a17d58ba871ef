"""smolagents' own views of a recorded run (``get_full_steps``, ``get_succinct_steps``), and the older kvmemory views."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from agents.integrations.smolagents._decode import restore_steps
from agents.memory import Memory, MemoryItem


def get_full_steps(memory: Memory, *, run: int | None = None) -> list[dict[str, Any]]:
    """Return a recorded run's steps as smolagents' ``agent.memory.get_full_steps()`` gives them.

    Each step is read back as the smolagents step it was (see
    :func:`restore_steps`) and given as its ``dict()``: the value equals what
    the live agent's ``get_full_steps()`` returned, and a JSON dump of it
    reads back with :func:`read_smolagents_dump`. kvmemory's own fields
    (``kind``, ``run``, ``left_out``, a ``CodeAgent``'s ``python_state``)
    are not in it; they stay on the items (``memory[i]["kind"]``,
    ``item.to_dict()``).

    Args:
        memory: A session written by :class:`SmolagentsRecorder` (or read
            from a dump by :func:`read_smolagents_dump`).
        run: The run to show (default: the newest, the one ``agent.memory`` held).

    Raises:
        MissingDependencyError: if smolagents is not installed.
        CorruptSessionError: naming the item and field that cannot be read back as a step.
    """
    _, steps = restore_steps(memory, run=run)
    return [step.dict() for step in steps]


def get_succinct_steps(memory: Memory, *, run: int | None = None) -> list[dict[str, Any]]:
    """Return :func:`get_full_steps` without ``model_input_messages``, as smolagents' ``get_succinct_steps()`` does.

    Raises:
        MissingDependencyError: if smolagents is not installed.
        CorruptSessionError: naming the item and field that cannot be read back as a step.
    """
    return [
        {key: value for key, value in step.items() if key != "model_input_messages"}
        for step in get_full_steps(memory, run=run)
    ]


def _deprecated(old: str, new: str) -> None:
    msg = (
        f"agents.integrations.smolagents.{old}() is deprecated and goes in the next release: it "
        f"gives the stored items, not smolagents' step dicts. Use {new}(memory) for what "
        f"smolagents' agent.memory.{new}() gives, or [item.to_dict() for item in memory] for "
        "the items with kvmemory's own fields."
    )
    warnings.warn(msg, DeprecationWarning, stacklevel=3)


def full_steps(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """Return every item's fields as fresh dicts, system prompts left out (deprecated: use :func:`get_full_steps`).

    Works on any kvmemory session; items of a recorded smolagents run keep
    their ``kind`` and ``run`` (and ``left_out`` and ``python_state``
    fields). Unlike smolagents' ``get_full_steps()``, an action's step
    number is under the memory's step key and ``timing`` has no
    ``duration``; :func:`get_full_steps` gives smolagents' own dicts.
    """
    _deprecated("full_steps", "get_full_steps")
    return _items(source)


def _items(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    return [item.to_dict() for item in source if item.get_value("kind") != "system_prompt"]


def succinct_steps(source: Memory | Iterable[MemoryItem]) -> list[dict[str, Any]]:
    """Return :func:`full_steps` without ``model_input_messages`` (deprecated: use :func:`get_succinct_steps`)."""
    _deprecated("succinct_steps", "get_succinct_steps")
    return [
        {key: value for key, value in step.items() if key != "model_input_messages"}
        for step in _items(source)
    ]
