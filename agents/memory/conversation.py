"""Conversations: a chat history kept as a memory of message items, and what goes into the prompt.

A :class:`Conversation` is a ``Memory`` whose items are chat messages (see
:mod:`agents.memory.messages`), plus a *scratchpad*: a second memory for
the working steps of the current request, kept apart from the history.

* Appending by role, reading the last user message and tagging are one call
  each (:meth:`Conversation.add_user`, :meth:`Conversation.last_user_message`,
  :meth:`Conversation.tag`).
* Selectors choose what goes into the prompt. :class:`LastMessages` and
  :class:`TokenBudget` take the newest messages, whole *groups* at a time,
  and stop at the first group that does not fit, so the selection has no
  gaps; an assistant message that calls tools and the tool results that
  follow it form one group, so a call is never split from its result. The
  system messages that open the conversation are kept (and counted). Any
  function ``memory -> list of items`` is a selector too.
* :meth:`Conversation.for_context` opens the conversation of a set of
  context keys (``{"chat_id": 42, "user": "ann"}``) in a store; the same keys
  give the same session in any process (see :func:`context_session_id`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
from typing_extensions import Self

from agents.memory._item import MemoryItem
from agents.memory.exceptions import (
    BudgetExceededError,
    InvalidArgumentError,
    InvalidSessionIdError,
)
from agents.memory.memory import Memory
from agents.memory.messages import (
    MESSAGE_KEYS,
    check_message,
    from_messages,
    image_count,
    to_messages,
    tool_arguments,
)
from agents.memory.prompt import EstimateCounter, TokenCounter, render_json

if TYPE_CHECKING:
    from agents.memory.search import Embedder, Hit, SearchMode, Where
    from agents.memory.stores import BaseStore

__all__ = [
    "Conversation",
    "LastMessages",
    "MessageSelector",
    "TokenBudget",
    "context_session_id",
    "message_tokens",
]

MessageSelector = Callable[[Memory], Sequence[MemoryItem]]
"""Chooses the messages of a conversation that go into the prompt, in memory order."""

_MAX_PREFIX: Final = 60
_MAX_INT_DIGITS: Final = 4300
_INT_LIMIT: Final = 10**_MAX_INT_DIGITS
_STEPS_SUFFIX: Final = ".steps"


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text (no lone surrogates), so that its JSON escape names it alone."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _steps_session_id(session_id: str) -> str:
    """Return the scratchpad's session id: ``session_id + ".steps"``, its digest shortened to fit the id limit."""
    from agents.memory.stores import SESSION_ID_MAX_LENGTH

    over = len(session_id) + len(_STEPS_SUFFIX) - SESSION_ID_MAX_LENGTH
    # Only prefixes of 58 to 60 characters need it; the digest keeps at least 61 hex digits.
    return (session_id[:-over] if over > 0 else session_id) + _STEPS_SUFFIX


def context_session_id(context: Mapping[str, Any], *, prefix: str = "chat") -> str:
    """Return the session id of a set of context keys: stable across processes, distinct per context.

    The id is ``f"{prefix}-{h}"`` where ``h`` is the SHA-256 hex digest of
    the context as compact ASCII JSON with its keys sorted, that is
    ``json.dumps(context, sort_keys=True, separators=(",", ":"))``
    (``{"chat_id":42,"user":"ann"}``).
    The key order does not matter; the value types do (``42`` and ``"42"``
    are different contexts). Two different contexts share an id only if
    SHA-256 collides.

    Strings (keys and values) must be Unicode text: a string holding a lone
    surrogate (``"\\ud83d\\ude00"`` written as two code points) is refused,
    since its JSON escape is the escape of the character ``"\\U0001F600"``
    and the two contexts would share a conversation.

    Args:
        context: Keys (strings) to values that are strings, ints of at most
            4300 digits, finite floats, bools or ``None``.
        prefix: Starts the id (1 to 60 of ASCII letters, digits, ``_``, ``.``, ``-``).

    Raises:
        InvalidSessionIdError: for a non-string key, a string holding a lone
            surrogate, an int of more than 4300 digits, another type of
            value, or a bad prefix (naming the key or the prefix).
    """
    if not isinstance(context, Mapping) or not context:
        msg = f"A conversation context is a non-empty dict of keys to values, got {context!r}."
        raise InvalidSessionIdError(msg)
    for key, value in context.items():
        if type(key) is not str:
            msg = f"Context key {key!r} is a {type(key).__name__}; context keys are strings."
            raise InvalidSessionIdError(msg)
        if not _is_text(key):
            msg = f"Context key {key!r} holds a lone surrogate; context keys and values are Unicode text (encodable as UTF-8)."
            raise InvalidSessionIdError(msg)
        if type(value) is str and not _is_text(value):
            # Its JSON escape would equal the escape of the character the pair
            # stands for, so two contexts would share one conversation.
            msg = f"Context key {key!r} has a value holding a lone surrogate ({value[:40]!r}); context strings are Unicode text (encodable as UTF-8)."
            raise InvalidSessionIdError(msg)
        if type(value) is int and not -_INT_LIMIT < value < _INT_LIMIT:
            msg = f"Context key {key!r} has an int of more than {_MAX_INT_DIGITS} digits; context ints have at most {_MAX_INT_DIGITS}, so that every Python process can write them."
            raise InvalidSessionIdError(msg)
        if not (
            value is None
            or type(value) in (str, int, bool)
            or (type(value) is float and math.isfinite(value))
        ):
            msg = (
                f"Context key {key!r} has value {value!r} ({type(value).__name__}); context values are "
                "strings, ints, finite floats, bools or None, so that the id is the same in every process."
            )
            raise InvalidSessionIdError(msg)
    if type(prefix) is not str or not 1 <= len(prefix) <= _MAX_PREFIX:
        msg = f"prefix={prefix!r} must be a string of 1 to {_MAX_PREFIX} characters."
        raise InvalidSessionIdError(msg)
    from agents.memory.stores import check_session_id

    try:
        canonical = json.dumps(dict(context), sort_keys=True, separators=(",", ":")).encode("ascii")
    except (
        ValueError
    ) as exc:  # this process limits int digits below the default (sys.set_int_max_str_digits)
        msg = f"The context cannot be written as JSON in this process ({exc}); use smaller ints."
        raise InvalidSessionIdError(msg) from exc
    return check_session_id(f"{prefix}-{hashlib.sha256(canonical).hexdigest()}")


def message_tokens(message: MemoryItem, counter: TokenCounter) -> int:
    """Return what one message item costs in a prompt under ``counter``.

    The cost: the tokens of the message's keys (:data:`~agents.memory.messages.MESSAGE_KEYS`)
    as compact JSON with its image parts left out, plus one for the
    separator, plus ``counter.image_tokens`` per image part.
    """
    record = {key: message[key] for key in MESSAGE_KEYS if key in message}
    content = record.get("content")
    if isinstance(content, list):
        record["content"] = [
            part
            for part in content
            if not (isinstance(part, Mapping) and part.get("type") == "image_url")
        ]
    return (
        counter.count(render_json([record])[1:-1]) + 1 + image_count(message) * counter.image_tokens
    )


def _groups_newest_first(items: Iterator[MemoryItem]) -> Iterator[list[MemoryItem]]:
    """Yield the items in groups, newest group first, each group in memory order.

    An assistant message with ``tool_calls`` and the tool results right after
    it form one group; every other item stands alone.
    """
    pending: list[MemoryItem] = []  # tool results, newest first, waiting for their call
    for item in items:
        role = item.get_value("role")
        if role == "tool":
            pending.append(item)
            continue
        if pending and role == "assistant" and item.get_value("tool_calls"):
            yield [item, *reversed(pending)]
            pending = []
            continue
        for orphan in pending:
            yield [orphan]
        pending = []
        yield [item]
    for orphan in pending:
        yield [orphan]


def _leading_system(memory: Memory) -> list[MemoryItem]:
    pinned: list[MemoryItem] = []
    for index in range(len(memory)):
        item = memory[index]
        if item.get_value("role") != "system":
            break
        pinned.append(item)
    return pinned


def _take_newest(
    memory: Memory,
    keep_system: bool,
    cost: Callable[[MemoryItem], int],
    limit: int,
    what: str,
) -> list[MemoryItem]:
    pinned = _leading_system(memory) if keep_system else []
    spent = sum(cost(item) for item in pinned)
    if spent > limit:
        msg = (
            f"The {len(pinned)} opening system messages alone cost {spent} {what}, more than the limit of "
            f"{limit}; raise the limit, shorten the system prompt, or pass keep_system=False."
        )
        raise BudgetExceededError(msg)
    pinned_ids = {id(item) for item in pinned}
    chosen: list[list[MemoryItem]] = []
    for group in _groups_newest_first(memory.iter_newest()):
        if any(id(item) in pinned_ids for item in group):
            break
        price = sum(cost(item) for item in group)
        if spent + price > limit:
            break
        spent += price
        chosen.append(group)
    return [*pinned, *(item for group in reversed(chosen) for item in group)]


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 0:
        msg = f"{attribute.name} must be an int >= 0, got {value!r}."
        raise InvalidArgumentError(msg)


@attrs.frozen
class LastMessages:
    """Select the last ``k`` messages, never splitting a tool call from its results.

    Whole groups are taken newest first while they fit in ``k``; the
    selection stops at the first group that does not, so it may hold fewer
    than ``k`` messages but never has a gap.

    Args:
        k: The most messages to select (the opening system messages count).
        keep_system: Always keep the system messages that open the conversation.
    """

    k: int = attrs.field(validator=_non_negative)
    keep_system: bool = True

    def __call__(self, memory: Memory) -> list[MemoryItem]:
        """Return the selected message items of ``memory``, in memory order.

        Raises:
            BudgetExceededError: if the opening system messages alone are more than ``k``.
        """
        return _take_newest(memory, self.keep_system, lambda item: 1, self.k, "messages")


@attrs.frozen
class TokenBudget:
    """Select the last messages within a token budget, never splitting a tool call from its results.

    Each message costs :func:`message_tokens` under ``counter`` (its text and
    ``counter.image_tokens`` per image). Whole groups are taken newest
    first while they fit; the selection stops at the first group that does not.

    Args:
        max_tokens: The budget.
        counter: The token counter (default :class:`~agents.memory.EstimateCounter`).
        keep_system: Always keep (and charge) the system messages that open the conversation.
    """

    max_tokens: int = attrs.field(validator=_non_negative)
    counter: TokenCounter = attrs.field(factory=EstimateCounter)
    keep_system: bool = True

    def __call__(self, memory: Memory) -> list[MemoryItem]:
        """Return the selected message items of ``memory``, in memory order.

        Raises:
            BudgetExceededError: if the opening system messages alone break the budget.
        """
        counter = self.counter
        return _take_newest(
            memory,
            self.keep_system,
            lambda item: message_tokens(item, counter),
            self.max_tokens,
            "tokens",
        )


class Conversation:
    """A chat history of message items, and a scratchpad of the current request's steps.

    Args:
        history: The memory that holds the messages (a new in-RAM memory by
            default; a stored one from ``open_memory`` writes every message through).
        scratchpad: The memory for the working steps of the current request
            (a new in-RAM memory by default).
        keep_steps: Keep the scratchpad's steps when a new request begins
            (by default :meth:`new_request` clears them).
    """

    def __init__(
        self,
        history: Memory | None = None,
        *,
        scratchpad: Memory | None = None,
        keep_steps: bool = False,
    ) -> None:
        self.history = history if history is not None else Memory()
        self.scratchpad = scratchpad if scratchpad is not None else Memory()
        self.keep_steps = keep_steps
        self._store: BaseStore | None = None

    @classmethod
    def for_context(
        cls,
        store: str | os.PathLike[str] | BaseStore,
        context: Mapping[str, Any],
        *,
        prefix: str = "chat",
        keep_steps: bool = False,
    ) -> Self:
        """Open the conversation of ``context`` in ``store``; the same keys give it back in any process.

        The history is the session :func:`context_session_id` names. With
        ``keep_steps``, the scratchpad is kept too, in the session of that id
        plus ``".steps"`` (for a prefix of 58 to 60 characters the digest in
        that id is cut to keep it within 128 characters), and is not cleared
        by :meth:`new_request`; otherwise it lives in RAM for the current
        request only. Both ids are checked before the store is opened, so a
        refused call creates no file.

        Args:
            store: A store URL or path (opened now, closed by :meth:`close`) or an open store.
            context: The keys that name the conversation (``{"chat_id": 42, "user": "ann"}``).
            prefix: Starts the session id.
            keep_steps: Keep the scratchpad in the store across requests.

        Raises:
            InvalidSessionIdError: if the context cannot name a session.
            StoreError: if the store cannot be opened or read.
        """
        from agents.memory.stores import BaseStore, open_memory, open_store

        session_id = context_session_id(context, prefix=prefix)
        steps_id = _steps_session_id(session_id)  # checked before the store is opened or created
        owned = None if isinstance(store, BaseStore) else open_store(store)
        opened = store if isinstance(store, BaseStore) else owned
        assert opened is not None  # one of the two branches opened it
        try:
            history = open_memory(opened, session_id)
            scratchpad = open_memory(opened, steps_id) if keep_steps else None
        except BaseException:
            if owned is not None:
                owned.close()
            raise
        conversation = cls(history, scratchpad=scratchpad, keep_steps=keep_steps)
        conversation._store = owned
        return conversation

    # -- adding ----------------------------------------------------------------

    def add(
        self,
        role: str,
        content: str | list[dict[str, Any]] | None = None,
        *,
        images: Iterable[str | os.PathLike[str]] = (),
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        tool_call_id: str | None = None,
        name: str | None = None,
        tags: Iterable[str] = (),
        **fields: Any,
    ) -> MemoryItem:
        """Append one message and return its item.

        Args:
            role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
            content: Text, or a list of content parts.
            images: Image paths or URLs, appended as ``image_url`` parts (a
                path is read when messages are built, not now).
            tool_calls: On an assistant message: calls as ``{"id", "type":
                "function", "function": {"name", "arguments"}}``; arguments
                that are not text are written as JSON.
            tool_call_id: On a tool message: the id of the call it answers.
            name: The participant's name.
            tags: Tags of the message (see :meth:`tag`).
            **fields: Any other fields, kept in the item and left out of messages.

        Raises:
            FieldValidationError: naming what makes the message invalid; nothing is added.
        """
        message: dict[str, Any] = {"role": role}
        refs = [os.fspath(ref) for ref in images]
        if refs:
            parts: list[dict[str, Any]] = []
            if isinstance(content, str):
                parts.append({"type": "text", "text": content})
            elif content is not None:
                parts.extend(content)
            parts.extend({"type": "image_url", "image_url": {"url": ref}} for ref in refs)
            message["content"] = parts
        elif content is not None:
            message["content"] = content
        if name is not None:
            message["name"] = name
        if tool_calls is not None:
            message["tool_calls"] = [_tool_call(call) for call in tool_calls]
        if tool_call_id is not None:
            message["tool_call_id"] = tool_call_id
        tag_list = list(tags)
        if tag_list:
            message["tags"] = tag_list
        message.update(fields)
        check_message(message)
        item = MemoryItem(**message)
        self.history.add_memory_item(item)
        return item

    def add_system(self, content: str | list[dict[str, Any]], **fields: Any) -> MemoryItem:
        """Append a system message (see :meth:`add` for ``fields``)."""
        return self.add("system", content, **fields)

    def add_user(self, content: str | list[dict[str, Any]], **fields: Any) -> MemoryItem:
        """Append a user message (see :meth:`add` for ``fields``)."""
        return self.add("user", content, **fields)

    def add_assistant(
        self, content: str | list[dict[str, Any]] | None = None, **fields: Any
    ) -> MemoryItem:
        """Append an assistant message, with ``tool_calls=[...]`` when it calls tools (see :meth:`add`)."""
        return self.add("assistant", content, **fields)

    def add_tool(
        self, content: str | list[dict[str, Any]], *, tool_call_id: str, **fields: Any
    ) -> MemoryItem:
        """Append the result of the tool call ``tool_call_id`` (see :meth:`add`)."""
        return self.add("tool", content, tool_call_id=tool_call_id, **fields)

    def add_messages(self, messages: Iterable[Mapping[str, Any]]) -> list[MemoryItem]:
        """Append chat messages (every key kept as a field), all or nothing.

        Raises:
            FieldValidationError: naming the first invalid message; nothing is added.
        """
        items = from_messages(messages)
        self.history.add_memory_items(items)
        return items

    # -- reading -----------------------------------------------------------------

    def last_user_message(self) -> MemoryItem | None:
        """Return the newest user message, or ``None`` when there is none (reads newest first)."""
        for item in self.history.iter_newest():
            if item.get_value("role") == "user":
                return item
        return None

    def tag(self, item: MemoryItem, *tags: str) -> None:
        """Add ``tags`` to a message's ``tags`` field (each once, in order; written through when stored)."""
        old = item.get_value("tags") or []
        new = list(old) + [tag for tag in dict.fromkeys(tags) if tag not in old]
        if new != old:
            item["tags"] = new

    def tagged(self, tag: str) -> list[MemoryItem]:
        """Return the messages tagged ``tag``, in order."""
        return self.history.select(lambda item: tag in (item.get_value("tags") or ()))

    def select(self, selector: MessageSelector | None = None) -> list[MemoryItem]:
        """Return the messages ``selector`` chooses (all when ``None``), in memory order."""
        if selector is None:
            return self.history.content
        return list(selector(self.history))

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        keys: Iterable[str] | None = ("content",),
        mode: SearchMode = "keyword",
        where: Where | None = None,
        embedder: Embedder | None = None,
    ) -> list[Hit]:
        """Return the messages of the history that best match ``query``, best first.

        By default only the message text (``content``, text parts included) is
        searched; ``keys=None`` searches every string field. The rest is
        :meth:`agents.memory.Memory.search`, on :attr:`history`.

        Raises:
            InvalidQueryError: for an empty query, ``k`` outside 1 to 2**63 - 1, an unknown mode or a bad filter.
            EmbeddingError: if the embedder returns the wrong shape or NaN.
        """
        return self.history.search(query, k, keys=keys, mode=mode, where=where, embedder=embedder)

    def messages(
        self, selector: MessageSelector | None = None, **options: Any
    ) -> list[dict[str, Any]]:
        """Return the selected messages as chat messages (``options`` go to :func:`~agents.memory.to_messages`)."""
        return to_messages(self.select(selector), **options)

    # -- requests -------------------------------------------------------------------

    def new_request(self) -> None:
        """Begin a new request: clear the scratchpad, unless the conversation keeps its steps."""
        if not self.keep_steps:
            self.scratchpad.clear()

    # -- life ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the stored memories and the store :meth:`for_context` opened."""
        for memory in (self.history, self.scratchpad):
            close = getattr(memory, "close", None)
            if close is not None:
                close()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.history)

    def __repr__(self) -> str:
        return (
            f"Conversation(session_id={self.history.session_id!r}, messages={len(self.history)}, "
            f"steps={len(self.scratchpad)})"
        )


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if isinstance(function, Mapping) and "arguments" in function:
        function = {**function, "arguments": tool_arguments(function["arguments"])}
        return {**call, "function": function}
    return dict(call)
