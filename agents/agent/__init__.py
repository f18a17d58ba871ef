"""Agent building blocks: ``BasicAgent`` to subclass, step callbacks and session replay.

``BasicAgent`` owns a memory, a step counter and a blackboard; the model call
is left to subclasses. ``replay`` prints a session step by step.
"""

from agents.agent._replay import format_replay, replay
from agents.agent.basic import BasicAgent, StepCallback, drop_old_images

__all__ = ["BasicAgent", "StepCallback", "drop_old_images", "format_replay", "replay"]
