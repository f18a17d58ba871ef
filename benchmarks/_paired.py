"""Paired judgment of a keyword ranking against a peer, fact by fact: the sign test and the verdict.

The issue's target is "within 0.01 of the best engine on each held-out
set". A 3-seed median moves by more than that from seed noise alone on
sets of 240 facts (docs/search.md, "Held-out corpora"), so the keyword
tables judge each set on every seed's facts together: the mean gap to the
best peer, and a two-sided sign test on the facts one engine finds and the
other misses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TARGET = 0.01
"""The largest gap to the best peer that meets the target (recall@5)."""
SIGNIFICANT = 0.05
"""A sign-test p-value below this makes a gap more than seed noise."""


def sign_test(won: int, lost: int) -> float:
    """Return the two-sided sign-test p-value of ``won`` against ``lost`` (ties dropped).

    Args:
        won: facts the ranking finds and the peer misses.
        lost: facts the peer finds and the ranking misses.

    Returns:
        The probability, under a fair coin per differing fact, of a split at
        least as uneven; ``1.0`` when no fact differs.
    """
    n = won + lost
    if n == 0:
        return 1.0
    low = min(won, lost)
    tail = sum(math.comb(n, i) for i in range(low + 1)) / float(2**n)
    return min(1.0, 2 * tail)


def won_lost(ours: Sequence[bool], theirs: Sequence[bool]) -> tuple[int, int]:
    """Return ``(won, lost)``: facts found only by ours, and only by theirs (paired by position)."""
    won = sum(a and not b for a, b in zip(ours, theirs, strict=True))
    lost = sum(b and not a for a, b in zip(ours, theirs, strict=True))
    return won, lost


def verdict(gap: float, won: int, lost: int) -> str:
    """Return the verdict on one set from the mean gap to the best peer and the paired facts.

    Args:
        gap: the best peer's mean recall@5 over the seeds minus ours.
        won: facts over every seed that ours finds and the best peer misses.
        lost: facts the best peer finds and ours misses.

    Returns:
        ``"within 0.01"`` when the mean gap is at most :data:`TARGET` (with
        ``", loses significantly"`` added when the peer still finds
        significantly more facts); otherwise ``"behind, significant"`` when
        the sign test's p-value is below :data:`SIGNIFICANT`, else
        ``"behind, seed noise"``.
    """
    p = sign_test(won, lost)
    if gap <= TARGET + 1e-9:
        return "within 0.01" + (", loses significantly" if lost > won and p < SIGNIFICANT else "")
    return "behind, significant" if lost > won and p < SIGNIFICANT else "behind, seed noise"
