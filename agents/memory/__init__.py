"""The public API of kvmemory.

``MemoryItem`` records one agent step as free-form fields; ``Memory`` keeps
the steps in order, indexed by step; the codec writes them as lossless JSON.
"""

import sys as _sys

from agents.memory._codec import OnUnencodable
from agents.memory._item import NOTHING, FieldSpec, FieldWatcher, MemoryItem, OnUnknownClass, field
from agents.memory.blackboard import Blackboard, ImageItem, ImageMemoryItem, ImageMemoryItemNames
from agents.memory.conversation import (
    Conversation,
    LastMessages,
    MessageSelector,
    TokenBudget,
    context_session_id,
    message_tokens,
)
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
    SchemaVersionError,
    SerializationError,
    SkippedRecordWarning,
    StepNotFoundError,
    StoreArgumentError,
    StoreError,
    StoreNotFoundError,
    StoreUnreachableError,
    TokenizerUnavailableError,
    UnmatchedKeyError,
    UnmatchedKeyWarning,
    UnsupportedVersionError,
)
from agents.memory.memory import (
    ChangeCallback,
    ChangeKind,
    Memory,
    MemoryChange,
    MemoryWriter,
    write_session,
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
    "SchemaVersionError",
    "SerializationError",
    "SkippedRecordWarning",
    "StepNotFoundError",
    "StoreArgumentError",
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
    "Window",
    "WindowResult",
    "context_session_id",
    "count_tokens",
    "estimate_cost",
    "field",
    "from_messages",
    "image_data_url",
    "latest_value",
    "message_tokens",
    "project",
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

if getattr(_sys.modules.get("agents"), "__kvmemory__", None) is None:
    # Another distribution's agents/__init__.py replaced kvmemory's (or was removed
    # with it): say so in one line rather than fail later on a missing name.
    try:
        from kvmemory import install_problem as _install_problem

        _problem = _install_problem()
    except ImportError:
        _problem = None
    _msg = _problem or (
        "kvmemory's install is broken: the package 'agents' is not kvmemory's "
        "(openai-agents and an older package named agents share the name); "
        "use a virtual environment without them and run: pip install --force-reinstall kvmemory"
    )
    raise ImportError(_msg)
