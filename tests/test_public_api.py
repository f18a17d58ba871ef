"""The public surface: __all__ matches the real public names; UFO's import paths work."""

from __future__ import annotations
import __future__

import importlib
import subprocess
import sys

import pytest

import agents.memory


def isort_order(name: str) -> tuple[bool, bool, str]:
    """Constants, then classes, then functions, each alphabetical (ruff's RUF022 order)."""
    return (not name.isupper(), not name[:1].isupper(), name)


PUBLIC_PACKAGES = (
    "agents",
    "agents.memory",
    "agents.memory.stores",
    "agents.memory.stores.backend",
    "agents.memory.search",
    "agents.agent",
    "agents.service",
)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_all_is_sorted(package: str) -> None:
    """Each public package's __all__ is sorted and free of duplicates."""
    names = importlib.import_module(package).__all__
    assert names == sorted(names, key=isort_order)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_all_matches_public_names(package: str) -> None:
    """Every public attribute of a public package is in __all__, and every name in __all__ exists."""
    module = importlib.import_module(package)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, (type(agents), __future__._Feature))
    }
    if hasattr(module, "__version__"):
        public.add("__version__")
    lazy = {name for name in module.__all__ if name not in vars(module)}
    assert public | lazy == set(module.__all__)
    assert all(getattr(module, name) is not None for name in module.__all__)


def test_stores_loads_its_optional_stores_lazily() -> None:
    """Importing agents.memory.stores loads neither psycopg nor pytest; JSONLStore and PostgresStore resolve on use."""
    code = (
        "import sys, agents.memory.stores as s; "
        "before = sorted(m for m in ('psycopg', 'pytest', 'agents.memory.stores._postgres.backend') if m in sys.modules); "
        "print(before, s.JSONLStore.__name__, s.PostgresStore.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] JSONLStore PostgresStore"


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


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_import_loads_only_the_core_modules() -> None:
    """import agents.memory loads items, their wire encoding, memory (with its record index), codec, session files and errors; prompt, blackboard, stores wait for first use."""
    loaded = _run(
        "import sys, agents.memory; print(sorted(m for m in sys.modules if m.startswith('agents.')))"
    )
    assert loaded == str(
        [
            "agents._install",
            "agents.memory",
            "agents.memory._codec",
            "agents.memory._formats",
            "agents.memory._item",
            "agents.memory._listeners",
            "agents.memory._ports",
            "agents.memory._records",
            "agents.memory._sequence",
            "agents.memory._session",
            "agents.memory._steps",
            "agents.memory._views",
            "agents.memory._wire",
            "agents.memory.exceptions",
            "agents.memory.memory",
        ]
    )


def test_lazy_names_load_on_first_use() -> None:
    """A name of a lazily loaded module is there on first use, and dir() lists every public name."""
    assert (
        _run(
            "import agents.memory as m; print(m.Blackboard.__module__, set(m.__all__) <= set(dir(m)))"
        )
        == "agents.memory.blackboard True"
    )


def test_session_with_image_items_loads_without_importing_the_blackboard() -> None:
    """A session holding ImageMemoryItem loads after import agents.memory alone (kvmemory's own class)."""
    data = _run(
        "from agents.memory.blackboard import ImageMemoryItem; from agents.memory import Memory;"
        "print(Memory([ImageMemoryItem(step=1)]).to_json_bytes().decode())"
    )
    assert (
        _run(
            f"from agents.memory import Memory; print(type(Memory.from_json({data!r}).content[0]).__name__)"
        )
        == "ImageMemoryItem"
    )


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A name agents.memory does not have raises AttributeError naming it."""
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        agents.memory.Nope  # noqa: B018 - the lookup itself is the point
