"""Renderers: projected records as JSON, text or chat content parts, and what they cost.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from agents.memory import _codec
from agents.memory._images import DEFAULT_IMAGE_KEYS, image_data_url, image_refs
from agents.memory._item import MemoryItem
from agents.memory._tokens import DEFAULT_COUNTER, TokenCounter, count_image_tokens
from agents.memory.exceptions import ArgumentTypeError, FieldNotFoundError, InvalidArgumentError

__all__ = [
    "PromptCost",
    "estimate_cost",
    "prompt_cost",
    "render_json",
    "render_parts",
    "render_text",
    "ufo_json",
]


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
    step_key: str = "step"

    def __missing__(self, key: str) -> Any:
        step = self.get(self.step_key, f"#{self.position}")
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
    step_key: str = "step",
) -> str:
    """Return records as plain text or Markdown, one template per item.

    Args:
        records: Projected records (or items).
        template: A ``str.format`` template over the fields
            (``"### Step {step}\\n{action}"``), or a function of the record. The
            default writes one ``- key: value`` line per field.
        separator: Put between items.
        header: Put before the first item, followed by ``separator``.
        step_key: The field that names a record's step in error messages
            (pass the memory's ``step_key``, such as UFO's ``"Step"``).

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
            fields.step_key = step_key
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

    Each image costs what :func:`count_image_tokens` says (by size when the
    counter has an ``image_cost`` formula). To cost what a renderer
    returned, use :func:`prompt_cost`.

    Args:
        records: Projected records.
        counter: The token counter (default :class:`EstimateCounter`).
        image_keys: The fields whose paths or URLs count as images.
    """
    chosen = counter or DEFAULT_COUNTER
    listed = _records_list(records)
    refs = [ref for r in listed for k in image_keys if k in r for ref in image_refs(r[k])]
    return chosen.count(render_json(listed)) + sum(count_image_tokens(r, chosen) for r in refs)


@attrs.frozen
class PromptCost:
    """What a prompt costs: its text tokens, its images and their tokens.

    Attributes:
        text_tokens: The tokens of the text.
        image_tokens: The tokens of the images.
        images: How many images.
    """

    text_tokens: int
    image_tokens: int
    images: int

    @property
    def tokens(self) -> int:
        """The total: text tokens plus image tokens."""
        return self.text_tokens + self.image_tokens

    def __add__(self, other: PromptCost) -> PromptCost:
        if not isinstance(other, PromptCost):
            return NotImplemented
        return PromptCost(
            self.text_tokens + other.text_tokens,
            self.image_tokens + other.image_tokens,
            self.images + other.images,
        )


def _image_url_of(part: Mapping[str, Any], position: int) -> str:
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, Mapping) else value
    if not isinstance(url, str):
        msg = (
            f"Content part {position} is an image_url part without a URL string "
            f"(got {type(url).__name__}); give it {{'image_url': {{'url': ...}}}}."
        )
        raise InvalidArgumentError(msg)
    return url


def prompt_cost(
    content: str | Iterable[Mapping[str, Any]], counter: TokenCounter | None = None
) -> PromptCost:
    """Return what a rendered prompt costs: exactly what a renderer returned, nothing else.

    ``content`` is what :func:`render_json` or :func:`render_text` return (a
    string, counted as text), or chat content parts as :func:`render_parts`
    returns them: each ``text`` part costs the tokens of its text, each
    ``image_url`` part what its image costs under ``counter`` (by size when
    the counter has an ``image_cost`` formula, read from the ``data:`` URL;
    otherwise the flat ``image_tokens``, see :func:`count_image_tokens`).
    Costs add up: ``prompt_cost(a) + prompt_cost(b)``.

    Example::

        parts = render_parts(window.records, header="[Previous steps:]")
        cost = prompt_cost(parts, counter)   # cost.text_tokens, cost.image_tokens, cost.tokens

    Args:
        content: A rendered string, or a sequence of content parts.
        counter: The token counter (default :class:`EstimateCounter`).

    Returns:
        The text tokens, image tokens and image count.

    Raises:
        ArgumentTypeError: if ``content`` is neither a string nor parts, or a part is not a mapping.
        InvalidArgumentError: naming the part whose type is neither ``text`` nor ``image_url``,
            or which lacks its text or URL.
    """
    chosen = counter or DEFAULT_COUNTER
    if isinstance(content, str):
        return PromptCost(chosen.count(content), 0, 0)
    if isinstance(content, (bytes, bytearray, Mapping)) or not isinstance(content, Iterable):
        msg = (
            f"prompt_cost() takes a rendered string or a list of content parts, got {type(content).__name__}; "
            "pass render_parts(...) or render_text(...)."
        )
        raise ArgumentTypeError(msg)
    text = image = images = 0
    for position, part in enumerate(content):
        if not isinstance(part, Mapping):
            msg = f"Content part {position} is a {type(part).__name__}, not a dict with a 'type'."
            raise ArgumentTypeError(msg)
        kind = part.get("type")
        if kind == "text":
            value = part.get("text")
            if not isinstance(value, str):
                msg = f"Content part {position} is a text part whose 'text' is a {type(value).__name__}, not a string."
                raise InvalidArgumentError(msg)
            text += chosen.count(value)
        elif kind == "image_url":
            image += count_image_tokens(_image_url_of(part, position), chosen)
            images += 1
        else:
            msg = (
                f"Content part {position} has type {kind!r}; prompt_cost() counts 'text' and 'image_url' "
                "parts (what render_parts() returns)."
            )
            raise InvalidArgumentError(msg)
    return PromptCost(text, image, images)
