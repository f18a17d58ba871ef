"""The blackboard's prompt text: UFO's section titles, parts and the token budget."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from agents.memory._render import ufo_json
from agents.memory._tokens import TokenCounter
from agents.memory.exceptions import BudgetExceededError

__all__ = [
    "BLACKBOARD_PREFIX",
    "QUESTIONS_PREFIX",
    "REQUESTS_PREFIX",
    "TRAJECTORIES_PREFIX",
    "Part",
    "metadata_text",
    "text_part",
    "trim_to_budget",
]

BLACKBOARD_PREFIX: Final = "[Blackboard:]"
QUESTIONS_PREFIX: Final = "[Questions & Answers:]"
REQUESTS_PREFIX: Final = "[Request History:]"
TRAJECTORIES_PREFIX: Final = "[Step Trajectories Completed Previously:]"

Part = dict[str, Any]


def text_part(prefix: str, encoded: Iterable[str]) -> Part:
    """Return the text part of a section: ``prefix``, a newline, a space and the encoded items as a JSON array."""
    # Joining pre-encoded items with json.dumps's default item separator gives
    # the same text as json.dumps of the whole list.
    return {"type": "text", "text": f"{prefix}\n [{', '.join(encoded)}]"}


def metadata_text(record: Mapping[str, Any]) -> str:
    """Return a screenshot record's metadata as UFO sends it: ``json.dumps(record.get("metadata", ""))``."""
    return ufo_json(record.get("metadata", ""))


def trim_to_budget(
    texts: dict[str, list[str]],
    shots: list[dict[str, Any]],
    max_tokens: int,
    counter: TokenCounter,
) -> None:
    """Drop oldest entries of the costliest section until the prompt fits ``max_tokens``.

    Raises:
        BudgetExceededError: if the section titles alone cost more than ``max_tokens``.
    """
    prefixes = {
        "questions": QUESTIONS_PREFIX,
        "requests": REQUESTS_PREFIX,
        "trajectories": TRAJECTORIES_PREFIX,
    }

    def text_cost(name: str) -> int:
        return counter.count(text_part(prefixes[name], texts[name])["text"])

    def shots_cost() -> int:
        return sum(counter.count(metadata_text(s)) + counter.image_tokens for s in shots)

    costs = {name: text_cost(name) for name in prefixes}
    costs["screenshots"] = shots_cost()
    floor = counter.count(BLACKBOARD_PREFIX) + sum(
        counter.count(text_part(p, [])["text"]) for p in prefixes.values()
    )
    if floor > max_tokens:
        msg = f"The blackboard's section titles alone cost {floor} tokens, more than max_tokens={max_tokens}; raise the budget."
        raise BudgetExceededError(msg)
    header = counter.count(BLACKBOARD_PREFIX)
    while header + sum(costs.values()) > max_tokens:
        droppable = {
            name: cost
            for name, cost in costs.items()
            if (shots if name == "screenshots" else texts[name])
        }
        name = max(droppable, key=lambda n: droppable[n])
        if name == "screenshots":
            del shots[0]
            costs[name] = shots_cost()
        else:
            del texts[name][0]
            costs[name] = text_cost(name)
