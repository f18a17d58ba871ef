"""A checker for chat messages as the OpenAI Chat Completions API documents them.

Written from the API reference's message types (system, user, assistant,
tool) so that tests can validate what kvmemory sends. It checks the shapes
that reference lists: required keys, allowed keys, value types, content
part types, and tool-call objects.
"""

from __future__ import annotations

from typing import Any

_TEXT_PART = {"type", "text"}
_IMAGE_PART = {"type", "image_url"}
_IMAGE_URL = {"url", "detail"}
_DETAILS = {"auto", "low", "high"}

_ALLOWED = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "refusal", "tool_calls", "audio", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
}
_PART_TYPES = {
    "system": {"text"},
    "developer": {"text"},
    "user": {"text", "image_url", "input_audio", "file"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}


def _part_errors(role: str, part: Any, where: str) -> list[str]:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        return [f"{where}: a content part is an object with a string 'type'"]
    kind = part["type"]
    if kind not in _PART_TYPES[role]:
        return [f"{where}: part type {kind!r} is not allowed in a {role} message"]
    if kind == "text":
        errors = (
            [] if isinstance(part.get("text"), str) else [f"{where}: text part needs string 'text'"]
        )
        return errors + [f"{where}: unknown key {k!r}" for k in set(part) - _TEXT_PART]
    if kind == "image_url":
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            return [f"{where}: image_url part needs image_url.url (string)"]
        errors = [f"{where}: unknown key {k!r}" for k in set(part) - _IMAGE_PART]
        errors += [f"{where}: unknown image_url key {k!r}" for k in set(image) - _IMAGE_URL]
        url = image["url"]
        if not url.startswith(("http://", "https://", "data:image/")):
            errors.append(
                f"{where}: image url must be http(s) or a data:image/ URL, got {url[:30]!r}"
            )
        if "detail" in image and image["detail"] not in _DETAILS:
            errors.append(f"{where}: detail must be one of {sorted(_DETAILS)}")
        return errors
    if kind == "refusal":
        return (
            []
            if isinstance(part.get("refusal"), str)
            else [f"{where}: refusal part needs 'refusal'"]
        )
    return []


def _tool_call_errors(call: Any, where: str) -> list[str]:
    if not isinstance(call, dict):
        return [f"{where}: a tool call is an object"]
    errors = []
    if not isinstance(call.get("id"), str):
        errors.append(f"{where}: tool call needs string 'id'")
    if call.get("type") != "function":
        errors.append(f"{where}: tool call type must be 'function'")
    function = call.get("function")
    if not isinstance(function, dict):
        return [*errors, f"{where}: tool call needs 'function'"]
    if not isinstance(function.get("name"), str):
        errors.append(f"{where}: function needs string 'name'")
    if not isinstance(function.get("arguments"), str):
        errors.append(f"{where}: function 'arguments' must be a JSON string")
    errors += [
        f"{where}: unknown function key {k!r}" for k in set(function) - {"name", "arguments"}
    ]
    errors += [
        f"{where}: unknown tool call key {k!r}" for k in set(call) - {"id", "type", "function"}
    ]
    return errors


def message_errors(message: Any, where: str = "message") -> list[str]:
    """Return what makes ``message`` invalid under the documented schema (empty when valid)."""
    if not isinstance(message, dict):
        return [f"{where}: a message is an object"]
    role = message.get("role")
    if role not in _ALLOWED:
        return [f"{where}: unknown role {role!r}"]
    errors = [
        f"{where}: key {k!r} is not allowed in a {role} message"
        for k in set(message) - _ALLOWED[role]
    ]
    content = message.get("content")
    if content is None:
        if role != "assistant" or not ("tool_calls" in message or "refusal" in message):
            errors.append(f"{where}: {role} message needs content")
    elif isinstance(content, list):
        if not content:
            errors.append(f"{where}: content array must not be empty")
        for index, part in enumerate(content):
            errors += _part_errors(role, part, f"{where}.content[{index}]")
    elif not isinstance(content, str):
        errors.append(f"{where}: content must be a string or an array of parts")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        errors.append(f"{where}: tool message needs string 'tool_call_id'")
    if "tool_calls" in message:
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            errors.append(f"{where}: tool_calls must be an array")
        else:
            for index, call in enumerate(calls):
                errors += _tool_call_errors(call, f"{where}.tool_calls[{index}]")
    for key in ("name", "refusal"):
        if key in message and not isinstance(message[key], str):
            errors.append(f"{where}: {key} must be a string")
    return errors


def conversation_errors(messages: list[Any]) -> list[str]:
    """Return the errors of every message, plus tool results that answer no earlier call."""
    errors: list[str] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        found = message_errors(message, f"messages[{index}]")
        errors += found
        if found:
            continue
        for call in message.get("tool_calls") or ():
            open_calls.add(call["id"])
        if message["role"] == "tool" and message["tool_call_id"] not in open_calls:
            errors.append(
                f"messages[{index}]: answers tool call {message['tool_call_id']!r} never made"
            )
    return errors
