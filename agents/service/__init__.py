"""The session service: what every door of kvmemory does with a store's sessions, written once.

The command line (``kvmemory``), the live view (``kvmemory serve``) and the
MCP server (``kvmemory mcp``) are thin adapters over this room: they parse
arguments and print, render or answer, and leave the session operations to
:class:`SessionService`: listing and describing sessions (items, agents,
last step, cost under the keys the session's importer named), and what the
doors read of them. A new door needs nothing else.
"""

from agents.service._imports import import_memory
from agents.service._keys import agent_keys_of, cost_keys_of
from agents.service._overview import SessionOverview
from agents.service._service import AroundWindow, SessionService, SessionStats, TailWindow

__all__ = [
    "AroundWindow",
    "SessionOverview",
    "SessionService",
    "SessionStats",
    "TailWindow",
    "agent_keys_of",
    "cost_keys_of",
    "import_memory",
]
