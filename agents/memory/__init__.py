"""The public API of kvmemory.

``MemoryItem`` records one agent step as free-form fields; ``Memory`` keeps
the steps in order, indexed by step; the codec writes them as lossless JSON.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

# First: when another distribution's agents/__init__.py replaced kvmemory's (or
# was removed with it), this import says so in one line (see agents/_install.py).
from agents import _install  # noqa: F401 (its import is the check)
from agents.memory import _ports
from agents.memory._codec import OnUnencodable
from agents.memory._item import NOTHING, FieldSpec, FieldWatcher, MemoryItem, OnUnknownClass, field
from agents.memory._session import SessionPages, read_session_pages, write_session
from agents.memory.exceptions import (
    AgentMemoryError,
    ArgumentTypeError,
    BudgetExceededError,
    CallbackError,
    CorruptSessionError,
    CorruptStoreError,
    EmbedderMismatchError,
    EmbeddingError,
    FieldAttributeError,
    FieldNotFoundError,
    FieldValidationError,
    ImageReadError,
    ImageReadWarning,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidQueryError,
    InvalidSessionIdError,
    InvalidStoreURLError,
    ItemNotFoundError,
    MissingDependencyError,
    ReadOnlyViewError,
    SchemaVersionError,
    SerializationError,
    SkippedRecordWarning,
    StepNotFoundError,
    StoreArgumentError,
    StoreConnectionLostError,
    StoreError,
    StoreNotFoundError,
    StoreUnreachableError,
    TokenizerUnavailableError,
    UnmatchedKeyError,
    UnmatchedKeyWarning,
    UnsupportedVersionError,
    VectorCacheWarning,
)
from agents.memory.memory import (
    ChangeCallback,
    ChangeKind,
    Memory,
    MemoryChange,
    MemoryWriter,
)


def _search_room() -> _ports.SearchRoom:
    """Import the search room on the first search (``Memory.search`` reaches it through ``_ports``)."""
    from agents.memory import search

    return search


_ports.bind_search_room(_search_room)

if _TYPE_CHECKING:
    from agents.memory.blackboard import (
        Blackboard,
        ImageItem,
        ImageMemoryItem,
        ImageMemoryItemNames,
    )
    from agents.memory.conversation import (
        Conversation,
        ConversationInfo,
        LastMessages,
        MessageSelector,
        TokenBudget,
        context_session_id,
        list_conversations,
        message_tokens,
    )
    from agents.memory.messages import ROLES, from_messages, to_messages
    from agents.memory.prompt import (
        EstimateCounter,
        Key,
        TiktokenCounter,
        TokenCounter,
        Window,
        WindowResult,
        count_tokens,
        estimate_cost,
        image_data_url,
        latest_value,
        project,
        render_json,
        render_parts,
        render_text,
        select_window,
        ufo_json,
        values_of,
    )
    from agents.memory.stores import SessionHit

# Names whose modules load on first use (module __getattr__, PEP 562), so that
# ``import agents.memory`` imports only the core: items, memory, codec, session files, errors.
_LAZY: dict[str, str] = {
    "Blackboard": "agents.memory.blackboard",
    "Conversation": "agents.memory.conversation",
    "ConversationInfo": "agents.memory.conversation",
    "EstimateCounter": "agents.memory.prompt",
    "ImageItem": "agents.memory.blackboard",
    "ImageMemoryItem": "agents.memory.blackboard",
    "ImageMemoryItemNames": "agents.memory.blackboard",
    "Key": "agents.memory.prompt",
    "LastMessages": "agents.memory.conversation",
    "MessageSelector": "agents.memory.conversation",
    "ROLES": "agents.memory.messages",
    "SessionHit": "agents.memory.stores",
    "TiktokenCounter": "agents.memory.prompt",
    "TokenBudget": "agents.memory.conversation",
    "TokenCounter": "agents.memory.prompt",
    "Window": "agents.memory.prompt",
    "WindowResult": "agents.memory.prompt",
    "context_session_id": "agents.memory.conversation",
    "count_tokens": "agents.memory.prompt",
    "estimate_cost": "agents.memory.prompt",
    "from_messages": "agents.memory.messages",
    "image_data_url": "agents.memory.prompt",
    "latest_value": "agents.memory.prompt",
    "list_conversations": "agents.memory.conversation",
    "message_tokens": "agents.memory.conversation",
    "project": "agents.memory.prompt",
    "render_json": "agents.memory.prompt",
    "render_parts": "agents.memory.prompt",
    "render_text": "agents.memory.prompt",
    "select_window": "agents.memory.prompt",
    "to_messages": "agents.memory.messages",
    "ufo_json": "agents.memory.prompt",
    "values_of": "agents.memory.prompt",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'agents.memory' has no attribute {name!r}"
        raise AttributeError(msg)  # attribute protocol: a missing module attribute
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "NOTHING",
    "ROLES",
    "AgentMemoryError",
    "ArgumentTypeError",
    "Blackboard",
    "BudgetExceededError",
    "CallbackError",
    "ChangeCallback",
    "ChangeKind",
    "Conversation",
    "ConversationInfo",
    "CorruptSessionError",
    "CorruptStoreError",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EstimateCounter",
    "FieldAttributeError",
    "FieldNotFoundError",
    "FieldSpec",
    "FieldValidationError",
    "FieldWatcher",
    "ImageItem",
    "ImageMemoryItem",
    "ImageMemoryItemNames",
    "ImageReadError",
    "ImageReadWarning",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidQueryError",
    "InvalidSessionIdError",
    "InvalidStoreURLError",
    "ItemNotFoundError",
    "Key",
    "LastMessages",
    "Memory",
    "MemoryChange",
    "MemoryItem",
    "MemoryWriter",
    "MessageSelector",
    "MissingDependencyError",
    "OnUnencodable",
    "OnUnknownClass",
    "ReadOnlyViewError",
    "SchemaVersionError",
    "SerializationError",
    "SessionHit",
    "SessionPages",
    "SkippedRecordWarning",
    "StepNotFoundError",
    "StoreArgumentError",
    "StoreConnectionLostError",
    "StoreError",
    "StoreNotFoundError",
    "StoreUnreachableError",
    "TiktokenCounter",
    "TokenBudget",
    "TokenCounter",
    "TokenizerUnavailableError",
    "UnmatchedKeyError",
    "UnmatchedKeyWarning",
    "UnsupportedVersionError",
    "VectorCacheWarning",
    "Window",
    "WindowResult",
    "context_session_id",
    "count_tokens",
    "estimate_cost",
    "field",
    "from_messages",
    "image_data_url",
    "latest_value",
    "list_conversations",
    "message_tokens",
    "project",
    "read_session_pages",
    "render_json",
    "render_parts",
    "render_text",
    "select_window",
    "to_messages",
    "ufo_json",
    "values_of",
    "write_session",
]

__kvmemory__ = True
"""Marks this package as kvmemory's (see ``kvmemory.install_problem``)."""
