"""The ``kvmemory`` command's entry point, and a check that the ``agents`` package is kvmemory's.

kvmemory's import package is named ``agents`` (UFO's name for it). Other
distributions install a package of that name too: ``openai-agents``, and an
older one named ``agents``. Installed in one environment they overwrite each
other's files, and uninstalling one removes files the other needs. This
module lives outside ``agents`` so that it can still run then and say what is
wrong in one line, instead of an ``ImportError`` from deep inside.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib
import sys
from collections.abc import Callable, Sequence

__all__ = ["install_problem", "main"]

MARKER = "__kvmemory__"
"""The name kvmemory's ``agents/__init__.py``, ``agents/_install.py`` and ``agents/memory/__init__.py`` hold, and no other package's do."""

_CLASH = (
    "kvmemory shares the import name 'agents' with openai-agents and an older package named agents, "
    "so it cannot be installed beside either"
)
_FIX = (
    f"{_CLASH}: give kvmemory a virtual environment of its own, "
    "or uninstall the other, then run: pip install --force-reinstall kvmemory"
)


def _fix(owners: Sequence[str]) -> str:
    """Return the clash and its fix, naming the distributions to uninstall when they are known."""
    names = " ".join(owner.split(" ", 1)[0] for owner in owners)
    if not names:
        return _FIX
    return (
        f"{_CLASH}: give kvmemory a virtual environment of its own, "
        f"or run: pip uninstall {names}, then: pip install --force-reinstall kvmemory"
    )


def _owners(relative: str, folder: pathlib.Path) -> list[str]:
    """Return the other installed distributions that list ``relative`` (under ``folder``) among their files.

    ``relative`` ending in ``/`` names a folder: a distribution with any file in it counts.
    """
    found = []
    for dist in importlib.metadata.distributions(path=[str(folder)]):
        name = dist.metadata["Name"] or "?"
        if name.lower() == "kvmemory":
            continue
        files = (str(file).replace("\\", "/") for file in dist.files or ())
        if any(
            file == relative or (relative.endswith("/") and file.startswith(relative))
            for file in files
        ):
            found.append(f"{name} {dist.version}")
    return found


def _foreign_entries(package: pathlib.Path) -> list[str]:
    """Return the names in the ``agents`` folder that kvmemory does not install.

    The rule lives in ``agents/_install.py``, which the package runs at import;
    it is loaded here by its path, without importing ``agents`` (whose
    ``__init__.py`` may be another distribution's).
    """
    spec = importlib.util.spec_from_file_location("_kvmemory_install", package / "_install.py")
    if spec is None or spec.loader is None:
        return []
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    foreign_entries: Callable[[str], list[str]] = module.foreign_entries
    return foreign_entries(str(package))


def _ours(path: pathlib.Path) -> bool:
    try:
        return MARKER in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def install_problem() -> str | None:
    """Return one line saying how the installed ``agents`` package is not kvmemory's, or ``None``.

    Looks at the files only (the package is not imported): ``agents/__init__.py``,
    ``agents/_install.py`` and ``agents/memory/__init__.py`` must exist and be
    kvmemory's, and the ``agents`` folder must hold no other distribution's
    files (as it does when one was installed after kvmemory, or before it).
    When another distribution's files are there, the line names it.
    """
    spec = importlib.util.find_spec("agents")
    if spec is None or not spec.submodule_search_locations:
        return f"kvmemory is not installed: Python finds no package 'agents'. {_FIX}"
    package = pathlib.Path(next(iter(spec.submodule_search_locations)))
    for relative in ("agents/__init__.py", "agents/_install.py", "agents/memory/__init__.py"):
        path = package.parent / relative
        if _ours(path):
            continue
        owners = _owners(relative, package.parent)
        if path.exists():
            whose = f"belongs to {', '.join(owners)}" if owners else "is not kvmemory's"
            return f"kvmemory's install is broken: {path} {whose}. {_fix(owners)}"
        return (
            f"kvmemory's install is broken: {path} is missing (removed when a distribution sharing "
            f"the name 'agents' was uninstalled, or overwritten). {_FIX}"
        )
    foreign = _foreign_entries(package)
    if foreign:
        slash = "/" if (package / foreign[0]).is_dir() else ""
        owners = _owners(f"agents/{foreign[0]}{slash}", package.parent)
        whose = ", ".join(owners) if owners else "another distribution"
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        return (
            f"kvmemory's install is broken: {package} also holds files of {whose} "
            f"({', '.join(foreign[:3])}{more}). {_fix(owners)}"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kvmemory`` command, after checking that the ``agents`` package is kvmemory's.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        The command's exit status; 1 with a one-line message when the install is broken.
    """
    problem = install_problem()
    if problem is not None:
        print(f"kvmemory: error: {problem}", file=sys.stderr)
        return 1
    from agents.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
