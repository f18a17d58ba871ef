"""The tokenizer behind keyword search: how text becomes the terms BM25 counts."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from agents.memory.exceptions import ArgumentTypeError

__all__ = ["Tokenizer", "item_texts"]

# Runs of letters and digits in any script; "_" splits, so click_input gives two terms.
_WORD = re.compile(r"[^\W_]+")


def _is_stemmer(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        msg = f"Tokenizer(stemmer=...) takes a function from a word to its stem, or None; got {value!r}."
        raise ArgumentTypeError(msg)


@attrs.frozen
class Tokenizer:
    """Split text into the terms that keyword search matches and BM25 counts.

    The text is put in Unicode NFKC form (so full-width letters and
    ligatures match their plain forms) and case-folded (``"Straße"`` matches
    ``"STRASSE"``); terms are then the runs of letters and digits of any
    script, so punctuation, spaces and ``_`` separate terms. Scripts written
    without spaces (Chinese, Japanese) give one term per run, so a query
    matches such text only by whole runs. A ``stemmer``, if given, maps each
    term to its stem (for example ``snowballstemmer.stemmer("english").stemWord``),
    so that ``"clicked"`` matches ``"clicks"``.

    Args:
        stemmer: A function from a case-folded word to its stem, or ``None``.
        min_length: Terms shorter than this many characters are dropped.
    """

    stemmer: Callable[[str], str] | None = attrs.field(default=None, validator=_is_stemmer)
    min_length: int = attrs.field(default=1, validator=attrs.validators.ge(1))

    def __call__(self, text: str) -> list[str]:
        """Return the terms of ``text`` in order (repeats kept)."""
        if not text.isascii():
            text = unicodedata.normalize("NFKC", text)
        terms = _WORD.findall(text.casefold())
        if self.min_length > 1:
            terms = [term for term in terms if len(term) >= self.min_length]
        stem = self.stemmer
        if stem is not None:
            terms = [stem(term) for term in terms]
        return terms


def item_texts(
    fields: Mapping[str, Any], keys: tuple[str, ...] | None
) -> Iterator[tuple[str, str]]:
    """Yield ``(field, text)`` for every string in the item's fields, nested strings included.

    Strings inside dicts (their values), lists, tuples and sets count for the
    top-level field that holds them; other values (numbers, dates, bytes) are
    not text. With ``keys``, only those fields are read.
    """
    names = fields if keys is None else [key for key in keys if key in fields]
    for name in names:
        for text in _strings(fields[name]):
            yield name, text


def _strings(value: Any) -> Iterator[str]:
    if type(value) is str:
        yield value
    elif isinstance(value, str):
        yield str(value)
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for inner in value:
            yield from _strings(inner)
