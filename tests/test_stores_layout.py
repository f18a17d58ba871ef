"""The store package's shape: classes composed of parts, and modules that meet through public names."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

import agents.memory.stores

STORE_MODULES = sorted(Path(agents.memory.stores.__file__).parent.glob("*.py"))
# The contract test suite is a list of tests for backend authors, not part of a store.
TEST_SUITES = {"testing.py:StoreContract"}
# Named tuples' own API is spelled with an underscore; it is public.
NAMEDTUPLE_API = {"_make", "_replace", "_asdict", "_fields"}


def _class_sizes() -> dict[str, int]:
    return {
        f"{module.name}:{node.name}": node.end_lineno - node.lineno + 1
        for module in STORE_MODULES
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }


def test_no_store_class_is_over_500_lines() -> None:
    """Store, backends and their parts each stay under 500 lines: a backend is composed, not grown."""
    sizes = _class_sizes()
    assert {"_store.py:Store", "_sqlite.py:SQLiteBackend", "_postgres.py:PostgresBackend"} <= set(
        sizes
    )
    assert {"_jsonl.py:LogBackend", "_memory.py:SpaceBackend"} <= set(sizes)
    too_long = {name: n for name, n in sizes.items() if n > 500 and name not in TEST_SUITES}
    assert too_long == {}


def _private_reaches(module: Path) -> list[str]:
    reached = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                is_module = hasattr(importlib.import_module(node.module), "__path__") and (
                    importlib.util.find_spec(f"{node.module}.{alias.name}") is not None
                )
                if private and not is_module:
                    reached.append(f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            owner = node.value
            own = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            dunder = node.attr.startswith("__")
            if not own and not dunder and node.attr not in NAMEDTUPLE_API:
                reached.append(ast.unparse(node))
    return reached


@pytest.mark.parametrize("module", STORE_MODULES, ids=lambda path: path.name)
def test_store_modules_use_no_other_objects_private_names(module: Path) -> None:
    """Each store module reaches other modules and objects through public names only."""
    assert _private_reaches(module) == []


def test_the_private_name_check_sees_a_reach(tmp_path: Path) -> None:
    """The check above finds both forms of reaching in: a private import and a private attribute."""
    module = tmp_path / "reaching.py"
    module.write_text(
        "from agents.memory.stores._sql import _pairs\ndef f(store):\n    return store._backend\n",
        encoding="utf-8",
    )
    assert _private_reaches(module) == [
        "from agents.memory.stores._sql import _pairs",
        "store._backend",
    ]
