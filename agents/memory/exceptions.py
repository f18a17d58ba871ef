"""Every error kvmemory raises.

One base class, :class:`AgentMemoryError`. Each concrete error also derives
from the builtin exception that code written for UFO would already catch, so
``except KeyError`` or ``except TypeError`` clauses keep working::

    AgentMemoryError(Exception)
    ├── InvalidArgumentError(AgentMemoryError, ValueError)
    ├── ArgumentTypeError(AgentMemoryError, TypeError)
    ├── FieldNotFoundError(AgentMemoryError, KeyError)
    ├── FieldAttributeError(AgentMemoryError, AttributeError)
    ├── StepNotFoundError(AgentMemoryError, KeyError)
    ├── ItemNotFoundError(AgentMemoryError, ValueError)
    ├── UnmatchedKeyError(AgentMemoryError, KeyError)
    ├── InvalidKeyError(AgentMemoryError, TypeError)
    ├── ReadOnlyViewError(AgentMemoryError, TypeError)
    ├── FieldValidationError(AgentMemoryError, TypeError, ValueError)
    ├── SerializationError(AgentMemoryError, TypeError)
    ├── CorruptSessionError(AgentMemoryError, ValueError)
    │   └── UnsupportedVersionError
    ├── BudgetExceededError(AgentMemoryError, ValueError)
    ├── CallbackError(AgentMemoryError, RuntimeError)
    ├── ImageReadError(AgentMemoryError, OSError)
    ├── InvalidSessionIdError(AgentMemoryError, ValueError)
    ├── InvalidStoreURLError(AgentMemoryError, ValueError)
    ├── StoreArgumentError(AgentMemoryError, TypeError, ValueError)
    ├── StoreError(AgentMemoryError, OSError)
    │   ├── StoreNotFoundError(StoreError, FileNotFoundError)
    │   ├── CorruptStoreError
    │   ├── SchemaVersionError
    │   └── StoreUnreachableError(StoreError, ConnectionError)
    │       └── StoreConnectionLostError
    ├── TokenizerUnavailableError(AgentMemoryError, RuntimeError)
    ├── InvalidQueryError(AgentMemoryError, ValueError)
    ├── EmbeddingError(AgentMemoryError, ValueError)
    │   └── EmbedderMismatchError
    └── MissingDependencyError(AgentMemoryError, ImportError)

Warnings, for problems that do not stop the call::

    UserWarning
    ├── UnmatchedKeyWarning
    ├── SkippedRecordWarning
    ├── ImageReadWarning
    └── VectorCacheWarning
"""

from __future__ import annotations

__all__ = [
    "AgentMemoryError",
    "ArgumentTypeError",
    "BudgetExceededError",
    "CallbackError",
    "CorruptSessionError",
    "CorruptStoreError",
    "EmbedderMismatchError",
    "EmbeddingError",
    "FieldAttributeError",
    "FieldNotFoundError",
    "FieldValidationError",
    "ImageReadError",
    "ImageReadWarning",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidQueryError",
    "InvalidSessionIdError",
    "InvalidStoreURLError",
    "ItemNotFoundError",
    "MissingDependencyError",
    "ReadOnlyViewError",
    "SchemaVersionError",
    "SerializationError",
    "SkippedRecordWarning",
    "StepNotFoundError",
    "StoreArgumentError",
    "StoreConnectionLostError",
    "StoreError",
    "StoreNotFoundError",
    "StoreUnreachableError",
    "TokenizerUnavailableError",
    "UnmatchedKeyError",
    "UnmatchedKeyWarning",
    "UnsupportedVersionError",
    "VectorCacheWarning",
]


class AgentMemoryError(Exception):
    """Base class of every error raised by kvmemory."""


class InvalidArgumentError(AgentMemoryError, ValueError):
    """An argument has a value the call does not accept (a negative count, an unknown option or name)."""


class ArgumentTypeError(AgentMemoryError, TypeError):
    """An argument is of a type the call does not accept (a dict where a ``MemoryItem`` is expected)."""


class _MessageKeyError(KeyError):
    """A ``KeyError`` whose message prints as written, without quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class FieldNotFoundError(AgentMemoryError, _MessageKeyError):
    """A field was read or removed by key, and the item does not hold it."""


class FieldAttributeError(AgentMemoryError, AttributeError):
    """A field was read as an attribute (``item.thought``) and the item does not hold it."""


class StepNotFoundError(AgentMemoryError, _MessageKeyError):
    """A step was asked for by value, and no item of the memory has it."""


class ItemNotFoundError(AgentMemoryError, ValueError):
    """An item was named by identity, and the memory does not hold it (as ``list.remove`` raises ``ValueError``)."""


class InvalidKeyError(AgentMemoryError, TypeError):
    """A field key is not a string."""


class ReadOnlyViewError(AgentMemoryError, TypeError):
    """A read-only snapshot (``Memory.content``, ``Memory.list_content``, ``MemoryItem.attributes``) was changed.

    The change would be lost; the message names the method that makes it.
    """


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


class UnmatchedKeyError(AgentMemoryError, _MessageKeyError):
    """A prompt asked for a key that no item of the selection holds (strict mode)."""


class BudgetExceededError(AgentMemoryError, ValueError):
    """The items a window must keep (pinned items) do not fit in its budget."""


class ImageReadError(AgentMemoryError, OSError):
    """An image referenced by an item cannot be read or is not a known image type."""


class TokenizerUnavailableError(AgentMemoryError, RuntimeError):
    """A tokenizer is installed but cannot load its encoding (for example, offline)."""


class InvalidQueryError(AgentMemoryError, ValueError):
    """A search was given an empty query, a bad ``k``, an unknown mode or a bad filter."""


class EmbeddingError(AgentMemoryError, ValueError):
    """An embedder returned vectors of the wrong shape, or NaN or infinite values; nothing was indexed."""


class EmbedderMismatchError(EmbeddingError):
    """Vectors made by one embedding model were queried with another model."""


class UnmatchedKeyWarning(UserWarning):
    """A prompt asked for a key that no item of the selection holds."""


class SkippedRecordWarning(UserWarning):
    """A record of an input file was invalid and was skipped."""


class ImageReadWarning(UserWarning):
    """A screenshot could not be read; an empty image URL was sent in its place, as UFO does."""


class VectorCacheWarning(UserWarning):
    """A store's local folder of coded part vectors cannot be made or written; queries go on without it (once per folder and process)."""


class InvalidSessionIdError(AgentMemoryError, ValueError):
    """A session id is empty, too long, or holds characters a store does not accept."""


class InvalidStoreURLError(AgentMemoryError, ValueError):
    """A store URL has an unknown scheme, an empty path or an unknown option."""


class StoreError(AgentMemoryError, OSError):
    """A durable store could not be opened, read or written; nothing was changed by the call."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """A store opened read-only (or a JSONL directory) does not exist."""


class CorruptStoreError(StoreError):
    """A store file or log is not what kvmemory wrote (not a database, damaged lines)."""


class SchemaVersionError(StoreError):
    """A store was written by a newer kvmemory whose layout this version cannot read."""


class StoreArgumentError(AgentMemoryError, TypeError, ValueError):
    """A store call got an argument of the wrong type or range (a seq beyond 64 bits, a non-string key)."""


class StoreUnreachableError(StoreError, ConnectionError):
    """A store server cannot be reached (its host name does not resolve, nothing listens)."""


class StoreConnectionLostError(StoreUnreachableError):
    """The connection to a store server was lost during a call (the server restarted, the connection was killed).

    This is no damage to the store: the server dropped the connection, and
    rolled back what the call had not committed. The next call takes
    another connection (a broken pooled one is replaced first).

    Attributes:
        retryable: ``True`` when the server applied nothing of the call (a
            read, or a write lost before its commit): calling again is safe.
            ``False`` when the connection was lost while the server may have
            been committing the write (it is then wholly applied or not at
            all): read the session to see which before writing it again.
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling passes args only; keep the keyword so the error crosses processes whole.
        return (_connection_lost, (str(self), self.retryable))


def _connection_lost(message: str, retryable: bool) -> StoreConnectionLostError:
    """Rebuild a pickled :class:`StoreConnectionLostError`."""
    return StoreConnectionLostError(message, retryable=retryable)


class MissingDependencyError(AgentMemoryError, ImportError):
    """An optional dependency is needed for this call and is not installed."""


def missing_dependency(module: str, extra: str) -> MissingDependencyError:
    """Build the error for a missing optional dependency, naming the extra to install."""
    msg = (
        f"Optional dependency {module!r} is missing; "
        f"install it with: pip install 'kvmemory[{extra}]'."
    )
    return MissingDependencyError(msg, name=module)
