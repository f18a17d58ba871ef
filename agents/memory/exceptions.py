"""Every error kvmemory raises.

One base class, :class:`AgentMemoryError`. Each concrete error also derives
from the builtin exception that code written for UFO would already catch, so
``except KeyError`` or ``except TypeError`` clauses keep working::

    AgentMemoryError(Exception)
    ├── FieldNotFoundError(AgentMemoryError, KeyError)
    ├── StepNotFoundError(AgentMemoryError, KeyError)
    ├── InvalidKeyError(AgentMemoryError, TypeError)
    ├── FieldValidationError(AgentMemoryError, TypeError, ValueError)
    ├── SerializationError(AgentMemoryError, TypeError)
    ├── CorruptSessionError(AgentMemoryError, ValueError)
    │   └── UnsupportedVersionError
    ├── CallbackError(AgentMemoryError, RuntimeError)
    └── MissingDependencyError(AgentMemoryError, ImportError)
"""

from __future__ import annotations

__all__ = [
    "AgentMemoryError",
    "CallbackError",
    "CorruptSessionError",
    "FieldNotFoundError",
    "FieldValidationError",
    "InvalidKeyError",
    "MissingDependencyError",
    "SerializationError",
    "StepNotFoundError",
    "UnsupportedVersionError",
]


class AgentMemoryError(Exception):
    """Base class of every error raised by kvmemory."""


class _MessageKeyError(KeyError):
    """A ``KeyError`` whose message prints as written, without quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FieldNotFoundError(AgentMemoryError, _MessageKeyError):
    """A field was read or removed by key, and the item does not hold it."""


class StepNotFoundError(AgentMemoryError, _MessageKeyError):
    """A step was asked for by value, and no item of the memory has it."""


class InvalidKeyError(AgentMemoryError, TypeError):
    """A field key is not a string."""


class FieldValidationError(AgentMemoryError, TypeError, ValueError):
    """A declared field of a typed item was given a value it does not accept.

    It derives from both ``TypeError`` (wrong type) and ``ValueError`` (a
    validator refused the value), so either builtin clause catches it.
    """


class SerializationError(AgentMemoryError, TypeError):
    """A value cannot be encoded as JSON under the chosen policy."""


class CorruptSessionError(AgentMemoryError, ValueError):
    """A session document or stream cannot be decoded; nothing was loaded."""


class UnsupportedVersionError(CorruptSessionError):
    """A session was written by a newer format version than this library reads."""


class CallbackError(AgentMemoryError, RuntimeError):
    """A change callback raised; the change itself was applied and is consistent."""


class MissingDependencyError(AgentMemoryError, ImportError):
    """An optional dependency is needed for this call and is not installed."""


def missing_dependency(module: str, extra: str) -> MissingDependencyError:
    """Build the error for a missing optional dependency, naming the extra to install."""
    msg = (
        f"Optional dependency {module!r} is missing; "
        f"install it with: pip install 'kvmemory[{extra}]'."
    )
    return MissingDependencyError(msg, name=module)
