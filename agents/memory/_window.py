"""Windows and projections: the items (and fields) of a memory that go into a prompt, within bounds.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs

from agents.memory import _codec
from agents.memory._compact import Compaction, Summary, read_summary, write_summary
from agents.memory._images import DEFAULT_IMAGE_KEYS, image_refs
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
    count_image_tokens,
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


def _is_compaction(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, Compaction):
        msg = f"compaction must be a Compaction(summarizer) or None, got {type(value).__name__}."
        raise ArgumentTypeError(msg)


@attrs.frozen
class Window:
    """Bounds on prompt history: how many items, tokens and images, and what to keep.

    Items are taken newest first until the next group would break a bound, and
    returned in memory order. Text and images are costed apart:

    * an item's **text** costs the tokens of ``measure(record)`` over its
      fields *without* the image fields (what :func:`render_parts` sends as
      text), plus one token for the separator; the list costs one more token
      for its brackets;
    * each attached **image** costs what the counter says for it
      (:func:`count_image_tokens`: the flat ``counter.image_tokens``, or by the
      image's size when the counter has an ``image_cost`` formula).

    So ``prompt_cost(render_parts(result.records), counter)`` never costs more
    than the result's ``tokens``, ``text_tokens`` and ``image_tokens``, and
    hence never more than the bounds. ``max_tokens`` bounds the total (text
    and images together), as it always did; ``max_text_tokens`` and
    ``max_images`` / ``max_image_tokens`` bound each part on its own, so
    "2,000 tokens of history plus the last 2 screenshots" is
    ``Window(max_text_tokens=2000, max_images=2)``.

    Args:
        max_items: Keep at most this many items (pinned ones included).
        max_tokens: Keep the total cost, text and images, at or under this many tokens.
        max_images: Attach at most this many images; older items beyond the cap
            keep their text but lose their image fields.
        pin_first: Always keep the first ``pin_first`` selected items (the task, a system item).
        pinned: Always keep items for which ``pinned(item)`` is true (reads every item).
        group_by: A field name, or a function of the item, whose equal values on
            consecutive items make a group kept or dropped whole; items without
            the field (or where the function returns ``None``) stand alone.
        counter: The token counter (default :class:`EstimateCounter`).
        image_keys: The fields that hold image paths or URLs.
        measure: Renders one projected record (image fields removed) as the text to count.
        max_text_tokens: Keep the text cost at or under this many tokens (images not counted).
        max_image_tokens: Keep the images' cost at or under this many tokens;
            like ``max_images``, older items beyond it lose their image fields.
        compaction: Fold the items the window leaves out into one summary,
            pinned into this and later prompts and stored with the session
            (see :class:`Compaction`); needs a ``Memory`` as the source.
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
    max_text_tokens: int | None = attrs.field(
        default=None, validator=optional_non_negative_int, kw_only=True
    )
    max_image_tokens: int | None = attrs.field(
        default=None, validator=optional_non_negative_int, kw_only=True
    )
    compaction: Compaction | None = attrs.field(
        default=None, validator=_is_compaction, kw_only=True
    )


@attrs.frozen
class WindowResult:
    """The items a window kept, their projected records, and what they cost.

    Attributes:
        items: The kept items, in memory order (with compaction, a fresh item
            holding the summary stands where the items it covers were).
        records: Their projected fields (fresh dicts), aligned with ``items``.
        tokens: The total cost: ``text_tokens + image_tokens``.
        images: How many images the records attach.
        dropped: How many selected items were left out and are not covered by
            a summary (only counted up to the first group that did not fit,
            since older items are never read).
        text_tokens: What the records' text costs (image fields not counted).
        image_tokens: What the attached images cost.
        summary: The summary in the prompt, or ``None`` (no compaction, or nothing left out yet).
        summarized: How many items this call folded into the summary (0 when
            the summary was only reused).
    """

    items: tuple[MemoryItem, ...]
    records: tuple[dict[str, Any], ...]
    tokens: int
    images: int
    dropped: int
    text_tokens: int = 0
    image_tokens: int = 0
    summary: Summary | None = None
    summarized: int = 0


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

    __slots__ = ("count", "image_tokens", "images", "text_tokens", "window")

    def __init__(self, window: Window) -> None:
        self.window = window
        self.count = 0
        self.images = 0
        self.image_tokens = 0
        self.text_tokens = 1  # the list's brackets

    def cost(self, records: list[dict[str, Any]]) -> tuple[int, int, int]:
        """Return (text tokens, images, image tokens) of ``records``.

        Image fields beyond the window's image bounds are dropped from the records.
        """
        window = self.window
        image_keys = window.image_keys
        counter = window.counter
        text = images = image_tokens = 0
        for i, record in enumerate(records):
            refs = [ref for k in image_keys if k in record for ref in image_refs(record[k])]
            plain = record
            if refs or any(k in record for k in image_keys):
                plain = {k: v for k, v in record.items() if k not in image_keys}
            if refs:
                # Count first: an image beyond max_images is stripped without
                # reading its file for a size.
                cost = -1
                if self._count_fits(images + len(refs)):
                    cost = sum(count_image_tokens(ref, counter) for ref in refs)
                if cost < 0 or not self._tokens_fit(image_tokens + cost):
                    records[i] = plain
                else:
                    images += len(refs)
                    image_tokens += cost
            text += counter.count(window.measure(plain)) + 1
        return text, images, image_tokens

    def _count_fits(self, images: int) -> bool:
        cap = self.window.max_images
        return cap is None or self.images + images <= cap

    def _tokens_fit(self, image_tokens: int) -> bool:
        cap = self.window.max_image_tokens
        return cap is None or self.image_tokens + image_tokens <= cap

    def fits(self, n_items: int, text: int, image_tokens: int) -> bool:
        window = self.window
        if window.max_items is not None and self.count + n_items > window.max_items:
            return False
        if window.max_text_tokens is not None and self.text_tokens + text > window.max_text_tokens:
            return False
        total = self.text_tokens + text + self.image_tokens + image_tokens
        return window.max_tokens is None or total <= window.max_tokens

    def take(self, n_items: int, text: int, images: int, image_tokens: int) -> None:
        self.count += n_items
        self.text_tokens += text
        self.images += images
        self.image_tokens += image_tokens


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


_Cost = tuple[int, int, int]  # text tokens, images, image tokens


def _charge(budget: _Budget, rows: list[_Row]) -> tuple[list[_Row], _Cost]:
    records = [record for _, _, record in rows]
    cost = budget.cost(records)
    return [(i, item, r) for (i, item, _), r in zip(rows, records, strict=True)], cost


def _fits(budget: _Budget, n_items: int, cost: _Cost) -> bool:
    return budget.fits(n_items, cost[0], cost[2])


def _take(budget: _Budget, n_items: int, cost: _Cost) -> None:
    budget.take(n_items, cost[0], cost[1], cost[2])


@attrs.define
class _Filled:
    """What one filling pass chose, and where it stopped."""

    chosen: dict[float, tuple[MemoryItem, dict[str, Any]]]
    budget: _Budget
    dropped: int
    stop: int  # the index of the newest unpinned item left out (-1: none)
    only_pinned: bool  # every selected item is pinned


def _pinned_span(selected: _Selected, window: Window) -> set[int]:
    """Return the indices that are always kept: pinned items and their whole groups."""
    n = len(selected)
    pinned_idx: set[int] = set(range(min(window.pin_first, n)))
    if window.pinned is not None:
        pinned_idx.update(i for i in range(n) if window.pinned(selected[i]))
    covered: set[int] = set()
    for index in sorted(pinned_idx):
        if index not in covered:
            first, last = _group_span(selected, index, window.group_by)
            covered.update(range(first, last + 1))
    return covered


def _fill(
    selected: _Selected,
    window: Window,
    keys: tuple[Key, ...] | None,
    step_key: str,
    *,
    pins: set[int] | None = None,
    charge_pins: bool = True,
    floor: int = -1,
    summary: tuple[MemoryItem, dict[str, Any]] | None = None,
) -> _Filled:
    """Fill ``window`` from the newest item down to (not including) index ``floor``.

    ``summary``, when given, is charged with the pinned items and placed just
    after index ``floor`` (the items it covers).
    """
    n = len(selected)
    group_by = window.group_by
    budget = _Budget(window)

    # Pinned spans first: they are kept whatever else happens, so they are
    # charged before any other item and must fit on their own. A pinned item
    # pins its whole group, so pinning never splits a group either.
    covered = _pinned_span(selected, window) if pins is None else pins
    chosen: dict[float, tuple[MemoryItem, dict[str, Any]]] = {}
    if (covered and charge_pins) or summary is not None:
        rows = _rows(selected, sorted(covered), keys) if charge_pins else []
        if summary is not None:
            rows.append((-1, *summary))
        rows, cost = _charge(budget, rows)
        if not _fits(budget, len(rows), cost):
            labels = [
                item_fields(row[1]).get(step_key, f"#{row[0]}") for row in rows if row[0] >= 0
            ][:10]
            what = "the summary" if summary is not None and not labels else f"steps {labels}"
            if summary is not None and labels:
                what += " and the summary"
            msg = (
                f"The pinned items ({what}) need {len(rows)} items and {cost[0]} text tokens "
                f"plus {cost[2]} image tokens, more than the window allows (max_items={window.max_items}, "
                f"max_tokens={window.max_tokens}, max_text_tokens={window.max_text_tokens}); "
                "raise the budget, pin fewer items, project fewer keys, or keep summaries shorter."
            )
            raise BudgetExceededError(msg)
        _take(budget, len(rows), cost)
        chosen.update(((i if i >= 0 else floor + 0.5), (item, record)) for i, item, record in rows)

    # Then the newest groups, one whole group at a time, until one does not fit.
    dropped = 0
    stop = -1
    index = n - 1
    while index > floor:
        if index in covered:
            index -= 1
            continue
        last = index
        value = _group_of(selected[index], group_by) if group_by is not None else _ALONE
        while (
            group_by is not None
            and index > floor + 1
            and (index - 1) not in covered
            and _same_group(_group_of(selected[index - 1], group_by), value)
        ):
            index -= 1
        first = index
        index -= 1
        rows, cost = _charge(budget, _rows(selected, range(first, last + 1), keys))
        if not rows:
            continue
        if not _fits(budget, len(rows), cost):
            dropped = last - floor - sum(1 for i in covered if floor < i <= last)
            stop = last
            break
        _take(budget, len(rows), cost)
        chosen.update((i, (item, record)) for i, item, record in rows)
    return _Filled(chosen, budget, dropped, stop, only_pinned=len(covered) >= n)


def _result(filled: _Filled, summary: Summary | None = None, summarized: int = 0) -> WindowResult:
    chosen = filled.chosen
    order = sorted(chosen)
    budget = filled.budget
    return WindowResult(
        items=tuple(chosen[i][0] for i in order),
        records=tuple(chosen[i][1] for i in order),
        tokens=budget.text_tokens + budget.image_tokens,
        images=budget.images,
        dropped=filled.dropped,
        text_tokens=budget.text_tokens,
        image_tokens=budget.image_tokens,
        summary=summary,
        summarized=summarized,
    )


def _scaled(bound: int | None, share: float) -> int | None:
    return None if bound is None else int(bound * share)


def _hashable_step(item: MemoryItem, step_key: str) -> Hashable | None:
    step = item_fields(item).get(step_key)
    if step is None or not isinstance(step, Hashable):
        return None
    try:
        hash(step)
    except TypeError:
        return None
    return step


def _cursor(selected: _Selected, pins: set[int], summary: Summary | None, step_key: str) -> int:
    """Return the index of the newest item the summary covers (-1: none).

    That is the newest unpinned item whose step is the last step the summary
    lists (or, if that item is gone, any step it lists), followed by the
    ``trailing`` unpinned items without a step that were folded after it.
    """
    if summary is None:
        return -1
    base = -1
    if summary.steps:
        last = summary.steps[-1]
        covered = summary.covered_steps()
        fallback = -1
        for index in range(len(selected) - 1, -1, -1):
            if index in pins:
                continue
            step = _hashable_step(selected[index], step_key)
            if step is None:
                continue
            if step in covered and _same_step(step, last):
                base = index
                break
            if fallback < 0 and step in covered:
                fallback = index
        else:
            base = fallback
        if base < 0:
            return -1  # none of its steps is left: nothing is covered
    trailing = summary.trailing if summary.steps else summary.items
    index = base
    while trailing > 0 and index + 1 < len(selected):
        index += 1
        if index not in pins:
            trailing -= 1
    return index


def _same_step(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a step whose comparison fails matches nothing
        return False


def _summary_row(summary: Summary, compaction: Compaction) -> tuple[MemoryItem, dict[str, Any]]:
    record = {compaction.field: summary.text}
    return MemoryItem.from_mapping(record), dict(record)


def _fill_compacted(
    memory: Memory,
    selected: _Selected,
    window: Window,
    keys: tuple[Key, ...] | None,
    step_key: str,
) -> tuple[WindowResult, bool]:
    compaction = window.compaction
    assert compaction is not None  # only called with one
    pins = _pinned_span(selected, window)
    summary = read_summary(memory, compaction.key)
    floor = _cursor(selected, pins, summary, step_key)
    folded = 0
    while True:
        row = _summary_row(summary, compaction) if summary is not None else None
        filled = _fill(selected, window, keys, step_key, pins=pins, floor=floor, summary=row)
        if filled.stop < 0:
            return _result(filled, summary, folded), filled.only_pinned
        # Items were left out: fold them, and enough older-than-kept items that
        # the rest fill at most `keep` of the window, into the summary.
        share = compaction.keep
        lean = attrs.evolve(
            window,
            max_items=_scaled(window.max_items, share),
            max_tokens=_scaled(window.max_tokens, share),
            max_text_tokens=_scaled(window.max_text_tokens, share),
            max_image_tokens=_scaled(window.max_image_tokens, share),
            compaction=None,
        )
        kept = _fill(selected, lean, keys, step_key, pins=pins, charge_pins=False, floor=floor)
        upto = max(filled.stop, kept.stop)  # both end a whole group
        items = [selected[i] for i in range(floor + 1, upto + 1) if i not in pins]
        records = _records_of(items, keys)[1]
        previous = summary.text if summary is not None else None
        text: object = previous or ""
        if records:
            text = compaction.summarizer(previous, records)
        if not isinstance(text, str):
            msg = (
                f"The summarizer {getattr(compaction.summarizer, '__qualname__', compaction.summarizer)!r} "
                f"returned {type(text).__name__}, not a str; the summary was left unchanged."
            )
            raise ArgumentTypeError(msg)
        # Items are recognised later by their step (see _cursor): record the
        # steps that can be looked up, and how many items without one follow.
        steps = [_hashable_step(item, step_key) for item in items]
        stepped = [i for i, step in enumerate(steps) if step is not None]
        trailing = len(items) - 1 - stepped[-1] if stepped else len(items)
        if not stepped and summary is not None:
            trailing += summary.trailing
        summary = Summary(
            text,
            (*(summary.steps if summary else ()), *(s for s in steps if s is not None)),
            (summary.items if summary else 0) + len(items),
            trailing,
        )
        write_summary(memory, compaction.key, summary)
        folded += len(items)
        floor = upto


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

    A key that no kept item holds is reported (see :func:`project`), except
    while every selected item is pinned (the first prompt of a session, when
    the memory holds only the task): step keys cannot match yet.

    With ``window.compaction``, items the window leaves out are folded into
    the session's summary first (see :class:`Compaction`), so the result holds
    the pinned items, the summary and the newest items, and ``dropped`` is 0.

    Returns:
        The kept items, their records and their cost.

    Raises:
        BudgetExceededError: if the pinned items (and the summary) alone break the window's bounds.
        UnmatchedKeyError: in strict mode, naming a key no kept item holds.
        ArgumentTypeError: if the window compacts and ``source`` is not a ``Memory``,
            or the summariser returns something other than a string.
        CorruptSessionError: if the stored summary is damaged (see :func:`read_summary`).
    """
    normalized = normalize_keys(keys)
    chosen_key = _step_key(source, step_key)
    selected = _select(source, steps=steps, last=last, where=where, step_key=chosen_key)
    result, only_pinned = _choose(source, selected, window, normalized, chosen_key)
    if not only_pinned:
        report_unmatched(normalized, _candidates(result, source, normalized), strict=strict)
    return result


def _choose(
    source: Memory | Iterable[MemoryItem],
    selected: _Selected,
    window: Window,
    keys: tuple[Key, ...] | None,
    step_key: str,
) -> tuple[WindowResult, bool]:
    """Fill the window (compacting when it asks to); say whether every selected item is pinned."""
    if window.compaction is None:
        filled = _fill(selected, window, keys, step_key)
        return _result(filled), filled.only_pinned
    if not isinstance(source, Memory):
        msg = (
            f"A window with compaction stores its summary in the session, so its source must be a "
            f"Memory, got {type(source).__name__}; pass the memory, or a window without compaction."
        )
        raise ArgumentTypeError(msg)
    return _fill_compacted(source, selected, window, keys, step_key)


def _candidates(
    result: WindowResult, source: Memory | Iterable[MemoryItem], keys: tuple[Key, ...] | None
) -> Sequence[MemoryItem]:
    # Items left out because their record was empty, or folded into a
    # summary, still count as "seen" for the unmatched-key report: look at
    # what was kept (not the summary), or a few newest items.
    kept = result.items
    if result.summary is not None:
        text = result.summary.text
        kept = tuple(
            item
            for item, record in zip(result.items, result.records, strict=True)
            if not (len(record) == 1 and next(iter(record.values())) is text)
        )
    if result.summary is not None and isinstance(source, Memory):
        return (*kept, *source.last(8))  # folded items were seen, by the summariser
    if kept or keys is None:
        return kept
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
    result, only_pinned = _choose(source, selected, window, normalized, chosen_key)
    if not only_pinned:
        report_unmatched(normalized, _candidates(result, source, normalized), strict=strict)
    return list(result.records)
