"""The package's shape: no class past about 500 lines, no import circle, no import up the layers.

The rooms and their order are those of the house plan: exceptions < codec/item < memory
< prompt/blackboard < search/agent/conversation/stores < the packages' public fronts
(``agents.memory`` re-exports those rooms) < service < doors. Imports are read with
``ast``: one inside a function counts, one under ``if TYPE_CHECKING:`` does not (it never runs).
The store package also meets other modules through public names only.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import agents
import agents.memory.stores

AGENTS = Path(agents.__file__).parent
MAX_CLASS_LINES = 500

# Classes allowed past the bound, each with its reason.
OVERSIZED = {
    # The contract test suite is a list of tests for backend authors, not part of a store.
    "memory/stores/testing.py:StoreContract",
}

# The layer of each module or package (a package covers its submodules unless
# they are named here). Lower numbers sit lower; an import may go down or
# sideways, never up.
EXCEPTIONS, ITEM, MEMORY, PROMPT, ROOMS, FRONTS, SERVICE, DOORS = range(8)
LAYERS: dict[str, int] = {
    "agents.memory.exceptions": EXCEPTIONS,
    # the check that the agents package is kvmemory's alone: imports nothing of kvmemory's
    "agents._install": EXCEPTIONS,
    # codec and item: the wire encoding and the one object per step
    "agents.memory._codec": ITEM,
    "agents.memory._item": ITEM,
    "agents.memory._views": ITEM,
    "agents.memory._wire": ITEM,
    # memory: the ordered items, their index and bound, listeners, file formats
    "agents.memory.memory": MEMORY,
    "agents.memory._sequence": MEMORY,
    "agents.memory._steps": MEMORY,
    "agents.memory._records": MEMORY,
    "agents.memory._listeners": MEMORY,
    "agents.memory._formats": MEMORY,
    "agents.memory._session": MEMORY,
    "agents.memory._ports": MEMORY,
    # prompt and blackboard: everything that turns memory into model input
    "agents.memory.prompt": PROMPT,
    "agents.memory._keys": PROMPT,
    "agents.memory._window": PROMPT,
    "agents.memory._compact": PROMPT,
    "agents.memory._render": PROMPT,
    "agents.memory._tokens": PROMPT,
    "agents.memory._images": PROMPT,
    "agents.memory.messages": PROMPT,
    "agents.memory.blackboard": PROMPT,
    "agents.memory._board_files": PROMPT,
    "agents.memory._board_prompt": PROMPT,
    # search, agent, conversation, stores (and the text, vector and filter helpers search and stores share)
    "agents.memory.search": ROOMS,
    "agents.memory._text": ROOMS,
    "agents.memory._vectors": ROOMS,
    "agents.memory._hybrid": ROOMS,
    "agents.memory._filter": ROOMS,
    "agents.agent": ROOMS,
    "agents.memory.conversation": ROOMS,
    "agents.memory.stores": ROOMS,
    # the packages' public fronts: they re-export (and bind) the rooms below them,
    # for the service and the doors (and users) to import
    "agents": FRONTS,
    "agents.memory": FRONTS,
    # service: what every door does with sessions
    "agents.service": SERVICE,
    # doors
    "agents.cli": DOORS,
    "agents.integrations": DOORS,
}
# Fronts cover only their own __init__, not the modules inside them.
FRONT_PACKAGES = {"agents", "agents.memory"}


# -- reading a package ---------------------------------------------------------------


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Return every module of the package at ``root`` by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking(test: ast.expr) -> bool:
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", "")
    return name.endswith("TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield every import under ``node`` that runs: in functions too, not under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _type_checking(child.test):
            for other in child.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _imports(child)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Return, for each module of the package, the modules of the package it imports."""
    modules = module_files(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join([*here, *([node.module] if node.module else [])])
                # ``from pkg import mod`` imports the module; ``from pkg import name`` the package.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Return the import circles: each group of modules that reach one another (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def layer_of(module: str, layers: Mapping[str, int], fronts: set[str]) -> int | None:
    """Return the declared layer of ``module``: its own entry, else its innermost declared package's."""
    if module in layers:
        return layers[module]
    parts = module.split(".")
    for end in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:end])
        if package in layers and package not in fronts:
            return layers[package]
    return None


def upward_imports(
    graph: Mapping[str, set[str]], layers: Mapping[str, int], fronts: set[str]
) -> list[str]:
    """Return each import from a module to one of a higher layer, and each module without a layer."""
    found = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, layers, fronts)
        if here is None:
            found.append(f"{module} has no layer")
            continue
        for target in sorted(targets):
            there = layer_of(target, layers, fronts)
            if there is not None and there > here:
                found.append(f"{module} ({here}) imports {target} ({there})")
    return found


def class_sizes(root: Path) -> dict[str, int]:
    """Return the length in lines of every class under ``root``, as ``path:Class``."""
    return {
        f"{path.relative_to(root).as_posix()}:{node.name}": node.end_lineno - node.lineno + 1
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }


def oversized(root: Path, allowed: set[str]) -> dict[str, int]:
    """Return the classes under ``root`` past ``MAX_CLASS_LINES`` that ``allowed`` does not name."""
    return {
        name: size
        for name, size in class_sizes(root).items()
        if size > MAX_CLASS_LINES and name not in allowed
    }


# -- the package's rules --------------------------------------------------------------


def test_no_class_is_over_500_lines() -> None:
    """Every class in agents/ stays under 500 lines but those OVERSIZED names with a reason (each still oversized)."""
    sizes = class_sizes(AGENTS)
    assert {"memory/memory.py:Memory", "memory/stores/_store.py:Store"} <= set(sizes)
    assert oversized(AGENTS, OVERSIZED) == {}
    assert {name for name in OVERSIZED if sizes.get(name, 0) > MAX_CLASS_LINES} == OVERSIZED


def test_the_allowed_oversized_classes_are_outside_the_memory_room() -> None:
    """Only the shipped contract suite is let past the bound inside agents/memory/."""
    inside = {name for name in OVERSIZED if name.startswith("memory/")}
    assert inside == {"memory/stores/testing.py:StoreContract"}


def test_no_import_circle() -> None:
    """No two modules of agents/ import each other, directly or around a circle, even inside functions."""
    graph = import_graph(AGENTS, "agents")
    assert {"agents.memory.memory", "agents.memory.search._search"} <= set(graph)
    assert circles(graph) == []


def test_no_import_goes_up_the_layers() -> None:
    """Every module has a declared layer and imports only its own layer or those below."""
    assert upward_imports(import_graph(AGENTS, "agents"), LAYERS, FRONT_PACKAGES) == []


def test_memory_imports_no_room_above_it() -> None:
    """memory.py reaches search and prompts without importing them: it imports only the item and memory rooms."""
    graph = import_graph(AGENTS, "agents")
    reached = {layer_of(target, LAYERS, FRONT_PACKAGES) for target in graph["agents.memory.memory"]}
    assert reached <= {EXCEPTIONS, ITEM, MEMORY}


# -- the checks catch what they are for --------------------------------------------------


def _package(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_the_circle_check_sees_a_circle_closed_inside_a_function(tmp_path: Path) -> None:
    """A module that imports back inside a function, as memory.py once did, makes a circle."""
    root = _package(
        tmp_path,
        {
            "low.py": "def search():\n    from pkg import high\n    return high\n",
            "high.py": "from pkg.low import search\n",
        },
    )
    assert circles(import_graph(root, "pkg")) == [["pkg.high", "pkg.low"]]


def test_the_circle_check_ignores_type_checking_imports(tmp_path: Path) -> None:
    """An import under ``if TYPE_CHECKING:`` never runs, so it closes no circle."""
    root = _package(
        tmp_path,
        {
            "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import x\n",
            "high.py": "from . import low\nx = low\n",
        },
    )
    assert import_graph(root, "pkg")["pkg.high"] == {"pkg.low"}
    assert circles(import_graph(root, "pkg")) == []


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """A module importing one of a higher layer is named, and so is a module without a layer."""
    root = _package(
        tmp_path,
        {
            "low.py": "def f():\n    import pkg.high\n",
            "high.py": "import pkg.low\n",
            "stray.py": "",
        },
    )
    layers = {"pkg.low": 0, "pkg.high": 1, "pkg": 2}
    assert upward_imports(import_graph(root, "pkg"), layers, {"pkg"}) == [
        "pkg.low (0) imports pkg.high (1)",
        "pkg.stray has no layer",
    ]


def test_the_size_check_sees_an_oversized_class(tmp_path: Path) -> None:
    """A class of 501 lines is named with its size unless it is allowed."""
    body = "".join(f"    x{n} = {n}\n" for n in range(500))
    root = _package(
        tmp_path, {"big.py": f"class Big:\n{body}", "small.py": "class Small:\n    x = 1\n"}
    )
    assert oversized(root, set()) == {"big.py:Big": 501}
    assert oversized(root, {"big.py:Big"}) == {}


# -- the store package -----------------------------------------------------------------

STORE_MODULES = sorted(Path(agents.memory.stores.__file__).parent.rglob("*.py"))
# Named tuples' own API is spelled with an underscore; it is public.
NAMEDTUPLE_API = {"_make", "_replace", "_asdict", "_fields"}


def test_the_store_classes_are_composed() -> None:
    """Store and backends exist as separate classes, each under the bound (checked above)."""
    sizes = class_sizes(AGENTS)
    assert {
        "memory/stores/_store.py:Store",
        "memory/stores/_sqlite/backend.py:SQLiteBackend",
        "memory/stores/_postgres/backend.py:PostgresBackend",
        "memory/stores/_jsonl/backend.py:LogBackend",
        "memory/stores/_ram.py:SpaceBackend",
    } <= set(sizes)


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


# The doors and the service they share: each a thin adapter that meets the rooms below
# through their public names.
DOOR_MODULES = sorted(
    [
        AGENTS / "cli.py",
        *(AGENTS / "integrations").rglob("*.py"),
        *(AGENTS / "service").rglob("*.py"),
    ]
)


@pytest.mark.parametrize("module", DOOR_MODULES, ids=lambda path: str(path.relative_to(AGENTS)))
def test_doors_and_the_service_use_no_other_objects_private_names(module: Path) -> None:
    """The CLI, every integration and the session service reach other modules through public names only."""
    assert _private_reaches(module) == []


def test_the_doors_and_the_service_are_checked() -> None:
    """The private-name check above covers the CLI, the web view, the MCP package and the service."""
    names = {str(path.relative_to(AGENTS)) for path in DOOR_MODULES}
    assert {
        "cli.py",
        "integrations/web.py",
        "integrations/mcp/_server.py",
        "integrations/smolagents/_recorder.py",
        "service/_service.py",
    } <= names


def test_the_private_name_check_sees_a_reach(tmp_path: Path) -> None:
    """The check above finds both forms of reaching in: a private import and a private attribute."""
    module = tmp_path / "reaching.py"
    module.write_text(
        "from agents.memory.stores._sql.dialect import _pairs\ndef f(store):\n    return store._backend\n",
        encoding="utf-8",
    )
    assert _private_reaches(module) == [
        "from agents.memory.stores._sql.dialect import _pairs",
        "store._backend",
    ]


def test_memory_reaches_search_when_only_memory_py_is_imported() -> None:
    """UFO's import path alone gives a Memory whose search works: the package binds the search room first."""
    code = (
        "from agents.memory.memory import Memory, MemoryItem\n"
        "memory = Memory([MemoryItem(step=1, thought='open the invoice'), MemoryItem(step=2)])\n"
        "print([hit.item['step'] for hit in memory.search('invoice')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1]"
