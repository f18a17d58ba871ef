"""A strict checker for chat messages, derived from the ``openai`` package's typed message params.

``message_errors`` walks ``openai.types.chat.ChatCompletionMessageParam`` (a
union of TypedDicts) with the value: every key must be one the TypedDict
declares (no extra keys), every required key present, every value of the
declared type (``Iterable`` is a JSON array, ``Literal`` one of its values,
a union any of its members). The ``function`` role and the deprecated
``function_call`` key are left out: kvmemory never sends them.

``conversation_errors`` adds the chat API's tool-call rules, which the types
cannot state: the results of an assistant message's calls follow it
directly, one per call; a message's call ids are distinct.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, Union

from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from typing_extensions import NotRequired, Required, is_typeddict

_HINTS: dict[Any, dict[str, Any]] = {}

# typing has Required and NotRequired from Python 3.11; the openai package uses typing_extensions'.
_REQUIRED = {Required, getattr(typing, "Required", Required)}
_NOT_REQUIRED = {NotRequired, getattr(typing, "NotRequired", NotRequired)}


def _hints(typed_dict: Any) -> dict[str, Any]:
    if typed_dict not in _HINTS:
        _HINTS[typed_dict] = typing.get_type_hints(typed_dict, include_extras=True)
    return _HINTS[typed_dict]


def _required(typed_dict: Any) -> list[str]:
    """Return the required keys, read from ``Required[...]`` (string annotations hide them from ``__required_keys__``)."""
    required = []
    for key, hint in _hints(typed_dict).items():
        origin = typing.get_origin(hint)
        marked = origin in _REQUIRED
        unmarked = origin not in _NOT_REQUIRED
        if marked or (unmarked and typed_dict.__total__):
            required.append(key)
    return required


def _members(tp: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return tuple(m for arg in typing.get_args(tp) for m in _members(arg))
    return (tp,)


def type_errors(value: Any, tp: Any, where: str) -> list[str]:
    """Return how ``value`` fails the type ``tp`` (empty when it conforms), strictly."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated or origin in _REQUIRED or origin in _NOT_REQUIRED:
        return type_errors(value, typing.get_args(tp)[0], where)
    if tp is Any or tp is object:
        return []
    if tp is str:
        return [] if type(value) is str else [f"{where}: expected a string, got {value!r}"]
    if tp is type(None):
        return [] if value is None else [f"{where}: expected null, got {value!r}"]
    if tp is bool:
        return [] if type(value) is bool else [f"{where}: expected a bool, got {value!r}"]
    if origin is Literal:
        allowed = typing.get_args(tp)
        ok = any(type(value) is type(a) and value == a for a in allowed)
        return [] if ok else [f"{where}: expected one of {allowed!r}, got {value!r}"]
    if origin is Union or origin is types.UnionType:
        found = [type_errors(value, member, where) for member in _members(tp)]
        if any(not errors for errors in found):
            return []
        return min(found, key=len)
    if origin in (collections.abc.Iterable, collections.abc.Sequence, list):
        if type(value) is not list:
            return [f"{where}: expected an array, got {value!r}"]
        (item,) = typing.get_args(tp)
        return [e for i, v in enumerate(value) for e in type_errors(v, item, f"{where}[{i}]")]
    if is_typeddict(tp):
        if type(value) is not dict:
            return [f"{where}: expected an object ({tp.__name__}), got {value!r}"]
        hints = _hints(tp)
        errors = [f"{where}: key {k!r} is not in {tp.__name__}" for k in value if k not in hints]
        errors += [
            f"{where}: required key {k!r} of {tp.__name__} is missing"
            for k in _required(tp)
            if k not in value
        ]
        for key, hint in hints.items():
            if key in value:
                errors += type_errors(value[key], hint, f"{where}.{key}")
        return errors
    msg = f"the checker does not know the type {tp!r} (at {where})"
    raise NotImplementedError(msg)


def message_errors(message: Any, where: str = "message") -> list[str]:
    """Return what makes ``message`` invalid under the openai package's message params (empty when valid)."""
    role = message.get("role") if type(message) is dict else None
    if role == "function" or (type(message) is dict and "function_call" in message):
        return [f"{where}: the function role and function_call are deprecated"]
    candidates = [
        member
        for member in _members(ChatCompletionMessageParam)
        if typing.get_args(typing.get_args(_hints(member)["role"])[0]) == (role,)
    ]
    if not candidates:
        return [f"{where}: unknown role {role!r}"]
    errors = type_errors(message, candidates[0], where)
    content = message.get("content")
    if (
        role == "assistant"
        and content is None
        and not message.get("tool_calls")
        and message.get("refusal") is None
        and message.get("audio") is None
    ):
        errors.append(
            f"{where}: an assistant message needs content, tool_calls, a refusal or audio"
        )
    if isinstance(content, list) and not content:
        errors.append(f"{where}: content array must not be empty")
    if "tool_calls" in message and message["tool_calls"] == []:
        errors.append(f"{where}: tool_calls must not be empty")
    return errors


def conversation_errors(messages: list[Any]) -> list[str]:
    """Return the errors of every message, plus every break of the tool-call rules."""
    errors: list[str] = []
    pending: dict[str, bool] = {}
    for index, message in enumerate(messages):
        found = message_errors(message, f"messages[{index}]")
        errors += found
        if found:
            continue
        if message["role"] == "tool":
            cid = message["tool_call_id"]
            if pending.get(cid) is not False:
                errors.append(
                    f"messages[{index}]: answers {cid!r}, no open call of the assistant message before it"
                )
            else:
                pending[cid] = True
            continue
        errors += [
            f"messages[{index}]: call {c!r} was never answered" for c, d in pending.items() if not d
        ]
        pending = {}
        if message["role"] == "assistant":
            ids = [call["id"] for call in message.get("tool_calls") or ()]
            if len(set(ids)) < len(ids):
                errors.append(f"messages[{index}]: duplicate tool call ids {ids!r}")
            pending = dict.fromkeys(ids, False)
    errors += [f"end: call {c!r} was never answered" for c, d in pending.items() if not d]
    return errors


# -- hypothesis strategies of valid messages, shared by the test modules -------------------

TEXT = st.text(max_size=20)
NAME = st.sampled_from(["ann", "bob"])
URL = st.sampled_from(
    ["https://example.org/a.png", "HTTPS://EXAMPLE.ORG/B.PNG", "data:image/png;base64,AAAA"]
)
TEXT_PART = st.builds(lambda t: {"type": "text", "text": t}, TEXT)
USER_PART = st.one_of(
    TEXT_PART,
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, URL),
    st.builds(
        lambda u, d: {"type": "image_url", "image_url": {"url": u, "detail": d}},
        URL,
        st.sampled_from(["auto", "low", "high"]),
    ),
    st.builds(
        lambda f: {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": f}},
        st.sampled_from(["wav", "mp3"]),
    ),
    st.just({"type": "file", "file": {"file_id": "file-abc"}}),
    st.just({"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}}),
)
ASSISTANT_PART = st.one_of(TEXT_PART, st.builds(lambda t: {"type": "refusal", "refusal": t}, TEXT))


def _with_name(role: str, content: Any, name: str | None) -> dict[str, Any]:
    message = {"role": role, "content": content}
    if name is not None:
        message["name"] = name
    return message


PLAIN_MESSAGE = st.one_of(
    st.builds(
        _with_name,
        st.sampled_from(["system", "developer"]),
        st.one_of(TEXT, st.lists(TEXT_PART, min_size=1, max_size=3)),
        st.none() | NAME,
    ),
    st.builds(
        _with_name,
        st.just("user"),
        st.one_of(TEXT, st.lists(USER_PART, min_size=1, max_size=4)),
        st.none() | NAME,
    ),
    st.builds(
        _with_name,
        st.just("assistant"),
        st.one_of(TEXT, st.lists(ASSISTANT_PART, min_size=1, max_size=3)),
        st.none() | NAME,
    ),
    st.builds(lambda r: {"role": "assistant", "content": None, "refusal": r}, TEXT),
    st.builds(lambda a: {"role": "assistant", "audio": {"id": a}}, st.just("audio_1")),
    st.builds(lambda c: {"role": "assistant", "content": c, "audio": {"id": "audio_2"}}, TEXT),
)


def tool_call(call_id: str, custom: bool, arguments: str) -> dict[str, Any]:
    if custom:
        return {"id": call_id, "type": "custom", "custom": {"name": "sh", "input": arguments}}
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": arguments}}


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Draw a valid conversation: every role, part kind and tool-call shape, results in any order."""
    messages: list[dict[str, Any]] = []
    for index in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            messages.append(draw(PLAIN_MESSAGE))
        else:
            ids = [f"call_{index}_{n}" for n in range(draw(st.integers(1, 3)))]
            calls = [tool_call(i, draw(st.booleans()), draw(TEXT)) for i in ids]
            assistant: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
            assistant["content"] = draw(st.none() | TEXT)
            messages.append(assistant)
            for i in draw(st.permutations(ids)):
                content = draw(st.one_of(TEXT, st.lists(TEXT_PART, min_size=1, max_size=2)))
                messages.append({"role": "tool", "content": content, "tool_call_id": i})
    return messages
