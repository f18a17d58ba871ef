"""Token counters: what text and images cost in a prompt.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

from typing import Any, Final, Protocol, runtime_checkable

import attrs

from agents.memory.exceptions import (
    InvalidArgumentError,
    TokenizerUnavailableError,
    missing_dependency,
)

__all__ = [
    "DEFAULT_COUNTER",
    "DEFAULT_IMAGE_TOKENS",
    "EstimateCounter",
    "TiktokenCounter",
    "TokenCounter",
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

    chars_per_token: int = attrs.field(default=4, validator=positive_int)
    image_tokens: int = attrs.field(default=DEFAULT_IMAGE_TOKENS, validator=non_negative_int)

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


DEFAULT_COUNTER: Final = EstimateCounter()


def count_tokens(text: str, counter: TokenCounter | None = None) -> int:
    """Return the tokens of ``text`` under ``counter`` (default: :class:`EstimateCounter`)."""
    return (counter or DEFAULT_COUNTER).count(text)
