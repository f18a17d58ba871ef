"""Keyword search's shared ground: the tokenizer, the BM25 constants and the query checks.

Both the in-RAM index (``agents.memory.search``) and the stores (which score
a session without loading it into an index) count terms and score them
through this module, so they give the same ranking.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from agents.memory.exceptions import ArgumentTypeError, InvalidQueryError

__all__ = [
    "BM25_B",
    "BM25_DELTA",
    "BM25_FLOOR",
    "BM25_K1",
    "BM25_SCALE",
    "IDF_FLOOR_SHARE",
    "MIN_IDF",
    "PROXIMITY_GATE",
    "PROXIMITY_TOP",
    "PROXIMITY_WINDOW",
    "Tokenizer",
    "bm25_average_length",
    "bm25_idf",
    "bm25_term_score",
    "bm25_weight",
    "check_k",
    "checked_keys",
    "checked_query",
    "field_texts",
    "item_texts",
    "joined_item_terms",
    "keyword_idf",
    "lucene_idf",
    "may_stand_together",
    "proximity_weights",
    "query_coverage",
    "query_together",
    "spaced_terms",
    "window_weight",
]

BM25_K1 = 1.2
"""BM25's term-frequency saturation (Lucene's and SQLite FTS5's value)."""
BM25_B = 0.75
"""BM25's document-length normalisation (Lucene's and SQLite FTS5's value)."""
BM25_DELTA = 1.0
"""BM25+'s lower bound: a query term an item holds adds at least ``delta / (1 + delta)`` of its IDF, however long.

Lv and Zhai's BM25+ (2011) and their default value. Without it (plain BM25)
a long item's share of a word tends to zero, so a long item holding every
query word can rank below short items holding fewer of them.
"""
MIN_IDF = 1e-6
"""The floor of a term's IDF: FTS5 floors the IDF of terms in more than half the items here."""


def bm25_idf(n_items: int, df: int) -> float:
    """Return the IDF of a term held by ``df`` of ``n_items`` items (FTS5's formula, floored at :data:`MIN_IDF`)."""
    return max(math.log((n_items - df + 0.5) / (df + 0.5)), MIN_IDF)


def lucene_idf(n_items: int, df: int) -> float:
    """Return the IDF of a term held by ``df`` of ``n_items`` items as Lucene's BM25 computes it.

    ``ln(1 + (n_items - df + 0.5) / (df + 0.5))``: always above zero, so a
    word held by most items still counts a little (FTS5's formula gives it
    almost nothing), and a rarer word always counts more than a commoner one.
    """
    return math.log1p((n_items - df + 0.5) / (df + 0.5))


IDF_FLOOR_SHARE = 0.15
"""The least IDF a query word weighs, as a share of the IDF of a word one item holds.

Lucene's IDF gives a word most items hold ("the", "was", "to") next to
nothing; floored at 0.15 of the rarest word's IDF, such a word still
tells an item that holds the query's phrasing apart from one holding only
its rarest word. Chosen on the tuning corpora, with the hybrid rule's
tuning sets (docs/search.md, "Held-out corpora").
"""


def keyword_idf(n_items: int, df: int) -> float:
    """Return the IDF keyword search weighs a term by: :func:`lucene_idf`, floored at :data:`IDF_FLOOR_SHARE` of ``lucene_idf(n_items, 1)``."""
    return max(lucene_idf(n_items, df), IDF_FLOOR_SHARE * lucene_idf(n_items, 1))


def bm25_weight(n_items: int, df: int) -> float:
    """Return a query term's weight: ``keyword_idf(n_items, df) * (BM25_K1 + 1.0) / (1.0 + BM25_DELTA)``.

    ``n_items`` counts every item of the memory or session (also items
    without text); ``df`` the items holding the term in the searched fields.
    Dividing by ``1 + BM25_DELTA`` keeps the scale of plain BM25: a term
    held once by an item of the average length adds its IDF.
    """
    return keyword_idf(n_items, df) * BM25_SCALE


def query_coverage(
    terms: Iterable[str], df: Mapping[str, int], held: Container[str], n_items: int
) -> float:
    """Return the share of the query's IDF weight that one item holds (``1.0`` when no item holds a query term).

    The weight is :func:`bm25_weight` of each distinct query term some item
    holds (``df[term] > 0``; a word no item holds is left out); the item
    holds the terms in ``held``. A hybrid query lowers its keyword share by
    this share of its keyword leader (see ``blend`` of the vectors room).
    ``SearchIndex.coverage`` (``Memory.search``) and every store compute it
    here, so they give the same share, to the last bit.

    Args:
        terms: The query's terms (repeats count once).
        df: How many items hold each term in the searched fields.
        held: The terms the item holds.
        n_items: How many items the statistics count.

    Returns:
        The share, 0 to 1.
    """
    total = 0.0
    part = 0.0
    for term in dict.fromkeys(terms):
        count = df.get(term, 0)
        if count:
            weight = bm25_weight(n_items, count)
            total += weight
            if term in held:
                part += weight
    return part / total if total else 1.0


PROXIMITY_WINDOW: Final = 5
"""How many consecutive terms of one field a hit must hold the query's words within (:func:`query_together`)."""
PROXIMITY_TOP: Final = 100
"""How many of a query's best keyword hits :func:`query_together` reads."""
PROXIMITY_GATE: Final = 0.9
"""The share of the query's IDF weight one window must hold for the query's words to stand together (:func:`query_together`)."""


def query_together(
    terms: Iterable[str],
    df: Mapping[str, int],
    n_items: int,
    hits: Iterable[int],
    fields: Mapping[int, Mapping[str, Any]],
    keys: tuple[str, ...] | None,
    tokenize: Callable[[str], Sequence[str]],
    holds: Callable[[int], Container[str]] | None = None,
) -> bool:
    """Return whether one of ``hits`` holds the query's words together: :data:`PROXIMITY_GATE` of their IDF weight within :data:`PROXIMITY_WINDOW` consecutive terms of one field.

    The weight is :func:`bm25_weight` of each distinct query term some item
    holds, as :func:`query_coverage` counts it. A window counts a term once
    however often it holds it. A hybrid query whose words no hit holds
    together (they lie scattered over an item's entries, or some are
    missing) ranks each side by how it stands out (``blend`` of the vectors
    room). ``SearchIndex.together`` (``Memory.search``) and every store
    decide it here, from the same items in the same order.

    Args:
        terms: The query's terms (repeats count once).
        df: How many items hold each term in the searched fields.
        n_items: How many items the statistics count.
        hits: The keys of the query's best keyword hits, best first
            (ties by key; at most :data:`PROXIMITY_TOP` are read).
        fields: The fields of those hits by key (a hit not given is skipped).
        keys: The searched fields (``None``: all).
        tokenize: The tokenizer keyword search counts terms with.
        holds: The query terms a hit holds, where known without reading it
            (a hit holding under the gate's weight is then not tokenized).

    Returns:
        ``True`` at the first hit whose best window reaches the gate, or
        when no item holds a query term; ``False`` otherwise.
    """
    weights, need = proximity_weights(terms, df, n_items)
    if not need:
        return True
    for at, key in enumerate(hits):
        if at == PROXIMITY_TOP:
            break
        if key not in fields:
            continue
        if holds is not None and not may_stand_together(weights, need, holds(key)):
            continue
        for field, text in field_texts(fields[key]):
            searched = keys is None or field in keys
            if searched and window_weight(tokenize(text), weights, need=need) >= need:
                return True
    return False


def proximity_weights(
    terms: Iterable[str], df: Mapping[str, int], n_items: int
) -> tuple[dict[str, float], float]:
    """Return the weight of each distinct query term some item holds, and the weight one window must hold for :func:`query_together` (:data:`PROXIMITY_GATE` of their sum)."""
    weights = {
        term: bm25_weight(n_items, df[term]) for term in dict.fromkeys(terms) if df.get(term, 0)
    }
    return weights, PROXIMITY_GATE * sum(weights.values())


def may_stand_together(weights: Mapping[str, float], need: float, held: Container[str]) -> bool:
    """Return whether a hit holding the query terms ``held`` (anywhere in it) holds enough of ``weights`` for a window of it to reach ``need`` (:func:`proximity_weights`).

    A hit for which this is ``False`` cannot hold the query's words
    together, so :func:`query_together` need not read or tokenize it.
    """
    return sum(weight for term, weight in weights.items() if term in held) >= need


def window_weight(
    words: Sequence[str],
    weights: Mapping[str, float],
    window: int = PROXIMITY_WINDOW,
    need: float = math.inf,
) -> float:
    """Return the most of ``weights`` (terms and their weights) that one window of ``window`` consecutive ``words`` holds, each term once; stop once one holds ``need``."""
    at = [(place, word) for place, word in enumerate(words) if word in weights]
    best = 0.0
    for first, (start, _) in enumerate(at):
        seen: set[str] = set()
        for place, word in at[first:]:
            if place - start >= window:
                break
            seen.add(word)
        # Summed in query order, never set order: the same float in every process.
        best = max(best, sum(weight for term, weight in weights.items() if term in seen))
        if best >= need:
            break
    return best


def bm25_average_length(total: int, n_items: int) -> float:
    """Return the average item length BM25 divides by: ``total / n_items``, or ``1.0`` when no item has a term."""
    return total / n_items if total else 1.0


def bm25_term_score(weight: float, tf: int, length: int, average_length: float) -> float:
    """Return one query term's share of an item's BM25+ score: the one formula every search uses.

    ``weight * (tf / (tf + k1 * (1 - b) + (k1 * b / average_length) * length) + delta / (k1 + 1))``,
    with ``weight`` from :func:`bm25_weight`, ``tf`` the term's count in the
    item and ``length`` the item's number of terms, both over the searched
    fields: BM25+ (:data:`BM25_DELTA`), ``idf * ((k1 + 1) * tf / (tf + k1 * (1 - b + b *
    length / average_length)) + delta)``, divided by ``1 + delta``. An item's score
    is the sum of these shares over the query's terms, in query order (a
    repeated query word counts again), starting from ``0.0`` and skipping
    terms the item lacks: summed in that order, the float is the same
    wherever it is computed.
    """
    return weight * (tf / (tf + _FLAT + BM25_K1 * BM25_B / average_length * length) + BM25_FLOOR)


_FLAT: Final = BM25_K1 * (1.0 - BM25_B)
BM25_FLOOR: Final = BM25_DELTA / (BM25_K1 + 1.0)
"""What every held term adds to its share at unit weight (BM25+'s delta over ``k1 + 1``), whatever tf and length."""
BM25_SCALE: Final = (BM25_K1 + 1.0) / (1.0 + BM25_DELTA)
"""What :func:`bm25_weight` multiplies an IDF by: ``(k1 + 1) / (1 + delta)``."""


# Runs of letters and digits in any script; "_" splits, so click_input gives two terms.
_WORD = re.compile(r"[^\W_]+")
# The same runs in ASCII text, once lowered (casefold is lower() there): every other
# character becomes a space and the text is split there, faster than the pattern.
_ASCII_SPACES: Final = str.maketrans({code: " " for code in range(128) if not chr(code).isalnum()})
# The same, NUL kept (it ends each text joined, see joined_spaced_terms): one character for
# one, which str.translate does in its fast pass over ASCII.
_ASCII_KEEP_NUL: Final = str.maketrans(
    {code: " " for code in range(1, 128) if not chr(code).isalnum()}
)


# The same over ASCII bytes, NUL kept: A-Z lowered, letters and digits kept, all else a space.
_ASCII_TERM_BYTES: Final = bytes(
    c + 32 if 65 <= c <= 90 else c if c == 0 or (chr(c).isalnum() and c < 128) else 32
    for c in range(256)
)


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
        if text.isascii():
            terms = text.lower().translate(_ASCII_SPACES).split()
        else:
            terms = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        if self.min_length > 1:
            terms = [term for term in terms if len(term) >= self.min_length]
        stem = self.stemmer
        if stem is not None:
            terms = [stem(term) for term in terms]
        return terms


def spaced_terms(tokenize: Tokenizer, text: str) -> str | None:
    """Return the terms ``tokenize`` finds in ``text`` with whitespace between them, or ``None`` for a tokenizer this cannot vouch for.

    Splitting the result at whitespace gives ``tokenize(text)``. For the
    plain :class:`Tokenizer` (no stemmer, every length kept) ASCII text is
    lowered and its other characters made spaces, without making a list of
    terms; any other ``Tokenizer`` without a stemmer joins its terms (runs of
    letters and digits never hold whitespace). A stemmer may return any
    string, and a tokenizer of another type any terms: ``None`` for those.
    """
    if type(tokenize) is not Tokenizer or tokenize.stemmer is not None:
        return None
    if tokenize.min_length == 1 and text.isascii():
        return text.lower().translate(_ASCII_SPACES)
    return " ".join(tokenize(text))


def joined_spaced_terms(tokenize: Tokenizer, texts: Sequence[str]) -> str | None:
    """Return :func:`spaced_terms` of each text, each followed by ``" \\x00 "``, in one string; or ``None`` where ``spaced_terms`` gives none.

    NUL is never in a term, so splitting the result at whitespace gives each
    text's terms followed by ``"\\x00"``. Texts that are all ASCII and
    hold no NUL are lowered and translated in one pass over their join.
    """
    if type(tokenize) is not Tokenizer or tokenize.stemmer is not None:
        return None
    if not texts:
        return ""
    joined = "\x00".join(texts) + "\x00"
    if tokenize.min_length == 1 and joined.isascii() and joined.count("\x00") == len(texts):
        return joined.lower().translate(_ASCII_KEEP_NUL).replace("\x00", " \x00 ")
    spaced = [spaced_terms(tokenize, text) or "" for text in texts]
    return " \x00 ".join(spaced) + " \x00 "


def joined_item_terms(tokenize: Tokenizer, items: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Return the terms of each item's fields, each item's followed by ``" \\x00 "``, in one UTF-8 byte string that starts with a space; or ``None`` where :func:`spaced_terms` gives none.

    An item's text is that of :func:`field_texts`: all its fields' strings
    joined by newlines. Splitting the result at whitespace gives each
    item's terms (``tokenize`` of its text) followed by ``b"\\x00"``, so an
    item without text is a lone NUL. The strings of every item are gathered
    by one walk and joined once; where they are all ASCII and hold no NUL
    they are lowered and their other bytes made spaces by one
    ``bytes.translate`` over the join, without a string per item.

    Raises:
        Exception: whatever reading an item's fields raised (a field
            changed while read on another thread).
    """
    if type(tokenize) is not Tokenizer or tokenize.stemmer is not None:
        return None
    strings: list[str] = []
    add = strings.append
    for fields in items:
        for value in fields.values():  # field_texts' walk, without a list per item
            kind = type(value)
            if kind is str:
                add(value)
            elif kind not in _NOT_TEXT:
                _walk(value, strings)
        add("\x00")  # joined by newlines: a space on each side once translated
    joined = "\n".join(strings)
    del strings
    if joined.count("\x00") == len(items):
        if tokenize.min_length == 1 and joined.isascii():
            return b" " + joined.encode("ascii").translate(_ASCII_TERM_BYTES) + b" "
        texts = joined.split("\x00")[:-1]  # each item's text, between newlines
    else:  # a text holds a NUL: each item's text read apart
        texts = ["\n".join([text for _, text in field_texts(fields)]) for fields in items]
    del joined
    spaced = joined_spaced_terms(tokenize, texts)
    return None if spaced is None else (" " + spaced).encode()


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


def field_texts(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return ``(field, text)`` per field holding text: its strings (as :func:`item_texts` finds them) joined by newlines.

    Tokenizing the joined text gives the terms of tokenizing each string in
    turn: a newline separates terms and never joins its neighbours (NFKC
    leaves it alone). One walk, without nested generators.
    """
    out: list[tuple[str, str]] = []
    for name, value in fields.items():
        kind = type(value)
        if kind is str:
            out.append((name, value))
            continue
        if kind in _NOT_TEXT:
            continue
        found: list[str] = []
        _walk(value, found)
        if found:
            out.append((name, found[0] if len(found) == 1 else "\n".join(found)))
    return out


def _walk(value: Any, out: list[str]) -> None:
    cls = type(value)
    if cls is str:
        out.append(value)
        return
    if cls is dict:
        inners = value.values()
    elif cls is list or cls is tuple:
        inners = value
    elif cls in _NOT_TEXT:
        return
    else:
        out.extend(_strings(value))
        return
    # A container's strings and numbers are taken here, without a call each (a build
    # ahead walks every item of a session); anything else is walked in turn.
    for inner in inners:
        kind = type(inner)
        if kind is str:
            out.append(inner)
        elif kind not in _NOT_TEXT:
            _walk(inner, out)


_NOT_TEXT: Final = frozenset({int, float, bool, type(None), bytes})


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


def checked_query(query: object) -> str:
    """Return ``query`` if it is a non-empty string, else raise :class:`InvalidQueryError`."""
    if type(query) is not str:
        msg = f"A search query must be a string, got {query!r} ({type(query).__name__})."
        raise InvalidQueryError(msg)
    if not query.strip():
        msg = "A search query must not be empty; pass the words to look for."
        raise InvalidQueryError(msg)
    return query


_MAX_K: Final = 2**63 - 1
"""The largest ``k`` a search takes: the largest row count SQLite and PostgreSQL can be asked for."""


def check_k(k: object) -> None:
    """Raise :class:`InvalidQueryError` unless ``k`` (how many hits) is an int from 1 to 2**63 - 1."""
    if type(k) is not int or k < 1:
        # An int too long for repr (more digits than Python converts) is named by its size.
        shown = (
            f"an int of {k.bit_length()} bits"
            if type(k) is int and k.bit_length() > 64
            else repr(k)
        )
        msg = f"k must be an int >= 1 (how many hits), got {shown}."
        raise InvalidQueryError(msg)
    if k > _MAX_K:
        # Stores pass k to SQL as a 64-bit integer; every search refuses more alike.
        msg = f"k must be at most 2**63 - 1 (how many hits), got an int of {k.bit_length()} bits."
        raise InvalidQueryError(msg)


def checked_keys(keys: Iterable[str] | None) -> tuple[str, ...] | None:
    """Return the searched field names as a tuple without repeats (``None``: every field), else raise :class:`InvalidQueryError`."""
    if keys is None:
        return None
    if isinstance(keys, str):
        msg = f"keys must be an iterable of field names, got the single string {keys!r}; wrap it: [{keys!r}]."
        raise InvalidQueryError(msg)
    names = tuple(dict.fromkeys(keys))
    for name in names:
        if type(name) is not str:
            msg = f"keys must be field names (strings), got {name!r} ({type(name).__name__})."
            raise InvalidQueryError(msg)
    return names
