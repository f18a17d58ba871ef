"""kvmemory: the memory layer for LLM agents.

The import package is named ``agents`` so that code written for Microsoft
UFO's memory module (``from agents.memory.memory import Memory, MemoryItem``)
runs unchanged. The public API lives in :mod:`agents.memory`.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"

__kvmemory__ = __version__
"""Marks this package as kvmemory's: another distribution's ``agents`` package has no such name."""

# openai-agents and an older package named agents install into this folder too:
# fail here, in one line, rather than later on a missing name (see agents/_install.py).
from agents import _install  # noqa: E402, F401 (checks, after the marker is set, that the package is kvmemory's alone)
