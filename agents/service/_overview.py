"""What a door shows of one session at a glance: :class:`SessionOverview`, and the tally behind it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import attrs

from agents.agent._replay import value_text
from agents.memory.stores import StoredRecord

__all__ = ["SessionOverview", "Tally"]


@attrs.frozen
class SessionOverview:
    """One session as the session lists show it.

    Attributes:
        session_id: The session's id.
        items: How many items it holds.
        agents: The agents its steps name, sorted (under the session's
            agent keys, see :func:`~agents.service.agent_keys_of`).
        last_step: The step of its newest item, as text (empty when that
            item has no step).
        last_seq: The seq of its newest item (``None`` when it is empty).
        cost: The sum of its items' numeric cost fields (see
            :func:`~agents.service.cost_keys_of`).
        cost_keys: The fields summed as cost.
        agent_keys: The fields read as a step's agent.
        step_key: The field that names an item's step.
        created: When the session was created (UTC), if the store knows.
        changed: When this service last saw its item count change; ``None``
            until it does (a session unchanged since the service started).
    """

    session_id: str
    items: int
    agents: tuple[str, ...]
    last_step: str
    last_seq: int | None
    cost: float
    cost_keys: tuple[str, ...]
    agent_keys: tuple[str, ...]
    step_key: str
    created: dt.datetime | None
    changed: dt.datetime | None


@attrs.define
class Tally:
    """The running figures of one session, kept by a service until the session's item count changes."""

    session_id: str
    step_key: str
    cost_keys: tuple[str, ...]
    agent_keys: tuple[str, ...]
    created: dt.datetime | None
    count: int = 0
    last_seq: int | None = None
    cost: float = 0.0
    agents: set[str] = attrs.Factory(set)
    last_step: str = ""
    changed: dt.datetime | None = None

    def add(self, records: Sequence[StoredRecord]) -> None:
        """Add appended records (in seq order) to the figures."""
        for record in records:
            item = record.item
            for key in self.cost_keys:
                value = item.get_value(key) if key in item else None
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.cost += value
            for key in self.agent_keys:
                if key in item:
                    self.agents.add(value_text(item.get_value(key)))
                    break
            self.last_seq = record.seq
        if records:
            last = records[-1].item
            key = self.step_key
            self.last_step = value_text(last.get_value(key)) if key in last else ""

    def overview(self) -> SessionOverview:
        """Return the figures as a frozen value."""
        return SessionOverview(
            session_id=self.session_id,
            items=self.count,
            agents=tuple(sorted(self.agents)),
            last_step=self.last_step,
            last_seq=self.last_seq,
            cost=self.cost,
            cost_keys=self.cost_keys,
            agent_keys=self.agent_keys,
            step_key=self.step_key,
            created=self.created,
            changed=self.changed,
        )
