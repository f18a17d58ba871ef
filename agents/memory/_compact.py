"""Compaction: what a window leaves out, folded into one summary kept with the session.

Part of :mod:`agents.memory.prompt`, which re-exports the public names. The
window code (``_window``) decides what falls out and calls the summariser;
this module holds the value objects, the stored form of a summary, and the
offline summariser shipped for examples and tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs

from agents.memory._render import ufo_json
from agents.memory.exceptions import ArgumentTypeError, CorruptSessionError, InvalidArgumentError
from agents.memory.memory import Memory

__all__ = [
    "DEFAULT_SUMMARY_KEY",
    "Compaction",
    "Summarizer",
    "Summary",
    "TallySummarizer",
    "read_summary",
]

Summarizer: TypeAlias = Callable[[str | None, Sequence[Mapping[str, Any]]], str]
"""``summarizer(previous, records) -> text``: extend ``previous`` (``None`` at first) with ``records``."""

DEFAULT_SUMMARY_KEY: Final = "kvmemory.summary"
"""The session metadata key under which a window's summary is stored."""


def _is_summarizer(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        msg = (
            f"summarizer must be a callable summarizer(previous, records) -> str, got {type(value).__name__}; "
            "wrap your model call in a function, or use TallySummarizer() offline."
        )
        raise ArgumentTypeError(msg)


def _keep_fraction(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) not in (int, float) or not 0 <= value <= 1:
        msg = f"keep must be a number from 0 to 1 (the share of the window left after a compaction), got {value!r}."
        raise InvalidArgumentError(msg)


def _non_empty_str(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not str or not value:
        msg = f"{attribute.name} must be a non-empty string, got {value!r}."
        raise InvalidArgumentError(msg)


@attrs.frozen
class Compaction:
    """Fold what a window leaves out into one summary, kept with the session.

    Give it to a window (``Window(..., compaction=Compaction(my_summarizer))``).
    When the window cannot hold every item not yet summarised, the oldest of
    them are handed to ``summarizer`` together with the summary so far, and
    its answer becomes the new summary: one item pinned into this and every
    later prompt, in the place of the items it covers. A summary is only ever
    extended with the items that newly fell out, never rebuilt from the
    whole history, and each compaction folds enough items that the rest fill
    at most ``keep`` of the window, so a model-backed summariser is called
    once every several steps, not at every step.

    The summary is stored in the memory's session metadata under ``key``, as
    ``{"text": ..., "steps": [...], "items": n, "trailing": t}`` (the steps
    it covers, in order, and how many items), so it is saved with a session
    file and written through to every store (``memory.metadata = ...``); a
    memory reopened in another process continues it. Items are recognised as
    covered by their step value, so steps should identify items (increase
    through the session): the newest item with the last step the summary
    lists, every unpinned item before it, and the ``trailing`` items without
    a step folded after it are covered. In a memory whose items have no step
    the first ``items`` unpinned items are (deleting old items then shifts
    what is covered). Two processes compacting one session at once each
    write the summary; the last write wins.

    Args:
        summarizer: ``summarizer(previous, records) -> str``: ``previous`` is
            the summary so far (``None`` the first time), ``records`` the
            projected records that fell out, oldest first. In practice a model
            call; :class:`TallySummarizer` is a deterministic offline one.
        keep: After a compaction, the items left unsummarised fill at most this
            share of each of the window's bounds (tokens, text tokens, items).
        key: The session metadata key that holds the summary.
        field: The field name of the summary in the prompt record.

    Raises:
        ArgumentTypeError: if ``summarizer`` is not callable.
        InvalidArgumentError: if ``keep`` is not from 0 to 1, or a key is empty.
    """

    summarizer: Summarizer = attrs.field(validator=_is_summarizer)
    keep: float = attrs.field(default=0.5, validator=_keep_fraction, kw_only=True)
    key: str = attrs.field(default=DEFAULT_SUMMARY_KEY, validator=_non_empty_str, kw_only=True)
    field: str = attrs.field(default="summary", validator=_non_empty_str, kw_only=True)


@attrs.frozen
class Summary:
    """A summary of the items a window left out, as stored with the session.

    Attributes:
        text: The summariser's text.
        steps: The step values of the covered items, oldest first (an item
            without a step adds none).
        items: How many items it covers.
        trailing: How many of them, items without a step, come after the
            newest covered item that has one.
    """

    text: str
    steps: tuple[Any, ...] = ()
    items: int = 0
    trailing: int = 0

    def to_metadata(self) -> dict[str, Any]:
        """Return the summary as the session metadata stores it."""
        return {
            "text": self.text,
            "steps": list(self.steps),
            "items": self.items,
            "trailing": self.trailing,
        }

    def covered_steps(self) -> set[Hashable]:
        """Return the hashable step values the summary covers."""
        out: set[Hashable] = set()
        for step in self.steps:
            if isinstance(step, Hashable):
                try:
                    out.add(step)
                except TypeError:  # a tuple holding a list, say
                    continue
        return out


def read_summary(memory: Memory, key: str = DEFAULT_SUMMARY_KEY) -> Summary | None:
    """Return the summary a compacting window stored in ``memory``'s metadata, or ``None``.

    Args:
        memory: The memory (a stored one reads what its store holds).
        key: The metadata key (``Compaction.key``).

    Raises:
        CorruptSessionError: naming the key when the stored value is not a summary.
    """
    value = memory.metadata.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("text"), str)
        or not isinstance(value.get("steps", []), (list, tuple))
        or any(
            type(value.get(k, 0)) is not int or value.get(k, 0) < 0 for k in ("items", "trailing")
        )
    ):
        msg = (
            f"Session metadata {key!r} of session {memory.session_id!r} is not a summary "
            f"(expected {{'text': str, 'steps': list, 'items': int}}, got {type(value).__name__}); "
            f"delete memory.metadata[{key!r}] to start a new summary, or pass Compaction(key=...)."
        )
        raise CorruptSessionError(msg)
    return Summary(
        str(value["text"]),
        tuple(value.get("steps", ())),
        int(value.get("items", 0)),
        int(value.get("trailing", 0)),
    )


def write_summary(memory: Memory, key: str, summary: Summary) -> None:
    """Store ``summary`` in ``memory``'s metadata (written through to a store by assignment)."""
    memory.metadata = {**memory.metadata, key: summary.to_metadata()}


# -- the offline summariser ----------------------------------------------------------

_OTHER: Final = "(other)"
_HEAD: Final = re.compile(r"^Earlier: (\d+) items, steps (.+?) to (.+?)\.$")
_LINE: Final = re.compile(r"^- ([^:]+): (.*)$")


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{value} x{n}" for value, n in counts.items())


def _parse_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for chunk in text.split(", "):
        value, sep, n = chunk.rpartition(" x")
        if sep and n.isdigit():
            counts[value] = int(n)
    return counts


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else ufo_json(value)
    return " ".join(text.split())[:40].replace(",", ";")


@attrs.frozen
class TallySummarizer:
    """A deterministic, offline summariser: counts and the latest notable steps.

    Meant for examples, tests and benchmarks, where no model is at hand. The
    summary names the range of steps covered, counts the values of the
    ``tally`` fields (which actions were taken how often; the ``most``
    frequent values by name, the rest as ``(other)``), and lists the
    steps of the last ``recent`` records holding one of the ``notable``
    fields (errors, by default). It reads its own previous text to extend it,
    so it works across processes with nothing kept in RAM, and its length
    stays bounded however many steps it covers. A real agent passes a
    function that asks its model to extend the summary instead.

    Args:
        tally: Fields whose values are counted.
        notable: Fields that make a record worth naming.
        recent: How many notable steps are named.
        step_key: The field that names a record's step.
        most: How many values of each tallied field are named.
    """

    tally: tuple[str, ...] = attrs.field(default=("action",), converter=tuple)
    notable: tuple[str, ...] = attrs.field(default=("error",), converter=tuple)
    recent: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    step_key: str = "step"
    most: int = attrs.field(default=8, validator=attrs.validators.ge(1))

    def __call__(self, previous: str | None, records: Sequence[Mapping[str, Any]]) -> str:
        """Return ``previous`` extended with ``records``."""
        total, first, last = 0, "?", "?"
        counts: dict[str, dict[str, int]] = {name: {} for name in self.tally}
        named: list[str] = []
        for line in (previous or "").splitlines():
            head = _HEAD.match(line)
            if head:
                total, first, last = int(head.group(1)), head.group(2), head.group(3)
                continue
            entry = _LINE.match(line)
            if entry and entry.group(1) in counts:
                counts[entry.group(1)] = _parse_counts(entry.group(2))
            elif entry and entry.group(1) == "notable":
                named = [s for s in entry.group(2).split(", ") if s]
        for record in records:
            step = _shown(record.get(self.step_key, "?"))
            first = step if total == 0 else first
            last = step
            total += 1
            for name in self.tally:
                if name in record:
                    value = _shown(record[name])
                    counts[name][value] = counts[name].get(value, 0) + 1
            for name in self.notable:
                if name in record:
                    named.append(f"step {step} {name}: {_shown(record[name])}")
        lines = [f"Earlier: {total} items, steps {first} to {last}."]
        lines += [f"- {name}: {_counts_text(self._top(c))}" for name, c in counts.items() if c]
        if named and self.recent:
            lines.append(f"- notable: {', '.join(named[-self.recent :])}")
        return "\n".join(lines)

    def _top(self, counts: dict[str, int]) -> dict[str, int]:
        """Keep the ``most`` most frequent values (first seen first on ties); add the rest as (other)."""
        other = counts.pop(_OTHER, 0)
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])
        named = dict(ranked[: self.most])
        other += sum(n for _, n in ranked[self.most :])
        if other:
            named[_OTHER] = other
        return named
