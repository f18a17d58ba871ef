"""Prompt keys: which fields a projection reads, under which names, and the newest value of a key.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from agents.memory._item import NOTHING, MemoryItem, item_fields
from agents.memory.exceptions import ArgumentTypeError, UnmatchedKeyError, UnmatchedKeyWarning
from agents.memory.memory import Memory

__all__ = [
    "Key",
    "KeysLike",
    "latest_value",
    "normalize_keys",
    "project_fields",
    "report_unmatched",
    "to_names",
    "unmatched_key_message",
    "values_of",
]


def to_names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Key:
    """One key of a projection: the field to read, fallback names, and the output name.

    Example: ``Key("step", aliases=("Step",))`` reads ``step`` or, when an item
    has no ``step``, ``Step``, and writes it as ``step``.

    Args:
        name: The field to read first; also the output name unless ``rename`` is given.
        aliases: Other field names tried in order when ``name`` is missing.
        rename: The key the value is written under in the projection.
        optional: Never report this key as unmatched (for fields only some
            steps have, such as ``error``).
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    aliases: tuple[str, ...] = attrs.field(default=(), converter=to_names)
    rename: str | None = None
    optional: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The field names tried, in order."""
        return (self.name, *self.aliases)

    @property
    def output(self) -> str:
        """The key the value is written under."""
        return self.rename if self.rename is not None else self.name

    def read(self, fields: Mapping[str, Any]) -> Any:
        """Return the value of the first name ``fields`` holds, or ``NOTHING``."""
        for name in self.names:
            value = fields.get(name, NOTHING)
            if value is not NOTHING:
                return value
        return NOTHING


KeysLike: TypeAlias = "Iterable[str | Key] | Mapping[str, str | Sequence[str] | Key] | None"
"""Keys as given to :func:`project`: names and :class:`Key` objects, or ``{output: source(s)}``."""


def normalize_keys(keys: KeysLike) -> tuple[Key, ...] | None:
    if keys is None:
        return None
    if isinstance(keys, str):
        return (Key(keys),)
    out: list[Key] = []
    if isinstance(keys, Mapping):
        for output, source in keys.items():
            if isinstance(source, Key):
                out.append(attrs.evolve(source, rename=output))
            elif isinstance(source, str):
                out.append(Key(source, rename=output))
            else:
                names = list(source)
                if not names or not all(isinstance(n, str) for n in names):
                    msg = f"Key {output!r} maps to {source!r}; give a field name or a non-empty sequence of field names."
                    raise ArgumentTypeError(msg)
                out.append(Key(names[0], aliases=tuple(names[1:]), rename=output))
        return tuple(out)
    for key in keys:
        if isinstance(key, Key):
            out.append(key)
        elif isinstance(key, str):
            out.append(Key(key))
        else:
            msg = f"Keys must be strings or Key objects, got {key!r} ({type(key).__name__})."
            raise ArgumentTypeError(msg)
    return tuple(out)


def project_fields(fields: Mapping[str, Any], keys: tuple[Key, ...] | None) -> dict[str, Any]:
    if keys is None:
        return dict(fields)
    out: dict[str, Any] = {}
    for key in keys:
        if not key.aliases and key.name in fields:
            out[key.output] = fields[key.name]
            continue
        value = key.read(fields)
        if value is not NOTHING:
            out[key.output] = value
    return out


def report_unmatched(
    keys: tuple[Key, ...] | None, items: Sequence[MemoryItem], *, strict: bool
) -> None:
    """Warn (or raise, when strict) about keys that no item of ``items`` holds."""
    if keys is None or not items:
        return
    pending = dict.fromkeys(key for key in keys if not key.optional)
    if not pending:
        return
    present: dict[str, None] = {}
    for item in items:
        fields = item_fields(item)
        for key in list(pending):
            if any(name in fields for name in key.names):
                del pending[key]
        present.update(dict.fromkeys(fields))
        if not pending:
            return
    for key in pending:
        msg = unmatched_key_message(key.names, len(items), list(present))
        if strict:
            raise UnmatchedKeyError(msg)
        warnings.warn(UnmatchedKeyWarning(msg), stacklevel=3)


def unmatched_key_message(
    names: Sequence[str],
    selected: int,
    present: Sequence[str],
    *,
    consequence: str = "the prompt gets no value for it",
    alias_hint: bool = True,
) -> str:
    """Say that a key (under any of ``names``) matches none of ``selected`` items holding ``present`` keys, and suggest the closest.

    The message :meth:`Memory.project` warns with; ``kvmemory show --keys``
    prints the same, with its own ``consequence`` and no advice on ``Key`` aliases.
    """
    shown_names = " or ".join(repr(n) for n in names)
    close = difflib.get_close_matches(names[0], list(present), n=1)
    if not alias_hint:
        hint = f"did you mean {close[0]!r}?" if close else "check the spelling"
    elif close:
        hint = f"did you mean {close[0]!r}? Add it as an alias: Key({names[0]!r}, aliases=({close[0]!r},))"
    else:
        hint = "check the spelling or add an alias with Key(name, aliases=(...))"
    shown = list(present)[:12]
    return (
        f"Key {shown_names} matches none of the {selected} selected items, so {consequence}; "
        f"the items hold keys {shown}; {hint}."
    )


def latest_value(source: Memory | Iterable[MemoryItem], key: str | Key, default: Any = None) -> Any:
    """Return the value of ``key`` in the newest item that holds it, or ``default``.

    Reads newest first and stops at the first hit, so it is cheap on long memories.
    ``key`` may be a :class:`Key` to accept aliases (``Key("plan", aliases=("Plan",))``).
    """
    wanted = key if isinstance(key, Key) else Key(key)
    items: Iterable[MemoryItem] = (
        source.iter_newest() if isinstance(source, Memory) else reversed(list(source))
    )
    for item in items:
        value = wanted.read(item_fields(item))
        if value is not NOTHING:
            return value
    return default


def values_of(
    source: Memory | Iterable[MemoryItem], key: str | Key, *, flatten: bool = True
) -> list[Any]:
    """Return every value of ``key`` across items, in memory order.

    Args:
        source: A ``Memory`` or any iterable of items.
        key: The field (or a :class:`Key` with aliases).
        flatten: Splice list and tuple values in, one level deep (``[["a"], ["b", "c"]]`` gives ``["a", "b", "c"]``).
    """
    wanted = key if isinstance(key, Key) else Key(key)
    out: list[Any] = []
    for item in source:
        value = wanted.read(item_fields(item))
        if value is NOTHING:
            continue
        if flatten and isinstance(value, (list, tuple)):
            out.extend(value)
        else:
            out.append(value)
    return out
