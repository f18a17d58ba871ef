"""Agent building blocks: ``BasicAgent`` to subclass, step callbacks and session replay.

``BasicAgent`` owns a memory, a step counter and a blackboard; the model call
is left to subclasses. ``replay`` prints a session step by step,
``replay_html`` writes it as a self-contained HTML timeline, and
``escape_controls`` makes any text from a session safe to print to a terminal.
"""

# First: when another distribution's agents/__init__.py imports its module
# agents.agent, Python runs this package instead, and this import names the
# clash in one line (see agents/_install.py).
from agents import _install  # noqa: F401 (its import is the check)
from agents.agent._replay import escape_controls, format_replay, replay
from agents.agent._timeline import replay_html
from agents.agent.basic import BasicAgent, StepCallback, drop_old_images

__all__ = [
    "BasicAgent",
    "StepCallback",
    "drop_old_images",
    "escape_controls",
    "format_replay",
    "replay",
    "replay_html",
]
