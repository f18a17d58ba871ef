"""The check, at import, that the ``agents`` package is kvmemory's alone.

kvmemory's import package is named ``agents``, and so are the packages of
``openai-agents`` and of an older distribution named ``agents``. pip installs
both into one folder and each overwrites the other's files, so which
``__init__.py`` runs first depends on the install order:

- kvmemory installed last: ``agents/__init__.py`` is kvmemory's and runs
  :func:`check`, which finds the other distribution's files beside it.
- the other installed last: its ``agents/__init__.py`` runs first and imports
  its ``agents.agent`` module, which resolves to kvmemory's ``agents/agent/``
  package (a package wins over a module of the same name); that package runs
  :func:`check` first, which finds the ``agents`` module is not kvmemory's.

Either way the import fails with one line that names the clash and the fix.
Importing this module as ``agents._install`` runs :func:`check` (once: the
first import that passes is cached), so each of kvmemory's package
``__init__.py`` files that another distribution's code can reach first starts
with ``from agents import _install``. It imports nothing else of kvmemory's and no
third-party code, so that it runs under another distribution's
``agents/__init__.py``; ``kvmemory.py`` (outside the package) loads it by its
path, under another name, for :func:`foreign_entries` alone.
"""

from __future__ import annotations

import os
import sys

__all__ = ["check", "foreign_entries"]


def _own_names(parent: str, package: str) -> set[str] | None:
    """Return the names kvmemory's wheel put directly in the package folder, from its ``RECORD``.

    ``None`` when kvmemory was not installed from a wheel beside the package
    (a source checkout, an editable install): there is nothing to compare with.
    """
    try:
        infos = [
            name
            for name in os.listdir(parent)
            if name.startswith("kvmemory-") and name.endswith(".dist-info")
        ]
    except OSError:
        return None
    if len(infos) != 1:
        return None
    prefix = package + "/"
    try:
        with open(os.path.join(parent, infos[0], "RECORD"), encoding="utf-8") as record:
            own = {
                line[len(prefix) :].split(",", 1)[0].split("/", 1)[0]
                for line in record
                if line.startswith(prefix)
            }
    except OSError:
        return None
    return own or None  # an editable install's RECORD lists no file of the package


def foreign_entries(folder: str) -> list[str]:
    """Return the names in ``folder`` (the ``agents`` package) that kvmemory's wheel did not install, sorted.

    The names kvmemory installed are read from its ``RECORD`` beside the
    package, so nothing here needs updating when the package grows. Without
    that record (a source checkout, an editable install) nothing counts as
    another distribution's. ``__pycache__`` and hidden names are not counted.

    Args:
        folder: The folder of the ``agents`` package.

    Returns:
        The other names; empty when there are none or they cannot be told apart.
    """
    folder = os.path.abspath(folder)
    own = _own_names(os.path.dirname(folder), os.path.basename(folder))
    if own is None:
        return []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(
        name
        for name in names
        if name not in own and name != "__pycache__" and not name.startswith(".")
    )


def _fallback(foreign: list[str]) -> str:
    """Return the one line to raise when ``kvmemory.install_problem`` cannot be asked."""
    what = f"its folder also holds {', '.join(foreign[:3])}" if foreign else "it is not kvmemory's"
    return (
        f"kvmemory's install is broken: the package 'agents' is shared with another distribution "
        f"({what}); kvmemory shares the import name 'agents' with openai-agents and an older package "
        "named agents, so it cannot be installed beside either: give kvmemory a virtual environment "
        "of its own, or uninstall the other, then run: pip install --force-reinstall kvmemory"
    )


def check() -> None:
    """Raise ``ImportError`` in one line when the ``agents`` package is not kvmemory's alone.

    Cheap when all is well: one look at ``sys.modules``, a listing of the
    package folder and of the folder above it, and one read of kvmemory's
    ``RECORD``. Only on a problem is ``kvmemory.install_problem()`` asked for
    the line that names the other distribution.

    Raises:
        ImportError: Another distribution's ``agents/__init__.py`` runs, or its
            files lie in kvmemory's ``agents`` folder.
    """
    folder = os.path.dirname(os.path.abspath(__file__))
    package = sys.modules.get("agents")
    foreign = foreign_entries(folder)
    if getattr(package, "__kvmemory__", None) is not None and not foreign:
        return
    problem = None
    try:
        from kvmemory import install_problem
    except ImportError:  # kvmemory.py is not on the path: say it without the other's name
        pass
    else:
        problem = install_problem()
    raise ImportError(problem or _fallback(foreign))


if __name__ == "agents._install":  # imported as part of the package (not loaded by kvmemory.py)
    check()
