"""Token counters: what text and images cost in a prompt.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

import math
import os
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs

from agents.memory._images import image_size
from agents.memory.exceptions import (
    ArgumentTypeError,
    InvalidArgumentError,
    TokenizerUnavailableError,
    missing_dependency,
)

__all__ = [
    "DEFAULT_COUNTER",
    "DEFAULT_IMAGE_TOKENS",
    "AreaImageCost",
    "EstimateCounter",
    "ImageCost",
    "TiktokenCounter",
    "TileImageCost",
    "TokenCounter",
    "count_image_tokens",
    "count_tokens",
    "non_negative_int",
    "optional_non_negative_int",
    "positive_int",
]

DEFAULT_IMAGE_TOKENS: Final = 765
"""Tokens charged per image: what a 1024x1024 image costs at high detail in OpenAI's tile formula."""


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


def positive_int(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 1:
        msg = f"{attribute.name} must be a positive int, got {value!r}."
        raise InvalidArgumentError(msg)


def non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value < 0:
        msg = f"{attribute.name} must be an int >= 0, got {value!r}."
        raise InvalidArgumentError(msg)


def optional_non_negative_int(
    instance: object, attribute: attrs.Attribute[Any], value: Any
) -> None:
    if value is not None:
        non_negative_int(instance, attribute, value)


@runtime_checkable
class ImageCost(Protocol):
    """What an image of a given size costs in a prompt: a model family's pricing formula.

    Any object with ``tokens(width, height) -> int`` works.
    """

    def tokens(self, width: int, height: int) -> int:
        """Return the tokens an image of ``width`` x ``height`` pixels costs."""
        ...


def _positive_number(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) not in (int, float) or not value > 0 or value == math.inf:
        msg = f"{attribute.name} must be a positive number, got {value!r}."
        raise InvalidArgumentError(msg)


def _check_size(width: Any, height: Any) -> None:
    if type(width) is not int or type(height) is not int or width < 1 or height < 1:
        msg = (
            f"An image size must be two positive ints (width, height), got {width!r} x {height!r}."
        )
        raise InvalidArgumentError(msg)


@attrs.frozen
class TileImageCost:
    """Cost images the way OpenAI's chat models do: by 512-pixel tiles after scaling.

    The formula published in OpenAI's vision guide ("Calculating costs", in
    the images and vision page of its platform documentation), for GPT-4o and
    the models priced like it: with ``detail="low"`` every image costs
    ``base`` tokens. With ``"high"`` (and ``"auto"``, which the API treats as
    high for costing here) the image is first scaled down, keeping its aspect
    ratio, to fit in a ``fit`` x ``fit`` square, then scaled down again so its
    shorter side is at most ``short_side`` pixels; it then costs ``base``
    plus ``per_tile`` for each ``tile`` x ``tile`` square needed to cover it.
    Images smaller than those bounds are not enlarged. A 1024x1024 image
    costs 85 + 4 x 170 = 765 tokens; a 320x200 screenshot 85 + 170 = 255.
    Other models in that guide use other numbers (GPT-4o mini: base 2833,
    per tile 5667): pass them.

    Args:
        detail: ``"high"``, ``"low"`` or ``"auto"`` (costed as high).
        base: Tokens every image costs.
        per_tile: Tokens per tile at high detail.
        tile: The tile's side in pixels.
        fit: The square the image is first scaled into.
        short_side: The longest the shorter side may be after scaling.
    """

    detail: Literal["high", "low", "auto"] = attrs.field(
        default="high", validator=attrs.validators.in_(("high", "low", "auto"))
    )
    base: int = attrs.field(default=85, validator=non_negative_int)
    per_tile: int = attrs.field(default=170, validator=non_negative_int)
    tile: int = attrs.field(default=512, validator=positive_int)
    fit: int = attrs.field(default=2048, validator=positive_int)
    short_side: int = attrs.field(default=768, validator=positive_int)

    def tokens(self, width: int, height: int) -> int:
        """Return the tokens of a ``width`` x ``height`` image under the tile formula.

        Raises:
            InvalidArgumentError: if the size is not two positive ints.
        """
        _check_size(width, height)
        if self.detail == "low":
            return self.base
        w, h = float(width), float(height)
        if max(w, h) > self.fit:
            scale = self.fit / max(w, h)
            w, h = w * scale, h * scale
        if min(w, h) > self.short_side:
            scale = self.short_side / min(w, h)
            w, h = w * scale, h * scale
        tiles = math.ceil(math.floor(w) / self.tile) * math.ceil(math.floor(h) / self.tile)
        return self.base + self.per_tile * max(tiles, 1)


@attrs.frozen
class AreaImageCost:
    """Cost images by pixel area, the way Anthropic's Claude models do.

    The formula published in Anthropic's vision guide ("Evaluate image size"
    in the Claude documentation): an image costs about width x height / 750
    tokens. An image whose long edge is over ``max_long_edge`` pixels is
    first scaled down to that edge, keeping its aspect ratio, and no image
    costs more than ``max_tokens`` (the API scales larger ones down). A
    320x200 screenshot costs 86 tokens; a 1000x1000 image 1334.

    Args:
        pixels_per_token: Pixels that cost one token (750).
        max_long_edge: The longest edge kept before scaling down (1568).
        max_tokens: The most one image costs (1600).
    """

    pixels_per_token: int | float = attrs.field(default=750, validator=_positive_number)
    max_long_edge: int = attrs.field(default=1568, validator=positive_int)
    max_tokens: int = attrs.field(default=1600, validator=positive_int)

    def tokens(self, width: int, height: int) -> int:
        """Return the tokens of a ``width`` x ``height`` image under the area formula.

        Raises:
            InvalidArgumentError: if the size is not two positive ints.
        """
        _check_size(width, height)
        w, h = float(width), float(height)
        if max(w, h) > self.max_long_edge:
            scale = self.max_long_edge / max(w, h)
            w, h = math.floor(w * scale), math.floor(h * scale)
        return min(math.ceil(w * h / self.pixels_per_token), self.max_tokens)


def _optional_image_cost(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, ImageCost):
        msg = (
            f"image_cost must have tokens(width, height) (an ImageCost), got {type(value).__name__}; "
            "use TileImageCost(), AreaImageCost() or None for the flat image_tokens."
        )
        raise ArgumentTypeError(msg)


@attrs.frozen
class EstimateCounter:
    """Estimate tokens offline, with no tokenizer and no download.

    The estimate: ASCII text costs one token per ``chars_per_token`` characters,
    rounded up; every non-ASCII character costs one token. That is close to
    what BPE tokenizers give English prose and code (about four characters a
    token) and errs high for other scripts, so a budget that holds under the
    estimate usually holds under the real tokenizer too. Each image costs
    ``image_tokens``, or, with ``image_cost``, what that formula gives for
    the image's size (``image_tokens`` when the size cannot be read, as for
    an ``http(s)`` URL); see :func:`count_image_tokens`.

    Args:
        chars_per_token: ASCII characters per token (default 4).
        image_tokens: Tokens charged per image (default :data:`DEFAULT_IMAGE_TOKENS`).
        image_cost: Cost images by their size: :class:`TileImageCost` (OpenAI),
            :class:`AreaImageCost` (Anthropic) or any :class:`ImageCost`;
            ``None`` (the default) charges the flat ``image_tokens``.
    """

    chars_per_token: int = attrs.field(default=4, validator=positive_int)
    image_tokens: int = attrs.field(default=DEFAULT_IMAGE_TOKENS, validator=non_negative_int)
    image_cost: ImageCost | None = attrs.field(
        default=None, validator=_optional_image_cost, kw_only=True
    )

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
        image_tokens: Tokens charged per image (when its size is unknown, with ``image_cost``).
        image_cost: Cost images by their size (see :class:`EstimateCounter`).

    Raises:
        MissingDependencyError: if tiktoken is not installed.
        TokenizerUnavailableError: if the encoding files cannot be loaded.
    """

    __slots__ = ("_encoding", "encoding_name", "image_cost", "image_tokens")

    def __init__(
        self,
        encoding: str = "cl100k_base",
        *,
        image_tokens: int = DEFAULT_IMAGE_TOKENS,
        image_cost: ImageCost | None = None,
    ) -> None:
        if type(image_tokens) is not int or image_tokens < 0:
            msg = f"image_tokens must be an int >= 0, got {image_tokens!r}."
            raise InvalidArgumentError(msg)
        _optional_image_cost(self, _IMAGE_COST_FIELD, image_cost)
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
        self.image_cost = image_cost

    def count(self, text: str) -> int:
        """Return the number of tokens of ``text`` under the encoding."""
        return len(self._encoding.encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        cost = "" if self.image_cost is None else f", image_cost={self.image_cost!r}"
        return f"TiktokenCounter({self.encoding_name!r}, image_tokens={self.image_tokens}{cost})"


DEFAULT_COUNTER: Final = EstimateCounter()

_IMAGE_COST_FIELD: Final = attrs.fields(EstimateCounter).image_cost


def count_tokens(text: str, counter: TokenCounter | None = None) -> int:
    """Return the tokens of ``text`` under ``counter`` (default: :class:`EstimateCounter`)."""
    return (counter or DEFAULT_COUNTER).count(text)


def count_image_tokens(
    ref: str | os.PathLike[str] | tuple[int, int], counter: TokenCounter | None = None
) -> int:
    """Return what one image costs under ``counter`` (default: :class:`EstimateCounter`).

    A counter with an ``image_cost`` formula is asked for the image's size
    (read from the file's header or a ``data:`` URL, see
    :func:`~agents.memory.prompt.image_size`); a counter without one, or an
    image whose size cannot be read (an ``http(s)`` URL, a missing file),
    costs the counter's flat ``image_tokens``.

    Args:
        ref: An image path, URL or ``data:`` URL, or its ``(width, height)``.
        counter: The token counter.
    """
    chosen = counter or DEFAULT_COUNTER
    formula: ImageCost | None = getattr(chosen, "image_cost", None)
    if formula is None:
        return chosen.image_tokens
    size = ref if isinstance(ref, tuple) else image_size(ref)
    if size is None:
        return chosen.image_tokens
    return formula.tokens(*size)
