"""wordllama's text vectors, computed from the tokens of a text's space-separated pieces, each piece tokenized once.

wordllama embeds a text as the mean of its tokens' rows of a table. Its
tokenizer (a byte-pair model whose normalizer marks each word start with
``"\u2581"`` and has no pre-tokenizer) never merges two symbols across a
word start, so a text's tokens are its pieces' tokens one after the other.
:class:`TokenPooling` tokenizes each distinct piece once and remembers it:
the parts of many items, which repeat words, cost a few dictionary look-ups
a word instead of a tokenizer call each. It also sums each text's token
rows without padding, grouping texts of one token count, and adds them in
wordllama's order, so that each vector is wordllama's float for float.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any, Final

from agents.memory._vectors import numpy

__all__ = ["MARK", "PIECES_KEPT", "PROBES", "TokenPooling", "splits_at_spaces"]

MARK: Final = "\u2581"
"""The mark the tokenizer's normalizer puts at the start of each word (in place of a space)."""

PIECES_KEPT: Final = 1 << 17
"""Distinct pieces whose tokens are remembered; past it the memory starts afresh."""

PIECE_CHARS: Final = 64
"""Pieces longer than this are tokenized at each call, not remembered."""

TOKENS_AT_ONCE: Final = 1 << 16
"""Token rows gathered at once (64 MiB of float32 at 256 dimensions)."""

PROBES: Final = (
    "",
    "a",
    "the report dialog was closed",
    "Noted for later: the car was moved to Lisbon.",
    "click_input on 'File' (menú) 42x, Ярлык! 3.14 \u00e9t\u00e9 \U0001f600 tab\there",
    "thought: open the export dialog\nobservation: a PDF option is shown\n\nstatus: CONTINUE",
    "  two  spaces, a leading and a trailing one ",
    "<s> and </s> and <unk> inside a text, and a \u2581 mark",
    " ".join(f"word{n} longer-token-{n * 7}" for n in range(40)),
)
"""Texts embedded both ways when a model loads: pooling is used only where it gives wordllama's vectors."""


class TokenPooling:
    """The mean of each text's token vectors, from tokens remembered per space-separated piece.

    A text's tokens are the concatenation of its pieces' tokens (``"a b"``
    is ``"\u2581a\u2581b"`` to the normalizer, and no token holds a mark
    after its first character, so none spans two pieces). A text that
    could break that reasoning (an empty piece, as two spaces or a leading
    or trailing one make; the mark itself; a special token such as
    ``"<s>"``, which the tokenizer cuts out before normalizing) is
    tokenized whole instead.

    Args:
        tokenizer: A tokenizer without padding (the model's, copied).
        table: The model's token vectors, float32, one row per token id.
        specials: The texts of the tokenizer's added tokens.
        kept: How many distinct pieces' tokens are remembered at most.
    """

    def __init__(
        self, tokenizer: Any, table: Any, specials: Sequence[str], *, kept: int = PIECES_KEPT
    ) -> None:
        self._tokenizer = tokenizer
        self._table = table
        self._odd = re.compile("|".join([r"\A ", r" \Z", "  ", MARK, *map(re.escape, specials)]))
        self._kept = kept
        self._known: dict[str, list[int]] = {}

    @property
    def remembered(self) -> int:
        """How many distinct pieces' tokens are remembered now."""
        return len(self._known)

    @classmethod
    def of(cls, model: Any, dimension: int, *, kept: int = PIECES_KEPT) -> TokenPooling | None:
        """Return the pooling of a loaded wordllama model, or ``None`` where it would not give the model's own vectors.

        The tokenizer must split at spaces as described above, the table
        must be the model's float32 vectors of ``dimension``, and
        :data:`PROBES` must come out equal, float for float, to the model's
        ``embed`` (a later wordllama that pools otherwise keeps its own path).
        """
        np = numpy()
        try:
            spec = json.loads(model.tokenizer.to_str())
            table = model.embedding
            binary = model.binary
        except (AttributeError, TypeError, ValueError):
            return None
        if (
            binary is not False
            or not splits_at_spaces(spec)
            or not isinstance(table, np.ndarray)
            or table.dtype != np.float32
            or table.shape[1:] != (dimension,)
        ):
            return None
        tokenizer = type(model.tokenizer).from_str(model.tokenizer.to_str())
        tokenizer.no_padding()
        tokenizer.no_truncation()
        specials = [str(token.get("content", "")) for token in spec.get("added_tokens") or ()]
        pooling = cls(tokenizer, table, [text for text in specials if text], kept=kept)
        probes = list(PROBES)
        if not np.array_equal(pooling(probes), np.asarray(model.embed(probes), dtype=np.float32)):
            return None
        return pooling

    def __call__(self, texts: Sequence[str]) -> Any:
        """Return the mean token vector of each text, float32, one row per text (zeros for a text without tokens)."""
        np = numpy()
        table = self._table
        tokens, counts = self._tokens(texts)
        out = np.empty((len(counts), table.shape[1]), dtype=np.float32)
        starts = np.cumsum(counts) - counts
        np.clip(tokens, 0, len(table) - 1, out=tokens)
        order = np.argsort(counts, kind="stable")
        sizes, firsts = np.unique(counts[order], return_index=True)
        for size, first, last in zip(
            sizes.tolist(), firsts.tolist(), [*firsts[1:].tolist(), len(order)], strict=True
        ):
            chosen = order[first:last]
            if not size:
                out[chosen] = 0.0
                continue
            step = max(1, TOKENS_AT_ONCE // size)
            for at in range(0, len(chosen), step):
                rows = chosen[at : at + step]
                matrix = tokens[starts[rows][:, None] + np.arange(size)]
                # numpy adds along the middle axis one row after another, as
                # wordllama sums its padded batch (the padding adds zeros):
                # the same floats, divided by the same count.
                out[rows] = table[matrix].sum(axis=1, dtype=np.float32) / np.float32(size)
        return out

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Return each text's token ids (no special tokens added), as the tokenizer gives them for the whole text."""
        tokens, counts = self._tokens(texts)
        out: list[list[int]] = []
        at = 0
        for count in counts.tolist():
            out.append(tokens[at : at + count].tolist())
            at += count
        return out

    def _tokens(self, texts: Sequence[str]) -> tuple[Any, Any]:
        """Return the token ids of all ``texts`` one after another, and each text's count of them."""
        np = numpy()
        odd = self._odd.search
        pieces: list[str] = []
        per_text: list[int] = []
        for text in texts:
            # A text that is not words one space apart (or holds a mark or a
            # special token) is tokenized whole.
            split = [text] if odd(text) else text.split(" ")
            pieces += split
            per_text.append(len(split))
        distinct = list(dict.fromkeys(pieces))
        known = self._known
        remembered = [known.get(piece) for piece in distinct]
        fresh = [piece for piece, found in zip(distinct, remembered, strict=True) if found is None]
        tokenized: dict[str, list[int]] = {}
        if fresh:
            for piece, encoding in zip(
                fresh, self._tokenizer.encode_batch(fresh, add_special_tokens=False), strict=True
            ):
                tokenized[piece] = found = list(encoding.ids)
                if len(piece) <= PIECE_CHARS:
                    if len(known) >= self._kept:
                        known.clear()
                    known[piece] = found
        ids = [
            tokenized[piece] if found is None else found
            for piece, found in zip(distinct, remembered, strict=True)
        ]
        number = {piece: at for at, piece in enumerate(distinct)}
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(
            itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())
        )
        which = np.fromiter(map(number.__getitem__, pieces), dtype=np.int64, count=len(pieces))
        spans = lengths[which]  # the token count of each piece of each text
        total = int(spans.sum())
        ends = np.cumsum(spans)
        offsets = (np.cumsum(lengths) - lengths)[which] - (ends - spans)
        tokens = flat[np.arange(total) + np.repeat(offsets, spans)]
        firsts = np.cumsum(per_text) - np.asarray(per_text, dtype=np.int64)
        counts = np.add.reduceat(spans, firsts) if len(firsts) else np.zeros(0, dtype=np.int64)
        return tokens, counts


def splits_at_spaces(spec: Any) -> bool:
    """Return whether a tokenizer (its JSON form) tokenizes a text as the concatenation of its space-separated pieces."""
    if not isinstance(spec, dict):
        return False
    model = spec.get("model")
    normalizer = {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": MARK},
            {"type": "Replace", "pattern": {"String": " "}, "content": MARK},
        ],
    }
    if (
        spec.get("normalizer") != normalizer
        or spec.get("pre_tokenizer") is not None
        or not isinstance(model, dict)
        or model.get("type") != "BPE"
        or model.get("dropout") is not None
    ):
        return False
    vocab = model.get("vocab")
    # A token with a mark after its first character (other than a run of
    # marks, which needs two spaces in a row) could join two pieces.
    return isinstance(vocab, dict) and not any(
        MARK in token[1:] and token.strip(MARK) for token in vocab
    )
