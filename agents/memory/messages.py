"""Chat messages in and out: memory items as OpenAI-style role/content messages.

A *message item* is a plain :class:`~agents.memory.MemoryItem` with a
``role`` field (``"system"``, ``"developer"``, ``"user"``, ``"assistant"`` or
``"tool"``) and the keys of a chat message (:data:`MESSAGE_KEYS`):
``content`` (text, or a list of content parts), and where the role allows
them ``name``, ``refusal``, ``audio`` and ``tool_calls`` (assistant) and
``tool_call_id`` (tool). Any other field (tags, timestamps, a user id, a
message ``id``) rides along in the item and is left out of the messages
sent to a model.

* :func:`check_message` holds a message to the chat-completions schema (the
  typed message params of the ``openai`` package): which keys each role
  takes, which content parts (text everywhere; images, audio and files only
  in user messages; refusals only in assistant messages), and the shape of
  each part and tool call. What the schema refuses raises
  :class:`~agents.memory.FieldValidationError`.
* :func:`from_messages` turns chat messages into message items, checking
  each one. Image URLs a chat API takes (``http(s)://``,
  ``data:image/...;base64``) are kept as given; a local path in an incoming
  message is refused, or read into a ``data:`` URL with ``read_paths=True``
  (a message from another program must not make this one read its files),
  and never kept as a URL.
* :func:`to_messages` turns items (a ``Memory``, a list, or the records of a
  :class:`~agents.memory.prompt.WindowResult`) into chat messages. Message
  items give their message back exactly; other items (agent steps) become
  messages through a configurable mapping, their image paths read as
  ``data:`` URLs.
* :func:`settle_tool_calls` applies the chat API's tool-call rules: the
  results of an assistant message's calls follow it directly, one per call.
  A call left unanswered is refused by default, or dropped, or closed with a
  stated no-result message (``unanswered=``).

Messages in, messages out, identical: ``to_messages(from_messages(m)) == m``
for any list ``m`` of valid messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from agents.memory._images import image_url_problem, is_image_url
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
    "NO_RESULT",
    "ROLES",
    "UNANSWERED",
    "ItemToMessage",
    "check_message",
    "from_messages",
    "image_count",
    "is_message",
    "message_text",
    "settle_tool_calls",
    "to_messages",
    "tool_arguments",
]

ROLES: Final[tuple[str, ...]] = ("system", "developer", "user", "assistant", "tool")
"""The roles a message item may take."""

MESSAGE_KEYS: Final[tuple[str, ...]] = (
    "role",
    "content",
    "name",
    "refusal",
    "audio",
    "tool_calls",
    "tool_call_id",
)
"""The fields of a message item that :func:`to_messages` sends, in this order; other fields stay behind."""

UNANSWERED: Final[tuple[str, ...]] = ("refuse", "drop", "close")
"""The policies for a tool call without a result: raise, leave the call out, or answer it with :data:`NO_RESULT`."""

NO_RESULT: Final = (
    "No result: this tool call was not answered (it was interrupted or its result was lost)."
)
"""The content of the tool message that closes an unanswered call under ``unanswered="close"``."""

ItemToMessage = Callable[
    [Mapping[str, Any]], "Mapping[str, Any] | Sequence[Mapping[str, Any]] | None"
]
"""Maps one record to a message, a list of messages, or ``None`` (use the default mapping)."""

_IMAGE_PART: Final = "image_url"
_STEP_ROLES: Final = ("system", "developer", "user", "assistant")
_MISSING: Final = object()

# The keys of MESSAGE_KEYS each role takes, and the content part types it takes.
_ROLE_KEYS: Final[dict[str, frozenset[str]]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "refusal", "audio", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_PART_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
}
_KEY_HINTS: Final[dict[str, str]] = {
    "name": "a tool result carries no name (the call it answers is named by tool_call_id)",
    "refusal": "only an assistant message carries a refusal",
    "audio": (
        "only an assistant message carries audio (the {'id': ...} of an earlier spoken answer); "
        "send audio input as an 'input_audio' content part of a user message"
    ),
    "tool_calls": "only assistant messages call tools",
    "tool_call_id": "only tool results carry one",
}
_DETAILS: Final = ("auto", "low", "high", "original")
_AUDIO_FORMATS: Final = ("wav", "mp3")
_FILE_KEYS: Final = frozenset({"file_data", "file_id", "filename"})


def _where(position: int | None) -> str:
    return "the message" if position is None else f"message {position}"


def _refuse(position: int | None, problem: str) -> FieldValidationError:
    msg = f"{_where(position).capitalize()} {problem}"
    return FieldValidationError(msg)


def _keys_text(keys: Iterable[Any]) -> str:
    return ", ".join(sorted(map(repr, keys)))


def _part_problem(part: Any, role: str, read_paths: bool) -> str | None:
    """Return what is wrong with one content part of a ``role`` message, or ``None``."""
    if not isinstance(part, Mapping):
        return "is not a dict with a 'type'"
    kind = part.get("type")
    allowed = _PART_TYPES[role]
    if not isinstance(kind, str) or kind not in allowed:
        return f"has type {kind!r}; a {role} message takes parts of type {', '.join(map(repr, allowed))}"
    extra = set(part) - {"type", kind}
    if extra:
        return (
            f"has unknown keys {_keys_text(extra)}; a {kind!r} part holds 'type' and {kind!r} only"
        )
    value = part.get(kind, _MISSING)
    if kind in ("text", "refusal"):
        return None if isinstance(value, str) else f"needs a string {kind!r}, got {value!r}"
    if not isinstance(value, Mapping):
        return f"needs a dict {kind!r}, got {value!r}"
    if kind == _IMAGE_PART:
        return _image_problem(value, read_paths)
    if kind == "input_audio":
        if set(value) != {"data", "format"} or not isinstance(value["data"], str):
            return "needs 'input_audio': {'data': base64 text, 'format': 'wav' or 'mp3'} and nothing else"
        if value["format"] not in _AUDIO_FORMATS:
            return f"has audio format {value['format']!r}; use 'wav' or 'mp3'"
        return None
    # kind == "file"
    if (
        not value
        or set(value) - _FILE_KEYS
        or not all(isinstance(v, str) for v in value.values())
        or not ({"file_data", "file_id"} & set(value))
    ):
        return (
            "needs 'file': {'file_id': str} or {'file_data': base64 text, 'filename': str}, "
            f"with string values and no other keys; got {value!r}"
        )
    return None


def _image_problem(image: Mapping[Any, Any], read_paths: bool) -> str | None:
    url = image.get("url")
    if not isinstance(url, str):
        return "needs 'image_url': {'url': str}; give an http(s) URL, a data:image/...;base64 URL or (with read_paths=True) a path"
    extra = set(image) - {"url", "detail"}
    if extra:
        return f"has unknown image_url keys {_keys_text(extra)}; it holds 'url' and 'detail' only"
    if "detail" in image and image["detail"] not in _DETAILS:
        return f"has detail {image['detail']!r}; use one of {', '.join(map(repr, _DETAILS))}"
    problem = image_url_problem(url)
    if problem is None or (read_paths and not is_image_url(url)):
        return None  # a path with read_paths=True is read into a data: URL before it is kept
    if is_image_url(url):
        return f"has an image URL that {problem}"
    return (
        f"has an image URL that {problem}; to send a local file your program names, give it as a "
        "pathlib.Path in images= or pass read_paths=True (never for messages from another program)"
    )


def _check_content(
    message: Mapping[str, Any], role: str, position: int | None, read_paths: bool
) -> None:
    content = message.get("content", _MISSING)
    if content is None or content is _MISSING:
        if role != "assistant" or all(
            message.get(key) is None for key in ("tool_calls", "refusal", "audio")
        ):
            raise _refuse(
                position,
                f"({role}) has no content; only an assistant message with tool_calls, a refusal or "
                "audio may omit it.",
            )
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise _refuse(
            position,
            f"has content {content!r}; give text or a non-empty list of content parts.",
        )
    for index, part in enumerate(content):
        problem = _part_problem(part, role, read_paths)
        if problem is not None:
            raise _refuse(position, f"({role}) content part {index} {problem}: {_brief(part)}.")


def _check_tool_calls(calls: Any, position: int | None) -> None:
    if not isinstance(calls, list) or not calls:
        raise _refuse(position, f"has tool_calls {calls!r}; give a non-empty list of tool calls.")
    for index, call in enumerate(calls):
        if not _valid_call(call):
            raise _refuse(
                position,
                f"has tool call {index} = {_brief(call)}; expected {{'id': str, 'type': 'function', "
                "'function': {'name': str, 'arguments': str (JSON)}} or {'id': str, 'type': 'custom', "
                "'custom': {'name': str, 'input': str}}, with no other keys.",
            )


def _check_call_ids(message: Mapping[str, Any], position: int | None) -> None:
    seen: set[str] = set()
    for call in message.get("tool_calls") or ():
        if call["id"] in seen:
            raise _refuse(
                position,
                f"has two tool calls with id {call['id']!r}; each call of a message needs its own id.",
            )
        seen.add(call["id"])


def _valid_call(call: Any) -> bool:
    if (
        not isinstance(call, Mapping)
        or not isinstance(call.get("type"), str)
        or set(call) != {"id", "type", call["type"]}
    ):
        return False
    kind = call["type"]
    body = call.get(kind)
    wanted = {"function": ("name", "arguments"), "custom": ("name", "input")}.get(kind)
    return (
        wanted is not None
        and isinstance(call["id"], str)
        and isinstance(body, Mapping)
        and set(body) == set(wanted)
        and all(isinstance(body[key], str) for key in wanted)
    )


def check_message(
    message: Mapping[str, Any],
    position: int | None = None,
    *,
    distinct_ids: bool = True,
    read_paths: bool = False,
) -> None:
    """Check that ``message`` is a chat message the chat-completions schema accepts.

    The keys of :data:`MESSAGE_KEYS` are held to the schema of the message's
    role (``name`` on a tool result, ``refusal`` on a user message, image
    parts on a system message are refused); any other key is a custom field
    and is not checked (``function_call``, deprecated by the API, is refused).
    An image part's URL must be one a chat API takes: ``http(s)://`` with a
    host, or ``data:image/<type>;base64,...``; a local path is refused
    unless ``read_paths`` says the caller reads it. Rules between messages
    (tool calls and their results) are those of :func:`settle_tool_calls`.

    Args:
        message: The message (``role``, ``content`` and the keys of :data:`MESSAGE_KEYS`).
        position: Its index, named in the error.
        distinct_ids: Refuse two tool calls with one id (``False`` leaves
            them to :func:`settle_tool_calls` and its ``unanswered`` policy).
        read_paths: Accept a local path as an image URL, because the caller
            reads it into a ``data:`` URL (as :func:`from_messages` does with
            ``read_paths=True``).

    Raises:
        FieldValidationError: naming the message and what is wrong with it.
    """
    if not isinstance(message, Mapping):
        raise _refuse(
            position, f"is {_brief(message)}; a message is a dict with 'role' and 'content'."
        )
    odd = [key for key in message if type(key) is not str]
    if odd:
        raise _refuse(position, f"has non-string keys {_keys_text(odd)}; message keys are strings.")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise _refuse(position, f"has role {_brief(role)}; use one of {list(ROLES)}.")
    allowed = _ROLE_KEYS[role]
    for key in MESSAGE_KEYS:
        if key in message and key not in allowed:
            raise _refuse(position, f"({role}) has {key!r}; {_KEY_HINTS[key]}.")
    if message.get("function_call") is not None:
        raise _refuse(
            position,
            "has 'function_call', which the chat API deprecated; give the call as tool_calls=[...].",
        )
    _check_content(message, role, position, read_paths)
    if "tool_calls" in message:
        _check_tool_calls(message["tool_calls"], position)
        if distinct_ids:
            _check_call_ids(message, position)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise _refuse(
            position,
            "(tool) has no string 'tool_call_id'; name the id of the tool call it answers.",
        )
    if "name" in message and not isinstance(message["name"], str):
        raise _refuse(position, f"has name {_brief(message['name'])}; give a string.")
    if "refusal" in message and not (
        message["refusal"] is None or isinstance(message["refusal"], str)
    ):
        raise _refuse(position, f"has refusal {_brief(message['refusal'])}; give a string.")
    audio = message.get("audio")
    if audio is not None and not (
        isinstance(audio, Mapping) and set(audio) == {"id"} and isinstance(audio["id"], str)
    ):
        raise _refuse(
            position,
            f"has audio {_brief(audio)}; an assistant's audio is {{'id': str}}, the id of its earlier spoken answer.",
        )


def _read_paths(message: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [_send_part(part) for part in content]
    return out


def from_messages(
    messages: Iterable[Mapping[str, Any]], *, read_paths: bool = False
) -> list[MemoryItem]:
    """Return chat messages as message items, all or nothing.

    Every key of each message is kept as a field (custom keys too). An image
    URL is kept as it is given when a chat API takes it (``http(s)://`` or
    ``data:image/<type>;base64,...``). A local path is refused, and no file
    is read, unless ``read_paths=True``: then the file is read now and kept
    as a ``data:`` URL. A path is never kept as a URL.

    Args:
        messages: The chat messages.
        read_paths: Read image parts that name a local file now, as ``data:``
            URLs. Only for messages your own program wrote: a message from
            elsewhere could name any file the process can read.

    Raises:
        FieldValidationError: naming the first message that is not a valid
            chat message (two tool calls of a message with one id included,
            and an image URL a chat API refuses, such as a path without
            ``read_paths``).
        ImageReadError: with ``read_paths``, naming a file that cannot be read as an image.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        msg = f"Chat messages come as a list of message dicts, got {_brief(messages)}."
        raise FieldValidationError(msg)
    listed = list(messages)
    for position, message in enumerate(listed):
        check_message(message, position, read_paths=read_paths)
    if read_paths:
        listed = [_read_paths(message) for message in listed]
    return [MemoryItem(**dict(message)) for message in listed]


def is_message(record: Mapping[str, Any] | MemoryItem) -> bool:
    """Return whether ``record`` is a message item (its ``role`` is one of :data:`ROLES`)."""
    role = record.get("role") if isinstance(record, Mapping) else record.get_value("role")
    return isinstance(role, str) and role in ROLES


def _message_of(record: Mapping[str, Any]) -> dict[str, Any]:
    return {key: record[key] for key in MESSAGE_KEYS if key in record}


def _send_part(part: Mapping[str, Any]) -> Any:
    if part.get("type") != _IMAGE_PART:
        return part
    image = part[_IMAGE_PART]
    url = image_data_url(image["url"])
    if url == image["url"]:
        return part
    return {**part, _IMAGE_PART: {**image, "url": url}}


def _step_image(record: Mapping[str, Any], ref: str, images: str) -> str:
    """Return a step's image reference as a URL a chat API takes, or raise naming the step."""
    url = image_data_url(ref) if images == "data" else ref
    problem = image_url_problem(url)
    if problem is None:
        return url
    whose = f"step {record['step']!r}" if "step" in record else f"the step item {_brief(record)}"
    fix = (
        "send it with images='data' (the default), which reads an image path into a data: URL"
        if images == "keep" and not is_image_url(ref)
        else "store an http(s) URL, a data:image/...;base64 URL or the path of an image file"
    )
    msg = f"Image {_brief(ref)} of {whose} {problem}; {fix}."
    raise FieldValidationError(msg)


def _step_messages(
    record: Mapping[str, Any],
    role: str,
    text_keys: Sequence[str] | None,
    image_keys: Sequence[str],
    text: Callable[[Mapping[str, Any]], str] | None,
    images: str,
) -> list[dict[str, Any]]:
    plain = {k: v for k, v in record.items() if k not in image_keys}
    if text_keys is not None:
        plain = {k: plain[k] for k in text_keys if k in plain}
    body = text(plain) if text is not None else render_json([plain])[1:-1]
    refs = [ref for key in image_keys if key in record for ref in image_refs(record[key])]
    if not refs:
        return [{"role": role, "content": body}]
    image_parts = [
        {"type": _IMAGE_PART, _IMAGE_PART: {"url": _step_image(record, ref, images)}}
        for ref in refs
    ]
    if role == "user":
        return [{"role": role, "content": [{"type": "text", "text": body}, *image_parts]}]
    # Only user messages may hold images: the step's images follow it in a
    # user message that says whose they are.
    step = f" (step {record['step']})" if "step" in record else ""
    note = f"The images of the {role} message above{step}."
    return [
        {"role": role, "content": body},
        {"role": "user", "content": [{"type": "text", "text": note}, *image_parts]},
    ]


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
    unanswered: str = "refuse",
) -> list[dict[str, Any]]:
    """Return items as OpenAI-style chat messages, in order.

    A message item (one with a ``role`` of :data:`ROLES`) gives its message:
    the fields of :data:`MESSAGE_KEYS` it holds, unchanged (an image URL is
    sent as stored; a path in a message item is never read here, nor sent:
    it is refused, see :func:`from_messages`). Any other item (an agent step) becomes one
    message of role ``role`` whose text is the item's fields as compact JSON
    (or ``text(fields)``), followed by one ``image_url`` part per image its
    ``image_keys`` fields name. Only user messages may hold images, so the
    images of a step rendered as a system, developer or assistant message go
    in a user message right after it, whose text says whose images they are
    (``"The images of the assistant message above (step 3)."``).

    Tool calls follow the chat API's rules (see :func:`settle_tool_calls`):
    the results of an assistant message's calls come right after it, one
    per call; a call left without a result is handled by ``unanswered``.

    Args:
        source: A ``Memory``, items or records, or a ``WindowResult`` (its
            projected records, so the window's budget holds).
        role: The role of messages made from step items (``"system"``,
            ``"developer"``, ``"user"`` or ``"assistant"``), or a function of
            the record that gives it (``lambda r: "assistant" if r["agent"] == "app" else "user"``).
        text_keys: The fields of a step item that make its text (default: all non-image fields).
        image_keys: The fields of a step item that hold image paths or URLs.
        text: Renders the chosen fields of a step item as its text.
        convert: Maps a record to a message, a list of messages, or ``None``
            to fall back to the rules above; its messages are checked.
        images: ``"data"`` reads the image paths of step items into
            ``data:`` URLs; ``"keep"`` passes their URLs as they are (for
            models that fetch them) and refuses a path. Either way every
            image URL sent is one a chat API takes (see :func:`check_message`).
        unanswered: What to do with a tool call no result answers:
            ``"refuse"`` (raise), ``"drop"`` (leave the call out, and late or
            orphan results with it) or ``"close"`` (answer it with a tool
            message holding :data:`NO_RESULT`; late or orphan results are left out).

    Returns:
        Fresh message dicts; changing them never changes the memory.

    Raises:
        FieldValidationError: for an invalid role, a malformed message, an
            image URL a chat API refuses (a path in a message item, or in a
            step item with ``images="keep"``), or (with
            ``unanswered="refuse"``) a tool call or result that breaks the
            pairing rules.
        ImageReadError: naming a file that cannot be read as an image.
    """
    if not callable(role):
        _check_role(role, "role")
    if images not in ("data", "keep"):
        msg = f"images={images!r} must be 'data' (read paths into data: URLs) or 'keep'."
        raise FieldValidationError(msg)
    _check_unanswered(unanswered)
    out: list[dict[str, Any]] = []
    for record in _records(source):
        made = convert(record) if convert is not None else None
        if made is not None:
            many = [made] if isinstance(made, Mapping) else list(made)
            for message in many:
                check_message(message, len(out), distinct_ids=False)
                out.append(_message_of(message))
        elif is_message(record):
            check_message(record, len(out), distinct_ids=False)
            out.append(_message_of(record))
        else:
            step_role = role(record) if callable(role) else role
            if callable(role):
                _check_role(step_role, f"role({_brief(record)})")
            out.extend(_step_messages(record, step_role, text_keys, image_keys, text, images))
    return [dict(message) for message in settle_tool_calls(out, unanswered=unanswered)]


def _check_role(role: object, what: str) -> None:
    if not isinstance(role, str) or role not in _STEP_ROLES:
        msg = (
            f"{what} gave {role!r}, which is not a role a step can take; use one of "
            f"{list(_STEP_ROLES)} (a tool message needs the call it answers)."
        )
        raise FieldValidationError(msg)


def _check_unanswered(unanswered: object) -> None:
    if not isinstance(unanswered, str) or unanswered not in UNANSWERED:
        msg = (
            f"unanswered={unanswered!r} must be 'refuse' (raise), 'drop' (leave unanswered calls out) "
            "or 'close' (answer them with a no-result tool message)."
        )
        raise FieldValidationError(msg)


def _brief(value: Any) -> str:
    text = repr(dict(value)) if isinstance(value, Mapping) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _get(record: Mapping[str, Any] | MemoryItem, key: str) -> Any:
    return record.get(key) if isinstance(record, Mapping) else record.get_value(key)


def _fields(record: Mapping[str, Any] | MemoryItem) -> dict[str, Any]:
    return dict(record) if isinstance(record, Mapping) else record.to_dict()


def _call_name(call: Any) -> str:
    if isinstance(call, Mapping):
        body = call.get(call.get("type"))
        if isinstance(body, Mapping) and isinstance(body.get("name"), str):
            return f"tool {body['name']!r}"
    return "a tool"


def _call_id(call: Any) -> Any:
    return call.get("id") if isinstance(call, Mapping) else None


M = TypeVar("M", bound="Mapping[str, Any] | MemoryItem")


def settle_tool_calls(
    messages: Sequence[M], *, unanswered: str = "refuse"
) -> list[M | dict[str, Any]]:
    """Return messages that follow the chat API's tool-call rules, by the ``unanswered`` policy.

    The rules: the tool results of an assistant message's ``tool_calls``
    come right after it (in any order), one per call, before any other
    message; a result answers a call of that message, once; a message's calls
    have distinct ids (the same id may come back in a later turn). What
    breaks them:

    * a call no result answers (a crash between the call and its result,
      one of two calls answered, a result that came after another message);
    * a result that answers no call of the assistant message right before
      its group (an orphan, a late result, a second result for one call);
    * two calls of one message with the same id.

    With ``"refuse"`` each raises. With ``"drop"`` unanswered calls are left
    out of their assistant message (the message itself when nothing else is
    left in it), as are stray results and repeated call ids. With
    ``"close"`` each unanswered call is answered by a tool message whose
    content is :data:`NO_RESULT`, placed after the group's results; stray
    results and repeated call ids are left out.

    Args:
        messages: Chat messages or message items, in order; other items
            count as messages that end a tool group.
        unanswered: ``"refuse"``, ``"drop"`` or ``"close"``.

    Returns:
        The messages in order: an unchanged message is the very object
        given; a changed assistant message and a closing tool message are
        new dicts.

    Raises:
        FieldValidationError: under ``"refuse"``, naming the call or the result
            and the fix; for an unknown policy.
    """
    _check_unanswered(unanswered)
    out: list[M | dict[str, Any]] = []
    pending: dict[str, bool] = {}  # call id -> answered, for the open group
    head = -1  # index in out of the open group's assistant message
    closed: dict[str, int] = {}  # call id -> index in out of its call, for groups already closed

    def close_group() -> None:
        nonlocal head
        if head < 0:
            return
        missing = [cid for cid, done in pending.items() if not done]
        assistant = out[head]
        if missing:
            calls = _get(assistant, "tool_calls")
            named = {
                cid: _call_name(call) for call in calls if isinstance(cid := _call_id(call), str)
            }
            if unanswered == "refuse":
                cid = missing[0]
                msg = (
                    f"The assistant message calling {named[cid]} (call id {cid!r}) has no tool result "
                    "right after it; a chat API refuses the request. Pass unanswered='close' (answer it "
                    "with a stated no-result message) or unanswered='drop' (leave the call out), or "
                    "repair the stored history with Conversation.repair_tool_calls()."
                )
                raise FieldValidationError(msg)
            if unanswered == "close":
                out.extend(
                    {"role": "tool", "content": NO_RESULT, "tool_call_id": cid} for cid in missing
                )
            else:
                _drop_calls(out, head, set(missing))
        for cid in pending:
            closed[cid] = head
        pending.clear()
        head = -1

    for message in messages:
        role = _get(message, "role")
        if role == "tool":
            cid = _get(message, "tool_call_id")
            if isinstance(cid, str) and pending.get(cid) is False:
                pending[cid] = True
                out.append(message)
                continue
            if unanswered == "refuse":
                raise FieldValidationError(_stray_result(cid, pending, closed))
            continue
        close_group()
        calls = _get(message, "tool_calls") if role == "assistant" else None
        if not calls or not isinstance(calls, list):
            out.append(message)
            continue
        ids = [_call_id(call) for call in calls]
        kept: M | dict[str, Any] = message
        if len(set(map(repr, ids))) < len(ids):
            if unanswered == "refuse":
                msg = (
                    f"An assistant message has tool calls with the same id among {ids!r}; "
                    "a chat API refuses the request. Give each call of a message its own id, or pass "
                    "unanswered='drop' or 'close' to keep the first call of each id."
                )
                raise FieldValidationError(msg)
            firsts: dict[str, Any] = {}
            for call in calls:
                firsts.setdefault(repr(_call_id(call)), call)
            kept = {**_fields(message), "tool_calls": list(firsts.values())}
            ids = [_call_id(call) for call in firsts.values()]
        head = len(out)
        out.append(kept)
        pending.update((cid, False) for cid in ids if isinstance(cid, str))
    close_group()
    return out


def _stray_result(cid: Any, pending: Mapping[str, bool], closed: Mapping[str, int]) -> str:
    if not isinstance(cid, str):
        return (
            f"A tool result has tool_call_id {_brief(cid)}, not the string id of a call; a chat API "
            "refuses the request. Pass unanswered='drop' or 'close' to leave it out, or repair the "
            "stored history with Conversation.repair_tool_calls()."
        )
    if pending.get(cid) is True:
        why = "answers it a second time"
    elif cid in closed:
        why = "comes after another message; a result must follow its call's assistant message directly"
    else:
        why = "answers no call of an earlier assistant message"
    return (
        f"The tool result for call id {cid!r} {why}; a chat API refuses the "
        "request. Select whole tool-call groups (agents.memory.Conversation's selectors do), pass "
        "unanswered='drop' or 'close' to leave stray results out, or repair the stored history "
        "with Conversation.repair_tool_calls()."
    )


def _drop_calls(out: list[Any], head: int, missing: set[str]) -> None:
    """Leave the ``missing`` calls out of the assistant message at ``out[head]`` (all of it when empty)."""
    fields = _fields(out[head])
    kept = [
        call
        for call in fields["tool_calls"]
        if not (isinstance(cid := _call_id(call), str) and cid in missing)
    ]
    if kept:
        fields["tool_calls"] = kept
        out[head] = fields
        return
    del fields["tool_calls"]
    if any(fields.get(key) is not None for key in ("content", "refusal", "audio")):
        out[head] = fields
    else:
        del out[head]  # no result follows it: none of its calls was answered


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
