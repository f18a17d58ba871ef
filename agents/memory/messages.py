"""Chat messages in and out: memory items as OpenAI-style role/content messages.

A *message item* is a plain :class:`~agents.memory.MemoryItem` with a
``role`` field (``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``) and
the keys of a chat message: ``content`` (text, or a list of content parts),
and where they apply ``name``, ``tool_calls`` (on an assistant message),
``tool_call_id`` (on a tool result) and ``refusal``. Any other field (tags,
timestamps, a user id) rides along in the item and is left out of the
messages sent to a model.

* :func:`from_messages` turns chat messages into message items, checking
  each one.
* :func:`to_messages` turns items (a ``Memory``, a list, or the records of a
  :class:`~agents.memory.prompt.WindowResult`) into chat messages. Message
  items give their message back exactly; other items (agent steps) become
  messages through a configurable mapping. Image paths are read and sent as
  ``data:`` URLs; URLs pass through.

Messages in, messages out, identical: ``to_messages(from_messages(m)) == m``
for any list ``m`` of valid messages whose images are URLs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from agents.memory._item import MemoryItem
from agents.memory.exceptions import FieldValidationError
from agents.memory.memory import Memory
from agents.memory.prompt import (
    DEFAULT_IMAGE_KEYS,
    WindowResult,
    image_data_url,
    image_refs,
    render_json,
)

__all__ = [
    "MESSAGE_KEYS",
    "ROLES",
    "ItemToMessage",
    "check_message",
    "from_messages",
    "image_count",
    "is_message",
    "message_text",
    "to_messages",
    "tool_arguments",
]

ROLES: Final[tuple[str, ...]] = ("system", "user", "assistant", "tool")
"""The roles a message item may take."""

MESSAGE_KEYS: Final[tuple[str, ...]] = (
    "role",
    "content",
    "name",
    "refusal",
    "tool_calls",
    "tool_call_id",
)
"""The fields of a message item that :func:`to_messages` sends, in this order; other fields stay behind."""

ItemToMessage = Callable[
    [Mapping[str, Any]], "Mapping[str, Any] | Sequence[Mapping[str, Any]] | None"
]
"""Maps one record to a message, a list of messages, or ``None`` (use the default mapping)."""

_IMAGE_PART: Final = "image_url"


def _where(position: int | None) -> str:
    return "the message" if position is None else f"message {position}"


def _refuse(position: int | None, problem: str) -> FieldValidationError:
    msg = f"{_where(position).capitalize()} {problem}"
    return FieldValidationError(msg)


def _check_parts(content: list[Any], position: int | None) -> None:
    for index, part in enumerate(content):
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise _refuse(
                position,
                f"has content part {index} = {part!r}; each part is a dict with a 'type' "
                "('text' with 'text', or 'image_url' with 'image_url': {'url': ...}).",
            )
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise _refuse(position, f"has text part {index} without a string 'text': {part!r}.")
        if part["type"] == _IMAGE_PART:
            image = part.get(_IMAGE_PART)
            if not isinstance(image, Mapping) or not isinstance(image.get("url"), str):
                raise _refuse(
                    position,
                    f"has image part {index} without {{'url': str}}: {part!r}; give a path, an http(s) URL or a data: URL.",
                )


def _check_tool_calls(calls: Any, position: int | None) -> None:
    if not isinstance(calls, list) or not calls:
        raise _refuse(position, f"has tool_calls {calls!r}; give a non-empty list of tool calls.")
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if (
            not isinstance(call, Mapping)
            or not isinstance(call.get("id"), str)
            or call.get("type") != "function"
            or not isinstance(function, Mapping)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise _refuse(
                position,
                f"has tool call {index} = {call!r}; expected {{'id': str, 'type': 'function', "
                "'function': {'name': str, 'arguments': str (JSON)}}.",
            )


def check_message(message: Mapping[str, Any], position: int | None = None) -> None:
    """Check that ``message`` is a chat message a message item can hold.

    Args:
        message: The message (``role``, ``content`` and the keys of :data:`MESSAGE_KEYS`).
        position: Its index, named in the error.

    Raises:
        FieldValidationError: naming the message and what is wrong with it.
    """
    if not isinstance(message, Mapping):
        raise _refuse(position, f"is {message!r}; a message is a dict with 'role' and 'content'.")
    role = message.get("role")
    if role not in ROLES:
        raise _refuse(position, f"has role {role!r}; use one of {list(ROLES)}.")
    content = message.get("content")
    if content is None:
        if not (role == "assistant" and ("tool_calls" in message or "refusal" in message)):
            raise _refuse(
                position,
                f"({role}) has no content; only an assistant message with tool_calls or a refusal may omit it.",
            )
    elif isinstance(content, list):
        _check_parts(content, position)
    elif not isinstance(content, str):
        raise _refuse(position, f"has content {content!r}; give text or a list of content parts.")
    if "tool_calls" in message:
        if role != "assistant":
            raise _refuse(position, f"({role}) has tool_calls; only assistant messages call tools.")
        _check_tool_calls(message["tool_calls"], position)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise _refuse(
            position,
            "(tool) has no string 'tool_call_id'; name the id of the tool call it answers.",
        )
    if "tool_call_id" in message and role != "tool":
        raise _refuse(position, f"({role}) has a tool_call_id; only tool results carry one.")
    for key in ("name", "refusal"):
        if key in message and not isinstance(message[key], str):
            raise _refuse(position, f"has {key} {message[key]!r}; give a string.")


def from_messages(messages: Iterable[Mapping[str, Any]]) -> list[MemoryItem]:
    """Return chat messages as message items, all or nothing.

    Every key of each message is kept as a field (custom keys too).

    Raises:
        FieldValidationError: naming the first message that is not a valid chat message.
    """
    listed = list(messages)
    for position, message in enumerate(listed):
        check_message(message, position)
    return [MemoryItem(**dict(message)) for message in listed]


def is_message(record: Mapping[str, Any] | MemoryItem) -> bool:
    """Return whether ``record`` is a message item (its ``role`` is one of :data:`ROLES`)."""
    role = record.get("role") if isinstance(record, Mapping) else record.get_value("role")
    return isinstance(role, str) and role in ROLES


def _message_of(record: Mapping[str, Any], images: str) -> dict[str, Any]:
    message = {key: record[key] for key in MESSAGE_KEYS if key in record}
    content = message.get("content")
    if isinstance(content, list) and images == "data":
        message["content"] = [_send_part(part) for part in content]
    return message


def _send_part(part: Mapping[str, Any]) -> Any:
    if part.get("type") != _IMAGE_PART:
        return part
    image = part[_IMAGE_PART]
    url = image_data_url(image["url"])
    if url == image["url"]:
        return part
    return {**part, _IMAGE_PART: {**image, "url": url}}


def _step_message(
    record: Mapping[str, Any],
    role: str,
    text_keys: Sequence[str] | None,
    image_keys: Sequence[str],
    text: Callable[[Mapping[str, Any]], str] | None,
    images: str,
) -> dict[str, Any]:
    plain = {k: v for k, v in record.items() if k not in image_keys}
    if text_keys is not None:
        plain = {k: plain[k] for k in text_keys if k in plain}
    body = text(plain) if text is not None else render_json([plain])[1:-1]
    refs = [ref for key in image_keys if key in record for ref in image_refs(record[key])]
    if not refs:
        return {"role": role, "content": body}
    convert = image_data_url if images == "data" else str
    parts: list[dict[str, Any]] = [{"type": "text", "text": body}]
    parts.extend({"type": _IMAGE_PART, _IMAGE_PART: {"url": convert(ref)}} for ref in refs)
    return {"role": role, "content": parts}


def _records(
    source: Memory | WindowResult | Iterable[Mapping[str, Any] | MemoryItem],
) -> list[dict[str, Any]]:
    if isinstance(source, WindowResult):
        return [dict(record) for record in source.records]
    return [r.to_dict() if isinstance(r, MemoryItem) else dict(r) for r in source]


def to_messages(
    source: Memory | WindowResult | Iterable[Mapping[str, Any] | MemoryItem],
    *,
    role: str | Callable[[Mapping[str, Any]], str] = "user",
    text_keys: Sequence[str] | None = None,
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
    text: Callable[[Mapping[str, Any]], str] | None = None,
    convert: ItemToMessage | None = None,
    images: str = "data",
) -> list[dict[str, Any]]:
    """Return items as OpenAI-style chat messages, in order.

    A message item (one with a ``role`` of :data:`ROLES`) gives its message:
    the fields of :data:`MESSAGE_KEYS` it holds, unchanged except that image
    parts naming a file get the file as a ``data:`` URL. Any other item (an
    agent step) becomes one message of role ``role`` whose text is the
    item's fields as compact JSON (or ``text(fields)``), followed by one
    ``image_url`` part per image its ``image_keys`` fields name.

    Tool results stay paired with their calls: every ``tool`` message must
    answer a call of an earlier assistant message in ``source``.

    Args:
        source: A ``Memory``, items or records, or a ``WindowResult`` (its
            projected records, so the window's budget holds).
        role: The role of messages made from step items, or a function of
            the record that gives it (``lambda r: "assistant" if r["agent"] == "app" else "user"``).
        text_keys: The fields of a step item that make its text (default: all non-image fields).
        image_keys: The fields of a step item that hold image paths or URLs.
        text: Renders the chosen fields of a step item as its text.
        convert: Maps a record to a message, a list of messages, or ``None``
            to fall back to the rules above; its messages are checked.
        images: ``"data"`` reads image paths into ``data:`` URLs; ``"keep"``
            passes references as they are (for models that fetch them).

    Returns:
        Fresh message dicts; changing them never changes the memory.

    Raises:
        FieldValidationError: for an invalid role, a malformed message, or a
            tool result whose call is not among the earlier messages.
        ImageReadError: naming a file that cannot be read as an image.
    """
    if not callable(role):
        _check_role(role, "role")
    if images not in ("data", "keep"):
        msg = f"images={images!r} must be 'data' (read paths into data: URLs) or 'keep'."
        raise FieldValidationError(msg)
    out: list[dict[str, Any]] = []
    for record in _records(source):
        made = convert(record) if convert is not None else None
        if made is not None:
            many = [made] if isinstance(made, Mapping) else list(made)
            for message in many:
                check_message(message, len(out))
                out.append(_message_of(message, images))
        elif is_message(record):
            check_message(record, len(out))
            out.append(_message_of(record, images))
        else:
            step_role = role(record) if callable(role) else role
            if callable(role):
                _check_role(step_role, f"role({_brief(record)})")
            out.append(_step_message(record, step_role, text_keys, image_keys, text, images))
    _check_pairs(out)
    return out


def _check_role(role: object, what: str) -> None:
    if role not in ROLES:
        msg = f"{what} gave {role!r}, which is not a chat role; use one of {list(ROLES)}."
        raise FieldValidationError(msg)


def _brief(record: Mapping[str, Any]) -> str:
    text = repr(dict(record))
    return text if len(text) <= 60 else text[:57] + "..."


def _check_pairs(messages: list[dict[str, Any]]) -> None:
    called: set[str] = set()
    for position, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            called.add(call["id"])
        if message["role"] == "tool" and message["tool_call_id"] not in called:
            msg = (
                f"Message {position} is the result of tool call {message['tool_call_id']!r}, which no "
                "earlier assistant message makes; a model API refuses it. Select whole tool-call groups "
                "(agents.memory.Conversation's selectors do) or drop the result."
            )
            raise FieldValidationError(msg)


def message_text(message: Mapping[str, Any] | MemoryItem) -> str:
    """Return the text of a message: its string content, or its text parts joined by newlines."""
    content = (
        message.get("content") if isinstance(message, Mapping) else message.get_value("content")
    )
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def image_count(message: Mapping[str, Any] | MemoryItem) -> int:
    """Return how many image parts a message's content holds."""
    content = (
        message.get("content") if isinstance(message, Mapping) else message.get_value("content")
    )
    if not isinstance(content, list):
        return 0
    return sum(
        1 for part in content if isinstance(part, Mapping) and part.get("type") == _IMAGE_PART
    )


def tool_arguments(arguments: Any) -> str:
    """Return tool-call arguments as the JSON text a chat API expects (text is kept as it is)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
