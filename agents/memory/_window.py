"""Windows and projections: the items (and fields) of a memory that go into a prompt, within bounds.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs

from agents.memory import _codec
from agents.memory._images import DEFAULT_IMAGE_KEYS, count_images
from agents.memory._item import NOTHING, MemoryItem, item_fields
from agents.memory._keys import (
    Key,
    KeysLike,
    normalize_keys,
    project_fields,
    report_unmatched,
    to_names,
)
from agents.memory._render import render_json
from agents.memory._tokens import (
    EstimateCounter,
    TokenCounter,
    non_negative_int,
    optional_non_negative_int,
)
from agents.memory.exceptions import ArgumentTypeError, BudgetExceededError, InvalidArgumentError
from agents.memory.memory import Memory

__all__ = ["GroupBy", "Window", "WindowResult", "project", "select_window"]

GroupBy: TypeAlias = "str | Callable[[MemoryItem], Hashable] | None"
"""How a window groups items: a field name, a function of the item, or ``None`` for no groups."""


def _is_counter(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, TokenCounter):
        msg = (
            f"counter must have count(text) and image_tokens (a TokenCounter), got {type(value).__name__}; "
            "use EstimateCounter() or TiktokenCounter()."
        )
        raise ArgumentTypeError(msg)


def _measure_json(record: Mapping[str, Any]) -> str:
    if type(record) is dict and _codec.is_plain(record):
        return _codec.dumps(record).decode("utf-8")  # scalars only: no walk needed
    return render_json([record])[1:-1]


@attrs.frozen
class Window:
    """Bounds on prompt history: how many items, tokens and images, and what to keep.

    Items are taken newest first until the next group would break a bound, and
    returned in memory order. Each item costs the tokens of ``measure(record)``
    (its compact JSON by default) plus one token for the separator, plus
    ``counter.image_tokens`` per image it attaches; the list costs one more
    token for its brackets. So ``count_tokens(render_json(result.records))``
    never exceeds ``max_tokens`` with the default counter.

    Args:
        max_items: Keep at most this many items (pinned ones included).
        max_tokens: Keep the total cost at or under this many tokens.
        max_images: Attach at most this many images; older items beyond the cap
            keep their text but lose their image fields.
        pin_first: Always keep the first ``pin_first`` selected items (the task, a system item).
        pinned: Always keep items for which ``pinned(item)`` is true (reads every item).
        group_by: A field name, or a function of the item, whose equal values on
            consecutive items make a group kept or dropped whole; items without
            the field (or where the function returns ``None``) stand alone.
        counter: The token counter (default :class:`EstimateCounter`).
        image_keys: The fields that hold image paths or URLs.
        measure: Renders one projected record as the text to count.
    """

    max_items: int | None = attrs.field(default=None, validator=optional_non_negative_int)
    max_tokens: int | None = attrs.field(default=None, validator=optional_non_negative_int)
    max_images: int | None = attrs.field(default=None, validator=optional_non_negative_int)
    pin_first: int = attrs.field(default=0, validator=non_negative_int)
    pinned: Callable[[MemoryItem], bool] | None = None
    group_by: GroupBy = None
    counter: TokenCounter = attrs.field(factory=EstimateCounter, validator=_is_counter)
    image_keys: tuple[str, ...] = attrs.field(default=DEFAULT_IMAGE_KEYS, converter=to_names)
    measure: Callable[[Mapping[str, Any]], str] = _measure_json


@attrs.frozen
class WindowResult:
    """The items a window kept, their projected records, and what they cost.

    Attributes:
        items: The kept items, in memory order.
        records: Their projected fields (fresh dicts), aligned with ``items``.
        tokens: The total cost under the window's counter.
        images: How many images the records attach.
        dropped: How many selected items were left out (only counted up to the
            first group that did not fit, since older items are never read).
    """

    items: tuple[MemoryItem, ...]
    records: tuple[dict[str, Any], ...]
    tokens: int
    images: int
    dropped: int


class _Selected:
    """Random access to the selected items without copying a whole memory.

    Over a ``Memory``, positions near the end are read through
    ``Memory.iter_newest`` into a small buffer, so a window costs what it
    reads; positions far from the end (pinned first items) are read directly.
    """

    __slots__ = ("_items", "_length", "_memory", "_newest", "_source")

    def __init__(self, memory: Memory | None, items: Sequence[MemoryItem] | None) -> None:
        self._memory = memory
        self._items = items
        self._newest: list[MemoryItem] = []
        self._source: Iterator[MemoryItem] | None = None
        if memory is not None:
            self._length = len(memory)
            self._source = memory.iter_newest()
        else:
            assert items is not None  # one of the two is always set
            self._length = len(items)

    def __len__(self) -> int:
        return self._length

    def all(self) -> list[MemoryItem]:
        """Return every selected item in order (one copy, for whole projections)."""
        if self._memory is not None:
            return self._memory.content
        assert self._items is not None  # set when there is no memory
        return list(self._items)

    def __getitem__(self, index: int) -> MemoryItem:
        if self._memory is None:
            assert self._items is not None  # set when there is no memory
            return self._items[index]
        back = self._length - 1 - index
        newest = self._newest
        if back >= len(newest) + 64 or self._source is None:
            return self._memory[index]
        while len(newest) <= back:
            item = next(self._source, None)
            if item is None:
                self._source = None
                return self._memory[index]
            newest.append(item)
        return newest[back]


_ALONE: Final = object()


def _group_of(item: MemoryItem, group_by: GroupBy) -> Any:
    if group_by is None:
        return _ALONE
    value = item_fields(item).get(group_by, _ALONE) if isinstance(group_by, str) else group_by(item)
    return _ALONE if value is None else value


def _same_group(a: Any, b: Any) -> bool:
    if a is _ALONE or b is _ALONE:
        return False
    try:
        return bool(a == b)
    except Exception:  # values whose comparison fails never group together
        return False


def _group_span(items: _Selected, index: int, group_by: GroupBy) -> tuple[int, int]:
    """Return the first and last index of the group holding ``index``."""
    if group_by is None:
        return index, index
    value = _group_of(items[index], group_by)
    first = last = index
    while first > 0 and _same_group(_group_of(items[first - 1], group_by), value):
        first -= 1
    while last + 1 < len(items) and _same_group(_group_of(items[last + 1], group_by), value):
        last += 1
    return first, last


class _Budget:
    """Running totals of a window while it is being filled."""

    __slots__ = ("count", "images", "tokens", "window")

    def __init__(self, window: Window) -> None:
        self.window = window
        self.count = 0
        self.images = 0
        self.tokens = 1 if window.max_tokens is not None else 0  # the list's brackets

    def cost(self, records: list[dict[str, Any]], images_left: int | None) -> tuple[int, int]:
        """Return (tokens, images) of ``records``, dropping image fields beyond ``images_left``."""
        window = self.window
        tokens = 0
        images = 0
        for i, record in enumerate(records):
            n = count_images(record, window.image_keys)
            if n and images_left is not None and images + n > images_left:
                record = {k: v for k, v in record.items() if k not in window.image_keys}
                records[i] = record
                n = 0
            images += n
            if window.max_tokens is not None:
                tokens += window.counter.count(window.measure(record)) + 1
        tokens += images * window.counter.image_tokens if window.max_tokens is not None else 0
        return tokens, images

    def images_left(self) -> int | None:
        cap = self.window.max_images
        return None if cap is None else cap - self.images

    def fits(self, n_items: int, tokens: int) -> bool:
        window = self.window
        if window.max_items is not None and self.count + n_items > window.max_items:
            return False
        return window.max_tokens is None or self.tokens + tokens <= window.max_tokens

    def take(self, n_items: int, tokens: int, images: int) -> None:
        self.count += n_items
        self.tokens += tokens
        self.images += images


def _records_of(
    items: Iterable[MemoryItem], keys: tuple[Key, ...] | None
) -> tuple[list[MemoryItem], list[dict[str, Any]]]:
    kept_items: list[MemoryItem] = []
    records: list[dict[str, Any]] = []
    for item in items:
        record = project_fields(item_fields(item), keys)
        if record or keys is None:
            kept_items.append(item)
            records.append(record)
    return kept_items, records


_Row = tuple[int, MemoryItem, dict[str, Any]]


def _rows(selected: _Selected, indices: Iterable[int], keys: tuple[Key, ...] | None) -> list[_Row]:
    """Project the items at ``indices``; with keys, items that hold none of them give no row."""
    rows: list[_Row] = []
    for index in indices:
        item = selected[index]
        record = project_fields(item_fields(item), keys)
        if record or keys is None:
            rows.append((index, item, record))
    return rows


def _charge(budget: _Budget, rows: list[_Row]) -> tuple[list[_Row], int, int]:
    records = [record for _, _, record in rows]
    tokens, images = budget.cost(records, budget.images_left())
    return [(i, item, r) for (i, item, _), r in zip(rows, records, strict=True)], tokens, images


def _fill(
    selected: _Selected, window: Window, keys: tuple[Key, ...] | None, step_key: str
) -> WindowResult:
    n = len(selected)
    group_by = window.group_by
    budget = _Budget(window)

    # Pinned spans first: they are kept whatever else happens, so they are
    # charged before any other item and must fit on their own. A pinned item
    # pins its whole group, so pinning never splits a group either.
    pinned_idx: set[int] = set(range(min(window.pin_first, n)))
    if window.pinned is not None:
        pinned_idx.update(i for i in range(n) if window.pinned(selected[i]))
    covered: set[int] = set()
    for index in sorted(pinned_idx):
        if index not in covered:
            first, last = _group_span(selected, index, group_by)
            covered.update(range(first, last + 1))
    chosen: dict[int, tuple[MemoryItem, dict[str, Any]]] = {}
    if covered:
        rows, tokens, images = _charge(budget, _rows(selected, sorted(covered), keys))
        if not budget.fits(len(rows), tokens):
            labels = [item_fields(row[1]).get(step_key, f"#{row[0]}") for row in rows][:10]
            msg = (
                f"The pinned items (steps {labels}) need {len(rows)} items and {tokens} tokens, "
                f"more than the window allows (max_items={window.max_items}, max_tokens={window.max_tokens}); "
                "raise the budget, pin fewer items, or project fewer keys."
            )
            raise BudgetExceededError(msg)
        budget.take(len(rows), tokens, images)
        chosen.update((i, (item, record)) for i, item, record in rows)

    # Then the newest groups, one whole group at a time, until one does not fit.
    dropped = 0
    index = n - 1
    while index >= 0:
        if index in covered:
            index -= 1
            continue
        last = index
        value = _group_of(selected[index], group_by) if group_by is not None else _ALONE
        while (
            group_by is not None
            and index > 0
            and (index - 1) not in covered
            and _same_group(_group_of(selected[index - 1], group_by), value)
        ):
            index -= 1
        first = index
        index -= 1
        rows, tokens, images = _charge(budget, _rows(selected, range(first, last + 1), keys))
        if not rows:
            continue
        if not budget.fits(len(rows), tokens):
            dropped = last + 1 - sum(1 for i in covered if i <= last)
            break
        budget.take(len(rows), tokens, images)
        chosen.update((i, (item, record)) for i, item, record in rows)

    order = sorted(chosen)
    return WindowResult(
        items=tuple(chosen[i][0] for i in order),
        records=tuple(chosen[i][1] for i in order),
        tokens=budget.tokens,
        images=budget.images,
        dropped=dropped,
    )


def _select(
    source: Memory | Iterable[MemoryItem],
    *,
    steps: Iterable[Any] | None,
    last: int | None,
    where: Callable[[MemoryItem], bool] | None,
    step_key: str,
) -> _Selected:
    if last is not None and (type(last) is not int or last < 0):
        msg = f"last must be an int >= 0, got {last!r}."
        raise InvalidArgumentError(msg)
    memory = source if isinstance(source, Memory) else None
    if memory is not None and steps is None and where is None:
        if last is None:
            return _Selected(memory, None)
        return _Selected(None, memory.last(last))
    items: list[MemoryItem] = list(source)
    if steps is not None:
        wanted = list(steps)
        items = [item for item in items if _in(item_fields(item).get(step_key, NOTHING), wanted)]
    if where is not None:
        items = [item for item in items if where(item)]
    if last is not None:
        items = items[len(items) - last :] if last else []
    return _Selected(None, items)


def _step_key(source: Memory | Iterable[MemoryItem], step_key: str | None) -> str:
    """Return the step key given, else the memory's, else ``"step"``."""
    if step_key is not None:
        return step_key
    return source.step_key if isinstance(source, Memory) else "step"


def _in(value: Any, wanted: list[Any]) -> bool:
    if value is NOTHING:
        return False
    return any(value == w for w in wanted)


def select_window(
    source: Memory | Iterable[MemoryItem],
    window: Window,
    *,
    keys: KeysLike = None,
    steps: Iterable[Any] | None = None,
    last: int | None = None,
    where: Callable[[MemoryItem], bool] | None = None,
    strict: bool = False,
    step_key: str | None = None,
) -> WindowResult:
    """Choose the items of ``source`` that fit ``window``, newest first, in memory order.

    Args:
        source: A ``Memory`` or any iterable of items.
        window: The bounds, pins and grouping.
        keys: The keys to project (all fields when ``None``).
        steps: Only items whose step is one of these.
        last: Only the last ``last`` items (after ``steps`` and ``where``).
        where: Only items for which ``where(item)`` is true.
        strict: Raise instead of warning when a key matches no kept item.
        step_key: The field that names a step (default: the memory's ``step_key``,
            or ``"step"`` for other sources).

    Items added to the memory while the window is being chosen may or may not
    be part of it.

    Returns:
        The kept items, their records and their cost.

    Raises:
        BudgetExceededError: if the pinned items alone break the window's bounds.
        UnmatchedKeyError: in strict mode, naming a key no kept item holds.
    """
    normalized = normalize_keys(keys)
    chosen_key = _step_key(source, step_key)
    selected = _select(source, steps=steps, last=last, where=where, step_key=chosen_key)
    result = _fill(selected, window, normalized, chosen_key)
    report_unmatched(normalized, _candidates(result, source, normalized), strict=strict)
    return result


def _candidates(
    result: WindowResult, source: Memory | Iterable[MemoryItem], keys: tuple[Key, ...] | None
) -> Sequence[MemoryItem]:
    # Items left out because their record was empty still count as "seen" for
    # the unmatched-key report: look at what was kept, or a few newest items.
    if result.items or keys is None:
        return result.items
    if isinstance(source, Memory):
        return source.last(32)
    return list(source)[-32:] if not isinstance(source, Iterator) else []


def project(
    source: Memory | Iterable[MemoryItem],
    keys: KeysLike = None,
    *,
    steps: Iterable[Any] | None = None,
    last: int | None = None,
    where: Callable[[MemoryItem], bool] | None = None,
    budget: int | Window | None = None,
    strict: bool = False,
    step_key: str | None = None,
) -> list[dict[str, Any]]:
    """Return prompt material from ``source``: the chosen keys of the chosen items, in memory order.

    Each record is a fresh dict, so changing it never changes the memory. With
    ``keys``, an item that holds none of them gives no record.

    Example::

        project(memory, {"step": ("step", "Step"), "action": "action"}, last=5)

    Args:
        source: A ``Memory`` or any iterable of items.
        keys: Field names, :class:`Key` objects, or ``{output: source(s)}``; ``None`` keeps all fields.
        steps: Only items whose step is one of these.
        last: Only the last ``last`` items.
        where: Only items for which ``where(item)`` is true.
        budget: A token budget (an int) or a :class:`Window`; newest items are kept first.
        strict: Raise :class:`UnmatchedKeyError` instead of warning when a key matches nothing.
        step_key: The field that names a step (default: the memory's ``step_key``,
            or ``"step"`` for other sources).

    Returns:
        A list of fresh dicts in memory order.

    Raises:
        UnmatchedKeyError: in strict mode, naming the key and the keys that do occur.
        BudgetExceededError: if pinned items alone break the window.

    Warns:
        UnmatchedKeyWarning: naming a key that no selected item holds.
    """
    normalized = normalize_keys(keys)
    chosen_key = _step_key(source, step_key)
    selected = _select(source, steps=steps, last=last, where=where, step_key=chosen_key)
    if budget is None:
        items = selected.all()
        report_unmatched(normalized, items, strict=strict)
        return _records_of(items, normalized)[1]
    window = budget if isinstance(budget, Window) else Window(max_tokens=budget)
    result = _fill(selected, window, normalized, chosen_key)
    report_unmatched(normalized, _candidates(result, source, normalized), strict=strict)
    return list(result.records)
