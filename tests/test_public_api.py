"""The public surface: __all__ matches the real public names; UFO's import paths work."""

from __future__ import annotations

import importlib
import subprocess
import sys

import agents.memory


def isort_order(name: str) -> tuple[bool, bool, str]:
    """Constants, then classes, then functions, each alphabetical (ruff's RUF022 order)."""
    return (not name.isupper(), not name[:1].isupper(), name)


def test_all_is_sorted() -> None:
    """agents.memory.__all__ is sorted and free of duplicates."""
    names = agents.memory.__all__
    assert names == sorted(names, key=isort_order)
    assert len(set(names)) == len(names)


def test_all_matches_public_names() -> None:
    """Every public attribute of agents.memory is in __all__, and every name in __all__ exists."""
    public = {
        name
        for name, value in vars(agents.memory).items()
        if not name.startswith("_") and not isinstance(value, type(agents))
    }
    assert public == set(agents.memory.__all__)


def test_ufo_import_paths() -> None:
    """UFO-style imports work."""
    module = importlib.import_module("agents.memory.memory")
    assert module.Memory is agents.memory.Memory
    assert module.MemoryItem is agents.memory.MemoryItem


def test_import_reads_no_optional_dependency() -> None:
    """Importing agents.memory loads none of the optional extras (numpy, psycopg, rich, tiktoken)."""
    code = (
        "import sys, agents.memory, agents.memory.memory; "
        "print(sorted(m for m in ('numpy', 'psycopg', 'rich', 'tiktoken') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_package_ships_py_typed() -> None:
    """The package is marked as typed."""
    from pathlib import Path

    assert (Path(agents.__file__).parent / "py.typed").is_file()
