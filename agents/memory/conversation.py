"""Conversations: a chat history kept as a memory of message items, and what goes into the prompt.

A :class:`Conversation` is a ``Memory`` whose items are chat messages (see
:mod:`agents.memory.messages`), plus a *scratchpad*: a second memory for
the working steps of the current request, kept apart from the history.

* Appending by role, reading the last user or system message, finding a
  message by its id, deleting and tagging are one call each
  (:meth:`Conversation.add_user`, :meth:`Conversation.last_user_message`,
  :meth:`Conversation.get`, :meth:`Conversation.delete`, :meth:`Conversation.tag`).
* Selectors choose what goes into the prompt. :class:`LastMessages` and
  :class:`TokenBudget` take whole *groups* at a time (an assistant message
  that calls tools and the tool results that follow it form one group, so
  a call is never split from its result) and stop at the first group that
  does not fit, so the selection has no gaps. They take the options of
  LangChain's ``trim_messages`` (``strategy``, ``start_on``, ``end_on``,
  ``include_system``), ``exclude_prompt`` and the ``unanswered`` policy for
  tool calls without a result. Any function ``memory -> list of items`` is
  a selector too.
* :meth:`Conversation.for_context` opens the conversation of a set of
  context keys (``{"chat_id": 42, "user": "ann"}``) in a store; the same keys
  give the same session in any process (see :func:`context_session_id`),
  the context is kept in the session's metadata, and
  :func:`list_conversations` lists the conversations of part of a context.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
from typing_extensions import Self

from agents.memory._item import MemoryItem
from agents.memory._views import ConversationContext
from agents.memory.exceptions import (
    BudgetExceededError,
    FieldValidationError,
    InvalidArgumentError,
    InvalidSessionIdError,
)
from agents.memory.memory import Memory
from agents.memory.messages import (
    MESSAGE_KEYS,
    ROLES,
    UNANSWERED,
    check_message,
    from_messages,
    settle_tool_calls,
    to_messages,
    tool_arguments,
)
from agents.memory.prompt import (
    EstimateCounter,
    TokenCounter,
    count_image_tokens,
    image_data_url,
    render_json,
)

if TYPE_CHECKING:
    from agents.memory.search import Embedder, Hit, SearchMode, Where
    from agents.memory.stores import Store

__all__ = [
    "Conversation",
    "ConversationInfo",
    "LastMessages",
    "MessageSelector",
    "TokenBudget",
    "context_session_id",
    "list_conversations",
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
    separator, plus each image part's cost. An image sent as a ``data:`` URL
    costs what :func:`~agents.memory.prompt.count_image_tokens` gives (by its
    size, when the counter has an ``image_cost``); any other image (an
    ``http(s)`` URL, or a path kept as given, which is never opened here)
    costs the counter's flat ``image_tokens``.
    """
    record = {key: message[key] for key in MESSAGE_KEYS if key in message}
    content = record.get("content")
    images = 0
    if isinstance(content, list):
        kept = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "image_url":
                images += _image_part_tokens(part, counter)
            else:
                kept.append(part)
        record["content"] = kept
    return counter.count(render_json([record])[1:-1]) + 1 + images


def _image_part_tokens(part: Mapping[str, Any], counter: TokenCounter) -> int:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, Mapping) else None
    if isinstance(url, str) and url[:5].lower() == "data:":
        return count_image_tokens(url, counter)
    return counter.image_tokens


_PROMPT_ROLES: Final = ("system", "developer")


def _grouped(items: Iterable[MemoryItem]) -> Iterator[list[MemoryItem]]:
    """Yield the items in groups, in the order given (oldest first), each group in memory order.

    An assistant message with ``tool_calls`` and the tool results right after
    it form one group; every other item stands alone (a tool result that
    follows no such message too).
    """
    group: list[MemoryItem] = []
    for item in items:
        role = item.get_value("role")
        if role == "tool" and group:
            group.append(item)
            continue
        if group:
            yield group
            group = []
        if role == "assistant" and item.get_value("tool_calls"):
            group = [item]
        else:
            yield [item]
    if group:
        yield group


def _groups_newest_first(items: Iterator[MemoryItem]) -> Iterator[list[MemoryItem]]:
    """Yield the items (given newest first) in groups, newest group first, each group in memory order."""
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
        if item.get_value("role") not in _PROMPT_ROLES:
            break
        pinned.append(item)
    return pinned


def _roles(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, tuple) or not value or any(role not in ROLES for role in value):
        msg = f"{attribute.name}={value!r} must be a role or a list of roles among {list(ROLES)}, or None."
        raise InvalidArgumentError(msg)


def _to_roles(value: Any) -> Any:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)):
        return tuple(value)
    return value


def _one_of(*allowed: str) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or value not in allowed:
            msg = f"{attribute.name}={value!r} must be one of {list(allowed)}."
            raise InvalidArgumentError(msg)

    return check


def _flag(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not bool:
        msg = f"{attribute.name} must be True or False, got {value!r}."
        raise InvalidArgumentError(msg)


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 0:
        msg = f"{attribute.name} must be an int >= 0, got {value!r}."
        raise InvalidArgumentError(msg)


@attrs.frozen
class _Trim:
    """The trimming options the selectors share (see :class:`LastMessages`)."""

    include_system: bool = attrs.field(default=True, kw_only=True, validator=_flag)
    strategy: str = attrs.field(default="last", kw_only=True, validator=_one_of("last", "first"))
    start_on: tuple[str, ...] | None = attrs.field(
        default=None, kw_only=True, converter=_to_roles, validator=_roles
    )
    end_on: tuple[str, ...] | None = attrs.field(
        default=None, kw_only=True, converter=_to_roles, validator=_roles
    )
    exclude_prompt: bool = attrs.field(default=False, kw_only=True, validator=_flag)
    unanswered: str = attrs.field(default="refuse", kw_only=True, validator=_one_of(*UNANSWERED))

    def __attrs_post_init__(self) -> None:
        if self.start_on is not None and self.strategy == "first":
            msg = (
                "start_on applies to strategy='last' (the oldest kept message must be of a role); "
                "with strategy='first' the selection starts at the start. Use end_on, or strategy='last'."
            )
            raise InvalidArgumentError(msg)

    def _select(
        self, memory: Memory, cost: Callable[[MemoryItem], int], limit: int, what: str
    ) -> list[MemoryItem]:
        pinned = _leading_system(memory) if self.include_system else []
        spent = sum(cost(item) for item in pinned)
        if spent > limit:
            msg = (
                f"The {len(pinned)} opening system messages alone cost {spent} {what}, more than the limit "
                f"of {limit}; raise the limit, shorten the system prompt, or pass include_system=False."
            )
            raise BudgetExceededError(msg)
        skip = len(pinned)
        newest = memory.get_latest_item()
        drop_prompt = (
            self.exclude_prompt
            and newest is not None
            and newest.get_value("role") == "user"
            and len(memory) > skip
        )
        # Under "refuse" settling changes nothing, so a group is checked only
        # once it fits (a broken group that would not be sent raises nothing);
        # under "drop" and "close" groups are settled first, so that end_on
        # and the price see what will be sent.
        presettled = self.unanswered != "refuse"
        groups: Iterator[list[MemoryItem]]
        if self.strategy == "last":
            rest: Iterator[MemoryItem] = memory.iter_newest()
            if drop_prompt:
                next(rest)
            groups = _groups_newest_first(rest)
            if presettled:
                groups = (settled for settled in map(self._settle, groups) if settled)
            groups = self._ending(groups)
        else:
            stop = len(memory) - 1 if drop_prompt else len(memory)
            groups = _grouped(memory[index] for index in range(skip, stop))
            if presettled:
                groups = (settled for settled in map(self._settle, groups) if settled)
        pinned_ids = {id(item) for item in pinned}
        chosen: list[list[MemoryItem]] = []
        for group in groups:
            if any(id(item) in pinned_ids for item in group):
                break
            price = sum(cost(item) for item in group)
            if spent + price > limit:
                break
            if not presettled:
                self._settle(group)
            spent += price
            chosen.append(group)
        if self.strategy == "last":
            chosen.reverse()
            if self.start_on is not None:
                start_on = self.start_on
                first = next(
                    (n for n, group in enumerate(chosen) if group[0].get_value("role") in start_on),
                    len(chosen),
                )
                del chosen[:first]
        else:
            chosen = list(self._ending(iter(reversed(chosen))))[::-1]
        return [*pinned, *(item for group in chosen for item in group)]

    def _ending(self, groups: Iterator[list[MemoryItem]]) -> Iterator[list[MemoryItem]]:
        """Skip the groups (given newest first) until one ends on a role of ``end_on``."""
        if self.end_on is None:
            yield from groups
            return
        for group in groups:
            if group[-1].get_value("role") in self.end_on:
                yield group
                break
        yield from groups

    def _settle(self, group: list[MemoryItem]) -> list[MemoryItem]:
        if len(group) == 1:
            (item,) = group
            if item.get_value("role") != "tool" and not item.get_value("tool_calls"):
                return group  # most groups: one message that neither calls nor answers
        settled = settle_tool_calls(group, unanswered=self.unanswered)
        return [item if isinstance(item, MemoryItem) else MemoryItem(**item) for item in settled]


@attrs.frozen
class LastMessages(_Trim):
    """Select the last ``k`` messages, never splitting a tool call from its results.

    Messages are taken in whole *groups* (an assistant message that calls
    tools and the results right after it are one group) while they fit in
    ``k``; the selection stops at the first group that does not, so it may
    hold fewer than ``k`` messages but never has a gap. The options follow
    LangChain's ``trim_messages``:

    Args:
        k: The most messages to select (kept system messages count).
        include_system: Keep the system (and developer) messages that open
            the conversation, and count them (LangChain's default is not to;
            here it is). ``False`` treats them like any other message.
        strategy: ``"last"`` takes the newest messages, ``"first"`` the oldest.
        start_on: With ``"last"``: a role or roles the first selected message
            (after the kept system messages) must have; older groups are
            dropped until one starts on it (``"user"``: the history starts on
            a user's turn).
        end_on: A role or roles the last selected message must have; newer
            groups are dropped until one ends on it (before taking the
            newest with ``"last"``, after taking the oldest with ``"first"``).
        exclude_prompt: Leave the newest message out, and out of the count,
            when it is a user message: the current prompt, which the caller
            sends on its own.
        unanswered: A tool call without a result: ``"refuse"`` (raise),
            ``"drop"`` or ``"close"``, as in :func:`~agents.memory.messages.settle_tool_calls`
            (closing messages are new items, counted like the others).

    Raises:
        InvalidArgumentError: for a bad option, or ``start_on`` with ``strategy="first"``.
    """

    k: int = attrs.field(validator=_non_negative)

    def __call__(self, memory: Memory) -> list[MemoryItem]:
        """Return the selected message items of ``memory``, in memory order.

        Raises:
            BudgetExceededError: if the opening system messages alone are more than ``k``.
            FieldValidationError: with ``unanswered="refuse"``, for a tool call
                without a result or a stray result among the messages looked at.
        """
        return self._select(memory, lambda item: 1, self.k, "messages")


@attrs.frozen
class TokenBudget(_Trim):
    """Select the last messages within a token budget, never splitting a tool call from its results.

    Each message costs :func:`message_tokens` under ``counter`` (its text and
    ``counter.image_tokens`` per image). Whole groups are taken while they
    fit; the selection stops at the first group that does not. The trimming
    options are those of :class:`LastMessages`.

    Args:
        max_tokens: The budget.
        counter: The token counter (default :class:`~agents.memory.EstimateCounter`).

    Raises:
        InvalidArgumentError: for a bad option, or ``start_on`` with ``strategy="first"``.
    """

    max_tokens: int = attrs.field(validator=_non_negative)
    counter: TokenCounter = attrs.field(factory=EstimateCounter)

    def __call__(self, memory: Memory) -> list[MemoryItem]:
        """Return the selected message items of ``memory``, in memory order.

        Raises:
            BudgetExceededError: if the opening system messages alone break the budget.
            FieldValidationError: with ``unanswered="refuse"``, for a tool call
                without a result or a stray result among the messages looked at.
        """
        counter = self.counter
        return self._select(
            memory, lambda item: message_tokens(item, counter), self.max_tokens, "tokens"
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
        follow: Before each read (:meth:`select`, :meth:`messages`,
            :meth:`last_user_message`, :meth:`last_system_message`,
            :meth:`get`, :meth:`tagged`, :meth:`search`), read the messages
            other handles appended to a stored history (:meth:`refresh`), so
            this handle is never stale; one short store read each time.
    """

    def __init__(
        self,
        history: Memory | None = None,
        *,
        scratchpad: Memory | None = None,
        keep_steps: bool = False,
        follow: bool = False,
    ) -> None:
        self.history = history if history is not None else Memory()
        self.scratchpad = scratchpad if scratchpad is not None else Memory()
        self.keep_steps = keep_steps
        self.follow = follow
        self._store: Store | None = None

    @classmethod
    def for_context(
        cls,
        store: str | os.PathLike[str] | Store,
        context: Mapping[str, Any],
        *,
        prefix: str = "chat",
        keep_steps: bool = False,
        follow: bool = False,
    ) -> Self:
        """Open the conversation of ``context`` in ``store``; the same keys give it back in any process.

        The history is the session :func:`context_session_id` names. The
        context itself is kept in the session's metadata (``"context"`` and
        ``"context_prefix"``, written when a writable store opens it), so
        :func:`list_conversations` can find the conversations of part of a
        context (all the chats of one user). With
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
            follow: Read what other handles appended before each read (see :class:`Conversation`).

        Raises:
            InvalidSessionIdError: if the context cannot name a session.
            StoreError: if the store cannot be opened or read.
        """
        from agents.memory.stores import Store, open_memory, open_store

        session_id = context_session_id(context, prefix=prefix)
        steps_id = _steps_session_id(session_id)  # checked before the store is opened or created
        owned = None if isinstance(store, Store) else open_store(store)
        opened = store if isinstance(store, Store) else owned
        assert opened is not None  # one of the two branches opened it
        try:
            history = open_memory(opened, session_id)
            scratchpad = open_memory(opened, steps_id) if keep_steps else None
        except BaseException:
            if owned is not None:
                owned.close()
            raise
        conversation = cls(history, scratchpad=scratchpad, keep_steps=keep_steps, follow=follow)
        conversation._store = owned
        try:
            conversation._record_context(opened, dict(context), prefix)
        except BaseException:
            conversation.close()
            raise
        return conversation

    def _record_context(self, store: Store, context: dict[str, Any], prefix: str) -> None:
        """Keep the context in the history's metadata (in a writable store), so it can be listed."""
        metadata = self.history.metadata
        if store.read_only or (
            metadata.get("context") == context and metadata.get("context_prefix") == prefix
        ):
            return
        self.history.metadata = {**metadata, "context": context, "context_prefix": prefix}

    @property
    def context(self) -> dict[str, Any] | None:
        """The context keys this conversation was opened for (:meth:`for_context`), or ``None``."""
        context = self.history.metadata.get("context")
        return ConversationContext(context) if isinstance(context, Mapping) else None

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
        read_paths: bool = False,
        **fields: Any,
    ) -> MemoryItem:
        """Append one message and return its item.

        The item gets an ``id`` field (a random hex string, unless ``id=...``
        is given), which :meth:`get` and :meth:`delete` take.

        Args:
            role: ``"system"``, ``"developer"``, ``"user"``, ``"assistant"`` or ``"tool"``.
            content: Text, or a list of content parts.
            images: Images, appended as ``image_url`` parts; only a user
                message may hold images. A string is an ``http(s)://`` or
                ``data:image/...;base64`` URL (a string path is refused
                unless ``read_paths=True``: a string may have come from a
                client). A ``pathlib.Path`` (any ``os.PathLike``) names a file
                your program chose: it is read now and kept as a ``data:`` URL.
            tool_calls: On an assistant message: calls as ``{"id", "type":
                "function", "function": {"name", "arguments"}}``; arguments
                that are not text are written as JSON.
            tool_call_id: On a tool message: the id of the call it answers.
            name: The participant's name.
            tags: Tags of the message (see :meth:`tag`).
            read_paths: Read image strings and image parts that name a
                local file now, as ``data:`` URLs (by default such a path is
                refused and never read: a path that came from a client could
                name any file). A path is never kept as an image URL.
            **fields: Any other fields, kept in the item and left out of messages.

        Raises:
            FieldValidationError: naming what makes the message invalid (an
                image URL a chat API refuses, such as a string path without
                ``read_paths``, included); nothing is added.
            ImageReadError: naming a ``Path`` (or, with ``read_paths``, a
                path string) that cannot be read as an image; nothing is added.
        """
        message: dict[str, Any] = {"role": role}
        refs = [image_data_url(ref) if isinstance(ref, os.PathLike) else ref for ref in images]
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
        message.setdefault("id", _new_id())
        check_message(message, read_paths=read_paths)
        (item,) = from_messages([message], read_paths=read_paths)
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

    def add_messages(
        self, messages: Iterable[Mapping[str, Any]], *, read_paths: bool = False
    ) -> list[MemoryItem]:
        """Append chat messages (every key kept as a field), all or nothing.

        Each message without an ``id`` gets one. Image URLs a chat API takes
        are kept as given; a local path is refused, or read with
        ``read_paths=True`` (see :func:`~agents.memory.from_messages`): keep
        it off for messages that come from another program.

        Raises:
            FieldValidationError: naming the first invalid message (a path
                as an image URL without ``read_paths`` included); nothing is added.
            ImageReadError: with ``read_paths``, naming a file that cannot be read; nothing is added.
        """
        items = from_messages(messages, read_paths=read_paths)
        for item in items:
            if "id" not in item:
                item["id"] = _new_id()
        self.history.add_memory_items(items)
        return items

    # -- reading -----------------------------------------------------------------

    def last_user_message(self) -> MemoryItem | None:
        """Return the newest user message, or ``None`` when there is none (reads newest first)."""
        self._fresh()
        for item in self.history.iter_newest():
            if item.get_value("role") == "user":
                return item
        return None

    def last_system_message(self) -> MemoryItem | None:
        """Return the newest system message, or ``None`` when there is none (reads newest first)."""
        self._fresh()
        for item in self.history.iter_newest():
            if item.get_value("role") == "system":
                return item
        return None

    def get(self, message_id: str) -> MemoryItem | None:
        """Return the message whose ``id`` field is ``message_id`` (the newest if several), or ``None``."""
        self._fresh()
        for item in self.history.iter_newest():
            if item.get_value("id") == message_id:
                return item
        return None

    def delete(self, *messages: MemoryItem | str, whole_groups: bool = True) -> int:
        """Delete messages, given as items or ids, and return how many went (in the store too).

        With ``whole_groups`` (the default), deleting an assistant message
        that calls tools, or one of their results, deletes the whole group,
        so that no call is left without its result. Ids and items the
        history does not hold are skipped.

        Args:
            *messages: Message items of the history, or their ``id`` fields.
            whole_groups: Widen the deletion to whole tool-call groups.

        Raises:
            StoreError: if the store cannot be written; nothing is deleted.
        """
        ids = {message for message in messages if isinstance(message, str)}
        targets = {id(message) for message in messages if isinstance(message, MemoryItem)}
        content = self.history.content
        if ids:
            targets.update(id(item) for item in content if item.get_value("id") in ids)
        chosen = [item for item in content if id(item) in targets]
        if whole_groups:
            chosen = [
                item
                for group in _grouped(content)
                if any(id(member) in targets for member in group)
                for item in group
            ]
        return self.history.delete_items(chosen) if chosen else 0

    def delete_selected(self, selector: MessageSelector) -> int:
        """Delete the messages ``selector`` picks (``LastMessages(2)``: the last two) and return how many went.

        Items the selector made (closing tool messages) are not in the
        history and are skipped.

        Raises:
            StoreError: if the store cannot be written; nothing is deleted.
        """
        return self.history.delete_items(selector(self.history))

    def repair_tool_calls(self, unanswered: str = "close") -> int:
        """Make the stored history follow the chat API's tool-call rules, and return how many messages changed.

        After a crash between ``add_assistant(tool_calls=...)`` and
        ``add_tool(...)`` the call has no result, and every later request
        carries it. This applies :func:`~agents.memory.messages.settle_tool_calls`
        to the whole history and writes the outcome back in one replacement
        (one transaction in a store): ``"close"`` adds a tool message holding
        :data:`~agents.memory.messages.NO_RESULT` after each unanswered call,
        ``"drop"`` takes the call out; stray results go in both.

        Args:
            unanswered: ``"close"`` or ``"drop"``.

        Returns:
            The number of messages added, changed or removed (0: the history already followed the rules).

        Raises:
            FieldValidationError: for another policy.
            StoreError: if the store cannot be written; the history is unchanged.
        """
        if unanswered not in ("close", "drop"):
            msg = f"repair_tool_calls(unanswered={unanswered!r}) takes 'close' or 'drop'."
            raise FieldValidationError(msg)
        content = self.history.content
        settled = settle_tool_calls(content, unanswered=unanswered)
        kept = {id(item) for item in settled}
        new = [item for item in settled if not isinstance(item, MemoryItem)]
        changes = len(new) + sum(1 for item in content if id(item) not in kept)
        if changes:
            repaired = [
                item if isinstance(item, MemoryItem) else _repaired(item) for item in settled
            ]
            self.history.load(repaired)
        return changes

    def refresh(self) -> int:
        """Read the messages other handles and processes appended to a stored history; return how many.

        Two handles on one stored conversation (two ``for_context`` calls, two
        processes) do not see each other's new messages by themselves: each
        holds the history as it read it, plus what it wrote. Call this before
        building a prompt when another handle may have written. Deletions
        made elsewhere are seen by ``history.reload()``. A history in RAM has
        nothing to read: 0. A conversation made with ``follow=True`` does
        this before each read.

        Raises:
            StoreError: if the store cannot be read.
        """
        refresh = getattr(self.history, "refresh", None)
        return int(refresh()) if refresh is not None else 0

    def _fresh(self) -> None:
        if self.follow:
            self.refresh()

    def tag(self, item: MemoryItem, *tags: str) -> None:
        """Add ``tags`` to a message's ``tags`` field (each once, in order; written through when stored)."""
        old = item.get_value("tags") or []
        new = list(old) + [tag for tag in dict.fromkeys(tags) if tag not in old]
        if new != old:
            item["tags"] = new

    def tagged(self, tag: str) -> list[MemoryItem]:
        """Return the messages tagged ``tag``, in order."""
        self._fresh()
        return self.history.select(lambda item: tag in (item.get_value("tags") or ()))

    def select(self, selector: MessageSelector | None = None) -> list[MemoryItem]:
        """Return the messages ``selector`` chooses (all when ``None``), in memory order."""
        self._fresh()
        if selector is None:
            return self.history[:]
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
        self._fresh()
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


def _new_id() -> str:
    return uuid.uuid4().hex


def _repaired(message: Mapping[str, Any]) -> MemoryItem:
    fields = dict(message)
    if "id" not in fields:
        fields["id"] = _new_id()
    return MemoryItem(**fields)


@attrs.frozen
class ConversationInfo:
    """A conversation :func:`list_conversations` found: its session, context and creation time."""

    session_id: str
    """The session that holds its history."""
    context: dict[str, Any]
    """The context keys it was opened for."""
    created: dt.datetime
    """When its session was created (UTC)."""


def list_conversations(
    store: str | os.PathLike[str] | Store,
    context: Mapping[str, Any] | None = None,
    *,
    prefix: str = "chat",
) -> list[ConversationInfo]:
    """Return the conversations of a store whose context holds all of ``context``, oldest first.

    ``list_conversations(store, {"user": "ann"})`` finds every chat of user
    ``ann``, whatever its other keys; ``None`` or ``{}`` finds all. A value
    matches when it is equal and of the same type (``42`` is not ``"42"``).
    The conversations found are those :meth:`Conversation.for_context` opened
    (in a writable store) with ``prefix``: their context is kept with them,
    and checked against their session id. Works the same in every store
    (memory, SQLite, JSONL, PostgreSQL), through the public store API; it
    reads each session's metadata, one read per session.

    Args:
        store: A store URL or path (opened read-only and closed again) or an open store.
        context: The keys and values to match.
        prefix: The prefix the conversations were opened with.

    Raises:
        InvalidSessionIdError: for a context or prefix :func:`context_session_id` refuses.
        StoreError: if the store cannot be opened or read.
    """
    from agents.memory.stores import Store, open_store

    wanted = dict(context or {})
    if wanted:
        context_session_id(wanted, prefix=prefix)  # the same checks as an id
    else:
        context_session_id({"": None}, prefix=prefix)
    owned = None if isinstance(store, Store) else open_store(store, read_only=True)
    opened = store if isinstance(store, Store) else owned
    assert opened is not None  # one of the two branches opened it
    try:
        found: list[ConversationInfo] = []
        start = f"{prefix}-"
        for session_id in opened.sessions():
            if not session_id.startswith(start) or session_id.endswith(".steps"):
                continue
            info = opened.session_info(session_id)
            if info is None or info.metadata.get("context_prefix") != prefix:
                continue
            held = info.metadata.get("context")
            if not isinstance(held, dict) or not all(
                key in held and type(held[key]) is type(value) and held[key] == value
                for key, value in wanted.items()
            ):
                continue
            try:
                if context_session_id(held, prefix=prefix) != session_id:
                    continue
            except InvalidSessionIdError:
                continue
            found.append(ConversationInfo(session_id, dict(held), info.created))
    finally:
        if owned is not None:
            owned.close()
    found.sort(key=lambda info: (info.created, info.session_id))
    return found


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if isinstance(function, Mapping) and "arguments" in function:
        function = {**function, "arguments": tool_arguments(function["arguments"])}
        return {**call, "function": function}
    return dict(call)
