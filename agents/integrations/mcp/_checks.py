"""The checks every argument a client sends passes before anything reads or writes.

Each check returns the value it checked (normalised: ``3.0`` becomes ``3``) or
raises :class:`~agents.integrations.mcp.ToolArgumentError` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from agents.integrations.mcp._limits import (
    MAX_FIELDS,
    MAX_FIELDS_BYTES,
    MAX_KEY_CHARS,
    MAX_QUERY_CHARS,
    MAX_STEP,
)
from agents.integrations.mcp._scope import ToolArgumentError

__all__ = [
    "brief",
    "check_fields",
    "check_finite",
    "check_integer",
    "check_keys",
    "check_no_unknown",
    "check_step",
    "check_text",
    "json_type",
]


def json_type(value: object) -> str:
    """Return the JSON name of ``value``'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def brief(value: object) -> str:
    """Return ``repr(value)`` cut to 60 characters, for messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_integer(
    args: Mapping[str, Any], name: str, default: int | None, low: int, high: int
) -> int:
    """Return argument ``name`` (or ``default``) as a whole number from ``low`` to ``high``."""
    value = args.get(name, default)
    if value is None:
        raise ToolArgumentError(name, "is required; pass a whole number.")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        msg = f"must be a whole number from {low} to {high}, got {json_type(value)} {brief(value)}."
        raise ToolArgumentError(name, msg)
    if not low <= value <= high:
        raise ToolArgumentError(name, f"must be from {low} to {high}, got {value}.")
    return value


def check_text(
    args: Mapping[str, Any], name: str, *, required: bool = True, limit: int = MAX_QUERY_CHARS
) -> str | None:
    """Return argument ``name`` as a string of at most ``limit`` characters (``None`` if optional and absent)."""
    value = args.get(name)
    if value is None:
        if required:
            raise ToolArgumentError(name, "is required; pass a string.")
        return None
    if type(value) is not str:
        raise ToolArgumentError(name, f"must be a string, got {json_type(value)} {brief(value)}.")
    if len(value) > limit:
        raise ToolArgumentError(name, f"is {len(value)} characters long; the limit is {limit}.")
    return value


def check_keys(args: Mapping[str, Any], name: str = "keys") -> list[str] | None:
    """Return argument ``name`` as a non-empty list of field names, or ``None`` if absent."""
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ToolArgumentError(
            name, f"must be a non-empty list of field names, got {brief(value)}."
        )
    if len(value) > MAX_FIELDS:
        raise ToolArgumentError(name, f"holds {len(value)} names; the limit is {MAX_FIELDS}.")
    for key in value:
        if type(key) is not str or not key or len(key) > MAX_KEY_CHARS:
            raise ToolArgumentError(
                name, f"must hold field names (non-empty strings), got {brief(key)}."
            )
    return list(value)


def check_step(value: object, name: str) -> int | str:
    """Return ``value`` as a step: a whole number within ±2**53 or a short string."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is int:
        if -MAX_STEP <= value <= MAX_STEP:
            return value
        raise ToolArgumentError(
            name,
            f"step {value} lies beyond -2**53 to 2**53, where JSON numbers stay whole; "
            "pass a smaller number, or the step as a string.",
        )
    if type(value) is str and 0 < len(value) <= MAX_KEY_CHARS:
        return value
    raise ToolArgumentError(
        name, f"must be a step: a whole number or a short string, got {brief(value)}."
    )


def check_no_unknown(args: Mapping[str, Any], schema: Mapping[str, Any], tool: str) -> None:
    """Refuse the first argument that ``schema``'s properties do not name."""
    known = schema.get("properties", {})
    unknown = sorted(name for name in args if name not in known)
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ToolArgumentError(
            unknown[0], f"is not an argument of {tool}; its arguments are: {allowed}."
        )


def check_finite(value: object, argument: str) -> None:
    """Refuse NaN and the infinities anywhere in ``value`` (a JSON document a client sent).

    JSON has neither, but some encoders write them (``NaN``, ``Infinity``) and a
    number too large for a double (``1e400``) reads as infinity; kept, they
    would read back as tagged strings, not numbers.
    """
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        current, path = stack.pop()
        if isinstance(current, float) and not math.isfinite(current):
            where = f"field {path!r}" if path else "the value"
            number = "NaN" if math.isnan(current) else ("Infinity" if current > 0 else "-Infinity")
            msg = (
                f"{where} holds {number}, which is not a finite number (1e400 and larger "
                "read as Infinity); send null, or the number as a string."
            )
            raise ToolArgumentError(argument, msg)
        if isinstance(current, dict):
            children = [(v, f"{path}.{k}" if path else str(k)) for k, v in current.items()]
        elif isinstance(current, list):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(current)]
        else:
            continue
        stack.extend(reversed(children))


def check_fields(value: object, argument: str = "fields") -> dict[str, Any]:
    """Return ``value`` as a fresh dict of fields: a JSON object of at most 1 MiB, finite numbers only."""
    if not isinstance(value, dict):
        raise ToolArgumentError(
            argument, f"must be a JSON object of fields, got {json_type(value)}."
        )
    if len(value) > MAX_FIELDS:
        raise ToolArgumentError(argument, f"holds {len(value)} fields; the limit is {MAX_FIELDS}.")
    for key in value:
        if not key or len(key) > MAX_KEY_CHARS:
            raise ToolArgumentError(
                argument,
                f"field names must be 1 to {MAX_KEY_CHARS} characters, got {brief(key)}.",
            )
    check_finite(value, argument)
    try:
        size = len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError) as exc:
        # A whole number past 64 bits is valid JSON that no store keeps.
        raise ToolArgumentError(argument, f"cannot be encoded as JSON ({exc}).") from exc
    if size > MAX_FIELDS_BYTES:
        raise ToolArgumentError(
            argument,
            f"is {size} bytes as JSON; the limit is {MAX_FIELDS_BYTES} (keep big data in files).",
        )
    return dict(value)
