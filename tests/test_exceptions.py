"""The error tree: one base class, builtin bases kept, readable KeyError messages."""

from __future__ import annotations

import pytest

from agents.memory import exceptions
from agents.memory.exceptions import (
    AgentMemoryError,
    ArgumentTypeError,
    CallbackError,
    CorruptSessionError,
    FieldAttributeError,
    FieldNotFoundError,
    FieldValidationError,
    InvalidArgumentError,
    InvalidKeyError,
    MissingDependencyError,
    SerializationError,
    StepNotFoundError,
    UnsupportedVersionError,
    missing_dependency,
)


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (FieldNotFoundError, KeyError),
        (StepNotFoundError, KeyError),
        (InvalidKeyError, TypeError),
        (FieldValidationError, TypeError),
        (FieldValidationError, ValueError),
        (SerializationError, TypeError),
        (CorruptSessionError, ValueError),
        (UnsupportedVersionError, CorruptSessionError),
        (CallbackError, RuntimeError),
        (MissingDependencyError, ImportError),
        (InvalidArgumentError, ValueError),
        (ArgumentTypeError, TypeError),
        (FieldAttributeError, AttributeError),
    ],
)
def test_error_keeps_builtin_base(error: type[Exception], builtin: type[Exception]) -> None:
    """Each concrete error is an AgentMemoryError and the builtin existing code catches."""
    assert issubclass(error, AgentMemoryError)
    assert issubclass(error, builtin)


def test_every_error_is_drawn_in_the_module_docstring() -> None:
    """The tree in the exceptions docstring names every exception class of the module."""
    doc = exceptions.__doc__ or ""
    names = [
        name
        for name, value in vars(exceptions).items()
        if isinstance(value, type)
        and issubclass(value, AgentMemoryError)
        and not name.startswith("_")
    ]
    assert [name for name in names if name not in doc] == []


def test_key_error_subclass_prints_without_quotes() -> None:
    """A KeyError subclass prints its message as written."""
    assert str(StepNotFoundError("No item has step=3.")) == "No item has step=3."


def test_missing_dependency_names_the_extra() -> None:
    """The missing-dependency error says which extra to install."""
    error = missing_dependency("psycopg", "postgres")
    assert str(error) == (
        "Optional dependency 'psycopg' is missing; install it with: pip install 'kvmemory[postgres]'."
    )
    assert error.name == "psycopg"


def test_no_error_is_named_memory_error() -> None:
    """No class shadows the builtin MemoryError."""
    assert not hasattr(exceptions, "MemoryError")


def test_core_modules_raise_no_bare_builtin_errors() -> None:
    """No module of the package raises a bare TypeError, ValueError, AttributeError or KeyError.

    The tree has a class for each; an AttributeError that Python's attribute
    protocol requires (a module ``__getattr__``, a read-only attribute) is
    marked ``# attribute protocol``.
    """
    import re
    from pathlib import Path

    root = Path(exceptions.__file__).parents[1]
    core = sorted(root.rglob("*.py"))
    pattern = re.compile(
        r"raise (TypeError|ValueError|AttributeError|KeyError)\b|raise type\(exc\)"
    )
    found = [
        f"{path.name}:{number}"
        for path in core
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line) and "# attribute protocol" not in line
    ]
    assert found == []
