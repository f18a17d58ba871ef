"""The public API of kvmemory.

``MemoryItem`` records one agent step as free-form fields; ``Memory`` keeps
the steps in order, indexed by step; the codec writes them as lossless JSON.
"""

from agents.memory._codec import OnUnencodable
from agents.memory._item import NOTHING, FieldSpec, MemoryItem, field
from agents.memory.exceptions import (
    AgentMemoryError,
    CallbackError,
    CorruptSessionError,
    FieldNotFoundError,
    FieldValidationError,
    InvalidKeyError,
    MissingDependencyError,
    SerializationError,
    StepNotFoundError,
    UnsupportedVersionError,
)
from agents.memory.memory import ChangeCallback, ChangeKind, Memory, MemoryChange

__all__ = [
    "NOTHING",
    "AgentMemoryError",
    "CallbackError",
    "ChangeCallback",
    "ChangeKind",
    "CorruptSessionError",
    "FieldNotFoundError",
    "FieldSpec",
    "FieldValidationError",
    "InvalidKeyError",
    "Memory",
    "MemoryChange",
    "MemoryItem",
    "MissingDependencyError",
    "OnUnencodable",
    "SerializationError",
    "StepNotFoundError",
    "UnsupportedVersionError",
    "field",
]
