"""Embedders for semantic search: the protocol, a built-in hashing embedder and wordllama."""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The protocol and the checks live in agents.memory._vectors, shared with the stores.
from agents.memory._vectors import Embedder, checked_vectors, numpy
from agents.memory.exceptions import InvalidArgumentError, missing_dependency
from agents.memory.search._pooling import TokenPooling

__all__ = ["Embedder", "HashingEmbedder", "WordLlamaEmbedder", "checked_vectors", "numpy"]


class HashingEmbedder:
    """A dependency-light embedder: hashed character n-grams of words, no model weights.

    Each word (as the keyword tokenizer splits it) is padded as ``<word>`` and
    cut into character n-grams; each n-gram adds +1 or -1 to one of
    ``dimension`` buckets chosen by a stable hash. Texts sharing words or word
    pieces (``"invoice"``, ``"invoices"``) get close vectors. It knows no
    synonyms, so it finds spelling variants, not paraphrases; use a trained
    model (:class:`WordLlamaEmbedder`) for meaning. Deterministic across
    processes and machines. Needs numpy.

    Args:
        dimension: The vector length.
        ngram: The n-gram length in characters.
    """

    def __init__(self, dimension: int = 256, *, ngram: int = 3) -> None:
        if type(dimension) is not int or dimension < 8:
            msg = f"HashingEmbedder(dimension=...) takes an int >= 8, got {dimension!r}."
            raise InvalidArgumentError(msg)
        if type(ngram) is not int or ngram < 1:
            msg = f"HashingEmbedder(ngram=...) takes an int >= 1, got {ngram!r}."
            raise InvalidArgumentError(msg)
        from agents.memory._text import Tokenizer

        self._dimension = dimension
        self._ngram = ngram
        self._tokenize = Tokenizer()
        self._buckets: dict[str, tuple[int, float]] = {}

    @property
    def name(self) -> str:
        """``"hashing-<ngram>gram-<dimension>"``."""
        return f"hashing-{self._ngram}gram-{self._dimension}"

    @property
    def dimension(self) -> int:
        """The vector length."""
        return self._dimension

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Return one float32 vector per text."""
        np = numpy()
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        n = self._ngram
        for row, text in enumerate(texts):
            for word in self._tokenize(text):
                padded = f"<{word}>"
                grams = [padded[i : i + n] for i in range(max(len(padded) - n + 1, 1))]
                for gram in grams:
                    bucket, sign = self._bucket(gram)
                    out[row, bucket] += sign
        return out

    def _bucket(self, gram: str) -> tuple[int, float]:
        found = self._buckets.get(gram)
        if found is None:
            digest = hashlib.blake2b(gram.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            found = (value % self._dimension, 1.0 if value >> 63 else -1.0)
            if len(self._buckets) < 1_000_000:
                self._buckets[gram] = found
        return found

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self._dimension}, ngram={self._ngram})"


class WordLlamaEmbedder:
    """The offline default: wordllama's static token embeddings, weights shipped in its wheel.

    Loads the model from the installed ``wordllama`` package itself, with
    downloads disabled, so it runs with no network and no API key. Install
    it with ``pip install 'kvmemory[semantic]'``.

    Args:
        config: The wordllama configuration to load.
        dimension: The vector length (wordllama's Matryoshka truncation: 64, 128, 256, ...).

    Raises:
        MissingDependencyError: if ``wordllama`` is not installed.
    """

    def __init__(self, config: str = "l2_supercat", *, dimension: int = 256) -> None:
        try:
            wordllama = importlib.import_module("wordllama")
        except ImportError as exc:
            raise missing_dependency("wordllama", "semantic") from exc
        # wordllama 0.4 looks for its tokenizer outside the package and would
        # try to download it; pointing cache_dir at the package finds both
        # the tokenizer and the weights that the wheel carries.
        package = Path(str(wordllama.__file__)).parent
        self._model = wordllama.WordLlama.load(
            config, cache_dir=package, dim=256, trunc_dim=dimension, disable_download=True
        )
        self._name = f"wordllama-{config}-{dimension}"
        self._dimension = dimension
        self._pooled = TokenPooling.of(self._model, dimension)

    @property
    def name(self) -> str:
        """``"wordllama-<config>-<dimension>"``."""
        return self._name

    @property
    def dimension(self) -> int:
        """The vector length."""
        return self._dimension

    def __call__(self, texts: Sequence[str], /) -> Any:
        """Return one float32 vector per text: the mean of its tokens' vectors, as wordllama computes it.

        Where the model's tokenizer allows (see :class:`TokenPooling`), each
        space-separated piece of text is tokenized once and remembered, and
        the mean is taken without padding, so the parts of many items (which
        repeat words) cost little more than the items whole; the vectors
        are wordllama's own, float for float.
        """
        np = numpy()
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        if self._pooled is not None:
            return self._pooled(texts)
        return np.asarray(self._model.embed(list(texts)), dtype=np.float32)

    def __repr__(self) -> str:
        return f"WordLlamaEmbedder({self._name!r})"
