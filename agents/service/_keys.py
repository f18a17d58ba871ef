"""Which fields of a session hold its cost and its agent: what its importer saved, else the defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["agent_keys_of", "cost_keys_of"]


def _names(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and value and all(type(key) is str and key for key in value):
        return tuple(value)
    return None


def cost_keys_of(metadata: Mapping[str, Any], default: str = "cost") -> tuple[str, ...]:
    """Return the fields a session's cost is summed from.

    An importer names them in the session's metadata as ``cost_keys`` (the
    UFO log importer saves ``["Cost"]`` for UFO 2 and ``["llm_cost"]`` for
    UFO 3); a session that names none is counted under ``default``.

    Args:
        metadata: The session's metadata.
        default: The field used when the metadata names none.

    Returns:
        The field names, at least one.
    """
    return _names(metadata.get("cost_keys")) or (default,)


def agent_keys_of(metadata: Mapping[str, Any], default: str = "agent") -> tuple[str, ...]:
    """Return the fields that name the agent of a session's steps.

    An importer names them in the session's metadata as ``agent_keys`` (the
    UFO log importer saves ``["Agent"]`` for UFO 2 and ``["agent_type"]`` for
    UFO 3); a session that names none is read under ``default``. A step's
    agent is the first of these fields it holds.

    Args:
        metadata: The session's metadata.
        default: The field used when the metadata names none.

    Returns:
        The field names, at least one.
    """
    return _names(metadata.get("agent_keys")) or (default,)
