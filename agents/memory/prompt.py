"""Turn a memory into model input: projections, windows, token counts and renderers.

The pieces, in the order a prompt is built:

* **Keys.** Which fields go in, under which names. A plain string takes one
  field; :class:`Key` adds aliases (``Key("step", aliases=("Step",))`` reads
  either style) and a rename; a mapping ``{"step": ("step", "Step")}`` says the
  same thing in one line.
* **Projection.** :func:`project` picks items (all, some steps, the last *n*, a
  predicate), keeps the chosen keys and returns fresh dicts in memory order. A
  key that no selected item holds is reported with :class:`UnmatchedKeyWarning`
  (or :class:`UnmatchedKeyError` when ``strict=True``), because a silently
  empty prompt is the commonest bug in agent code.
* **Windows.** :class:`Window` bounds a projection by item count, tokens and
  images. Items are taken newest first and returned in memory order; pinned
  items are always kept; items of one group (consecutive items with the same
  ``group_by`` value) are kept or dropped together. Choosing a window reads
  only the items it keeps plus one group, so its cost follows the window, not
  the memory (pinning by predicate is the exception: it reads every item).
* **Token counters.** :class:`EstimateCounter` is the offline default;
  :class:`TiktokenCounter` uses the optional ``tiktoken`` extra.
* **Renderers.** :func:`render_json` (compact UTF-8 JSON through the codec),
  :func:`render_text` (a template per item, for plain text or Markdown) and
  :func:`render_parts` (chat content parts with images as ``data:`` URLs, read
  from disk only when the parts are built).
"""

from __future__ import annotations

import base64
import difflib
import mimetypes
import os
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol, TypeAlias, runtime_checkable

import attrs

from agents.memory import _codec
from agents.memory._item import NOTHING, MemoryItem
from agents.memory.exceptions import (
    BudgetExceededError,
    FieldNotFoundError,
    ImageReadError,
    TokenizerUnavailableError,
    UnmatchedKeyError,
    UnmatchedKeyWarning,
    missing_dependency,
)
from agents.memory.memory import Memory

__all__ = [
    "DEFAULT_IMAGE_KEYS",
    "DEFAULT_IMAGE_TOKENS",
    "EstimateCounter",
    "GroupBy",
    "Key",
    "KeysLike",
    "TiktokenCounter",
    "TokenCounter",
    "Window",
    "WindowResult",
    "count_tokens",
    "estimate_cost",
    "image_data_url",
    "image_refs",
    "latest_value",
    "project",
    "render_json",
    "render_parts",
    "render_text",
    "select_window",
    "ufo_json",
    "values_of",
]

DEFAULT_IMAGE_KEYS: Final[tuple[str, ...]] = (
    "image",
    "image_path",
    "image_url",
    "images",
    "screenshot",
    "screenshot_path",
    "screenshots",
)
"""Field keys whose string values (or lists of strings) are read as image paths or URLs."""

DEFAULT_IMAGE_TOKENS: Final = 765
"""Tokens charged per image: what a 1024x1024 image costs at high detail in OpenAI's tile formula."""

_URL_PREFIXES: Final = ("http://", "https://", "data:")

# -- keys ----------------------------------------------------------------------


def _to_names(value: Iterable[str]) -> tuple[str, ...]:
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
    aliases: tuple[str, ...] = attrs.field(default=(), converter=_to_names)
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


def _normalize_keys(keys: KeysLike) -> tuple[Key, ...] | None:
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
                    raise TypeError(msg)
                out.append(Key(names[0], aliases=tuple(names[1:]), rename=output))
        return tuple(out)
    for key in keys:
        if isinstance(key, Key):
            out.append(key)
        elif isinstance(key, str):
            out.append(Key(key))
        else:
            msg = f"Keys must be strings or Key objects, got {key!r} ({type(key).__name__})."
            raise TypeError(msg)
    return tuple(out)


def _project_fields(fields: Mapping[str, Any], keys: tuple[Key, ...] | None) -> dict[str, Any]:
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


def _report_unmatched(
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
        fields = item._fields
        for key in list(pending):
            if any(name in fields for name in key.names):
                del pending[key]
        present.update(dict.fromkeys(fields))
        if not pending:
            return
    for key in pending:
        names = " or ".join(repr(n) for n in key.names)
        close = difflib.get_close_matches(key.name, list(present), n=1)
        hint = (
            f"did you mean {close[0]!r}? Add it as an alias: Key({key.name!r}, aliases=({close[0]!r},))"
            if close
            else "check the spelling or add an alias with Key(name, aliases=(...))"
        )
        shown = list(present)[:12]
        msg = (
            f"Key {names} matches none of the {len(items)} selected items, so the prompt gets no "
            f"value for it; the items hold keys {shown}; {hint}."
        )
        if strict:
            raise UnmatchedKeyError(msg)
        warnings.warn(UnmatchedKeyWarning(msg), stacklevel=3)


# -- token counters ------------------------------------------------------------


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of text, and says what one image costs.

    Any object with ``count(text) -> int`` and an ``image_tokens`` attribute
    works, so a counter for another tokenizer is a few lines.
    """

    @property
    def image_tokens(self) -> int:
        """Tokens charged for each image."""
        ...

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text``."""
        ...


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 1:
        msg = f"{attribute.name} must be a positive int, got {value!r}."
        raise ValueError(msg)


def _non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 0:
        msg = f"{attribute.name} must be an int >= 0, got {value!r}."
        raise ValueError(msg)


def _optional_non_negative_int(
    instance: object, attribute: attrs.Attribute[Any], value: Any
) -> None:
    if value is not None:
        _non_negative_int(instance, attribute, value)


@attrs.frozen
class EstimateCounter:
    """Estimate tokens offline, with no tokenizer and no download.

    The estimate: ASCII text costs one token per ``chars_per_token`` characters,
    rounded up; every non-ASCII character costs one token. That is close to
    what BPE tokenizers give English prose and code (about four characters a
    token) and errs high for other scripts, so a budget that holds under the
    estimate usually holds under the real tokenizer too. Each image costs
    ``image_tokens``.

    Args:
        chars_per_token: ASCII characters per token (default 4).
        image_tokens: Tokens charged per image (default :data:`DEFAULT_IMAGE_TOKENS`).
    """

    chars_per_token: int = attrs.field(default=4, validator=_positive_int)
    image_tokens: int = attrs.field(default=DEFAULT_IMAGE_TOKENS, validator=_non_negative_int)

    def count(self, text: str) -> int:
        """Return the estimated number of tokens of ``text``."""
        if text.isascii():
            return -(-len(text) // self.chars_per_token)
        wide = sum(1 for ch in text if ord(ch) > 127)
        return -(-(len(text) - wide) // self.chars_per_token) + wide


class TiktokenCounter:
    """Count tokens with tiktoken (the optional ``kvmemory[tiktoken]`` extra).

    The encoding is loaded when the counter is created, so a missing package or
    missing encoding files show up at once rather than in the middle of a run.
    tiktoken downloads encoding files on first use; on a machine without that
    access, point ``TIKTOKEN_CACHE_DIR`` at a folder holding them.

    Args:
        encoding: A tiktoken encoding name (``"cl100k_base"``, ``"o200k_base"``).
        image_tokens: Tokens charged per image.

    Raises:
        MissingDependencyError: if tiktoken is not installed.
        TokenizerUnavailableError: if the encoding files cannot be loaded.
    """

    __slots__ = ("_encoding", "encoding_name", "image_tokens")

    def __init__(
        self, encoding: str = "cl100k_base", *, image_tokens: int = DEFAULT_IMAGE_TOKENS
    ) -> None:
        try:
            import tiktoken
        except ImportError as exc:
            raise missing_dependency("tiktoken", "tiktoken") from exc
        try:
            self._encoding = tiktoken.get_encoding(encoding)
        except Exception as exc:  # tiktoken raises network, file and value errors alike
            msg = (
                f"tiktoken cannot load encoding {encoding!r} ({type(exc).__name__}: {exc}); its encoding "
                "files are downloaded on first use. Copy them into a folder named by TIKTOKEN_CACHE_DIR, "
                "or use the offline EstimateCounter()."
            )
            raise TokenizerUnavailableError(msg) from exc
        self.encoding_name = encoding
        self.image_tokens = image_tokens

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` under the encoding."""
        return len(self._encoding.encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding_name!r}, image_tokens={self.image_tokens})"


_DEFAULT_COUNTER: Final = EstimateCounter()


def count_tokens(text: str, counter: TokenCounter | None = None) -> int:
    """Return the tokens of ``text`` under ``counter`` (default: :class:`EstimateCounter`)."""
    return (counter or _DEFAULT_COUNTER).count(text)


# -- images --------------------------------------------------------------------


def image_refs(value: Any) -> list[str]:
    """Return the image paths or URLs held by a field value (a string or a list of strings)."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, os.PathLike):
        return [os.fspath(value)]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str) and v]
    return []


def _count_images(record: Mapping[str, Any], image_keys: Sequence[str]) -> int:
    return sum(len(image_refs(record[k])) for k in image_keys if k in record)


_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_data_url(ref: str | os.PathLike[str]) -> str:
    """Return an image reference as a URL a chat API accepts.

    URLs (``http://``, ``https://``, ``data:``) are returned unchanged. A path
    is read now and returned as a ``data:`` URL with the image's MIME type
    (from the file's contents, or its suffix when the contents are not
    recognised) and its bytes in base64.

    Raises:
        ImageReadError: naming the path if it cannot be read or is not an image.
    """
    text = os.fspath(ref)
    if text.startswith(_URL_PREFIXES):
        return text
    try:
        with open(text, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        msg = f"Image {text!r} cannot be read ({exc.strerror or exc}); store an existing path or an http(s) URL."
        raise ImageReadError(msg) from exc
    mime = _sniff(data) or mimetypes.guess_type(text)[0]
    if mime is None or not mime.startswith("image/"):
        msg = f"File {text!r} is not a recognised image (PNG, JPEG, GIF, BMP, WebP or an image suffix); store an image path."
        raise ImageReadError(msg)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


# -- windows -------------------------------------------------------------------

GroupBy: TypeAlias = "str | Callable[[MemoryItem], Hashable] | None"
"""How a window groups items: a field name, a function of the item, or ``None`` for no groups."""


def _is_counter(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, TokenCounter):
        msg = (
            f"counter must have count(text) and image_tokens (a TokenCounter), got {type(value).__name__}; "
            "use EstimateCounter() or TiktokenCounter()."
        )
        raise TypeError(msg)


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

    max_items: int | None = attrs.field(default=None, validator=_optional_non_negative_int)
    max_tokens: int | None = attrs.field(default=None, validator=_optional_non_negative_int)
    max_images: int | None = attrs.field(default=None, validator=_optional_non_negative_int)
    pin_first: int = attrs.field(default=0, validator=_non_negative_int)
    pinned: Callable[[MemoryItem], bool] | None = None
    group_by: GroupBy = None
    counter: TokenCounter = attrs.field(factory=EstimateCounter, validator=_is_counter)
    image_keys: tuple[str, ...] = attrs.field(default=DEFAULT_IMAGE_KEYS, converter=_to_names)
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
    value = item._fields.get(group_by, _ALONE) if isinstance(group_by, str) else group_by(item)
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
            n = _count_images(record, window.image_keys)
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
        record = _project_fields(item._fields, keys)
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
        record = _project_fields(item._fields, keys)
        if record or keys is None:
            rows.append((index, item, record))
    return rows


def _charge(budget: _Budget, rows: list[_Row]) -> tuple[list[_Row], int, int]:
    records = [record for _, _, record in rows]
    tokens, images = budget.cost(records, budget.images_left())
    return [(i, item, r) for (i, item, _), r in zip(rows, records, strict=True)], tokens, images


def _fill(selected: _Selected, window: Window, keys: tuple[Key, ...] | None) -> WindowResult:
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
            labels = [row[1]._fields.get("step", f"#{row[0]}") for row in rows][:10]
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
) -> _Selected:
    if last is not None and (type(last) is not int or last < 0):
        msg = f"last must be an int >= 0, got {last!r}."
        raise ValueError(msg)
    memory = source if isinstance(source, Memory) else None
    if memory is not None and steps is None and where is None:
        if last is None:
            return _Selected(memory, None)
        return _Selected(None, memory.last(last))
    items: list[MemoryItem] = list(source)
    if steps is not None:
        step_key = memory.step_key if memory is not None else "step"
        wanted = list(steps)
        items = [item for item in items if _in(item._fields.get(step_key, NOTHING), wanted)]
    if where is not None:
        items = [item for item in items if where(item)]
    if last is not None:
        items = items[len(items) - last :] if last else []
    return _Selected(None, items)


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

    Items added to the memory while the window is being chosen may or may not
    be part of it.

    Returns:
        The kept items, their records and their cost.

    Raises:
        BudgetExceededError: if the pinned items alone break the window's bounds.
        UnmatchedKeyError: in strict mode, naming a key no kept item holds.
    """
    normalized = _normalize_keys(keys)
    result = _fill(_select(source, steps=steps, last=last, where=where), window, normalized)
    _report_unmatched(normalized, _candidates(result, source, normalized), strict=strict)
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

    Returns:
        A list of fresh dicts in memory order.

    Raises:
        UnmatchedKeyError: in strict mode, naming the key and the keys that do occur.
        BudgetExceededError: if pinned items alone break the window.

    Warns:
        UnmatchedKeyWarning: naming a key that no selected item holds.
    """
    normalized = _normalize_keys(keys)
    selected = _select(source, steps=steps, last=last, where=where)
    if budget is None:
        items = selected.all()
        _report_unmatched(normalized, items, strict=strict)
        return _records_of(items, normalized)[1]
    window = budget if isinstance(budget, Window) else Window(max_tokens=budget)
    result = _fill(selected, window, normalized)
    _report_unmatched(normalized, _candidates(result, source, normalized), strict=strict)
    return list(result.records)


# -- convenience reads ---------------------------------------------------------


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
        value = wanted.read(item._fields)
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
        value = wanted.read(item._fields)
        if value is NOTHING:
            continue
        if flatten and isinstance(value, (list, tuple)):
            out.extend(value)
        else:
            out.append(value)
    return out


# -- renderers -----------------------------------------------------------------


def _records_list(records: Iterable[Mapping[str, Any] | MemoryItem]) -> list[dict[str, Any]]:
    return [r.to_dict() if isinstance(r, MemoryItem) else dict(r) for r in records]


def render_json(records: Iterable[Mapping[str, Any] | MemoryItem]) -> str:
    """Return records as one compact UTF-8 JSON array (no spaces, non-ASCII kept as is).

    Values JSON cannot hold are written through the codec: ``datetime`` and
    friends as type tags, anything else the codec refuses as its ``repr()``.
    """
    value = _codec.encode_value(_records_list(records), on_unencodable="repr")
    return _codec.dumps(value).decode("utf-8")


def ufo_json(value: Any) -> str:
    """Return ``value`` as JSON the way UFO's prompts write it.

    UFO formats prompt JSON with Python's ``json.dumps`` defaults: ``", "`` and
    ``": "`` separators, non-ASCII characters escaped, ``str`` and ``int``
    enums as their values, tuples as lists. Only values ``json.dumps``
    refuses are written as type tags (or ``repr`` for values the codec
    cannot encode either).
    """
    return _codec.dumps_ufo(value, on_unencodable="repr")


class _TemplateFields(dict[str, Any]):
    """Template fields that name the missing key and the item in the error."""

    position: int = 0

    def __missing__(self, key: str) -> Any:
        step = self.get("step", self.get("Step", f"#{self.position}"))
        msg = (
            f"The template names field {key!r}, which record {self.position} (step {step!r}) does not hold; "
            f"its fields are {list(self)}. Project that key or give the template a default."
        )
        raise FieldNotFoundError(msg)


def _default_text(record: Mapping[str, Any]) -> str:
    lines = []
    for key, value in record.items():
        shown = value if isinstance(value, str) else ufo_json(value)
        lines.append(f"- {key}: {shown}")
    return "\n".join(lines)


def render_text(
    records: Iterable[Mapping[str, Any] | MemoryItem],
    template: str | Callable[[Mapping[str, Any]], str] | None = None,
    *,
    separator: str = "\n\n",
    header: str | None = None,
) -> str:
    """Return records as plain text or Markdown, one template per item.

    Args:
        records: Projected records (or items).
        template: A ``str.format`` template over the fields
            (``"### Step {step}\\n{action}"``), or a function of the record. The
            default writes one ``- key: value`` line per field.
        separator: Put between items.
        header: Put before the first item, followed by ``separator``.

    Raises:
        FieldNotFoundError: naming the field and record when a template names a missing field.
    """
    parts: list[str] = []
    for position, record in enumerate(_records_list(records)):
        if template is None:
            parts.append(_default_text(record))
        elif isinstance(template, str):
            fields = _TemplateFields(record)
            fields.position = position
            parts.append(template.format_map(fields))
        else:
            parts.append(template(record))
    if header is not None:
        parts.insert(0, header)
    return separator.join(parts)


def render_parts(
    records: Iterable[Mapping[str, Any] | MemoryItem],
    *,
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
    text: Callable[[Mapping[str, Any]], str] | None = None,
    header: str | None = None,
) -> list[dict[str, Any]]:
    """Return records as chat content parts: text parts and ``image_url`` parts.

    For each record: one ``{"type": "text", "text": ...}`` part with its
    non-image fields (compact JSON unless ``text`` renders them), then one
    ``{"type": "image_url", "image_url": {"url": ...}}`` part per image. Paths
    are read and base64-encoded now, as ``data:`` URLs with the image's MIME
    type; URLs are passed through.

    Args:
        records: Projected records (or items).
        image_keys: The fields that hold image paths or URLs.
        text: Renders the non-image fields of one record.
        header: A text part put first.

    Raises:
        ImageReadError: naming the file when an image path cannot be read.
    """
    parts: list[dict[str, Any]] = []
    if header is not None:
        parts.append({"type": "text", "text": header})
    render = text or (lambda r: render_json([r])[1:-1])
    for record in _records_list(records):
        plain = {k: v for k, v in record.items() if k not in image_keys}
        images = [ref for k in image_keys if k in record for ref in image_refs(record[k])]
        if plain or not images:
            parts.append({"type": "text", "text": render(plain)})
        for ref in images:
            parts.append({"type": "image_url", "image_url": {"url": image_data_url(ref)}})
    return parts


def estimate_cost(
    records: Iterable[Mapping[str, Any]],
    counter: TokenCounter | None = None,
    *,
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
) -> int:
    """Return the tokens of ``render_json(records)`` plus the images' cost under ``counter``.

    Args:
        records: Projected records.
        counter: The token counter (default :class:`EstimateCounter`).
        image_keys: The fields whose paths or URLs count as images.
    """
    chosen = counter or _DEFAULT_COUNTER
    listed = _records_list(records)
    images = sum(_count_images(r, image_keys) for r in listed)
    return chosen.count(render_json(listed)) + images * chosen.image_tokens
