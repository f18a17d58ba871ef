"""The checks a loaded coded file passes whatever its HMAC says (``coded_file._sound``), against a plain model of the rules ``compact_table`` keeps."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from coded_sessions import EMBEDDER, FIELDS, first_loads, saved, steps, written
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.memory._vectors import EmbedParts
from agents.memory.stores import open_store
from agents.memory.stores._search import coded_file
from agents.memory.stores._search.compact import CompactVectors, compact_table

INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(-3, 8)
FLOAT32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
TAILS = st.lists(st.tuples(FLOAT32 | st.sampled_from([1.0, 0.5]), FLOAT32 | st.just(0.25)))


def plain_sound(
    tails: list[tuple[float, float]], refs: list[int], start: list[int], keys: list[int]
) -> bool:
    """Return whether a table is such as ``compact_table`` makes, rule by rule, in Python ints and floats."""
    used = len(tails)
    if not start:
        return not refs
    if not refs or start[0] != 0 or start[-1] >= len(refs) or len(keys) != len(start):
        return False
    if any(b <= a for a, b in itertools.pairwise(start)):
        return False
    if any(b <= a for a, b in itertools.pairwise(keys)):
        return False
    if any(not 0 <= ref < used for ref in refs):
        return False
    if any(not (math.isfinite(scale) and scale > 0) for scale, _ in tails):
        return False
    return all(slack >= 0 for _, slack in tails)  # a NaN is not


def sound(
    tails: list[tuple[float, float]], refs: list[int], start: list[int], keys: list[int]
) -> bool:
    """Return what ``_sound`` says of the table, its tails laid out as a load lays them (with room after)."""
    room = np.full((len(tails) + 3, 2), np.nan, dtype=np.float32)
    room[: len(tails)] = np.asarray(tails, dtype=np.float32).reshape(-1, 2)
    return coded_file._sound(
        np,
        room[: len(tails)],
        np.asarray(refs, dtype=np.int64),
        np.asarray(start, dtype=np.int64),
        np.asarray(keys, dtype=np.int64),
    )


@given(
    tails=TAILS,
    refs=st.lists(SMALL | INT64, max_size=6),
    start=st.lists(SMALL | INT64, max_size=5),
    keys=st.lists(SMALL | INT64, max_size=5),
)
@example(tails=[(1.0, 0.25)], refs=[0, 0], start=[0, 2**63 - 1, -2, 1], keys=[1, 2, 3, 4])
@example(tails=[(1.0, 0.25)], refs=[0, 0, 0, 0], start=[0, 1, 2, 3], keys=[0, 2**63 - 1, -2, 1])
@example(tails=[(1.0, 0.25)], refs=[0, -1], start=[0, 1], keys=[1, 2])
@example(tails=[(1.0, -0.0)], refs=[0], start=[0], keys=[1])
@example(tails=[(math.inf, 0.25)], refs=[0], start=[0], keys=[1])
@example(tails=[(math.nan, 0.25)], refs=[0], start=[0], keys=[1])
@example(tails=[(1.0, math.nan)], refs=[0], start=[0], keys=[1])
@example(tails=[(1.0, 0.25)], refs=[0, 0], start=[0, 0], keys=[1, 2])
@example(tails=[(1.0, 0.25)], refs=[0, 0], start=[0, 1], keys=[2, 2])
@example(tails=[(0.0, 0.25)], refs=[0], start=[0], keys=[1])
@example(tails=[(float(np.finfo(np.float32).max), math.inf)], refs=[0], start=[0], keys=[1])
@example(tails=[(1e-45, 0.0)], refs=[0], start=[0], keys=[1])
def test_a_loaded_table_is_checked_as_the_plain_rules_say(
    tails: list[tuple[float, float]], refs: list[int], start: list[int], keys: list[int]
) -> None:
    """Starts and keys strictly ascending (compared in Python ints: no int64 difference wraps), refs within the rows, scales finite above 0, slacks 0 or more: ``_sound`` agrees with each rule."""
    keys = (keys + list(range(len(keys), len(start))))[: len(start)]  # one key a slot
    assert sound(tails, refs, start, keys) == plain_sound(tails, refs, start, keys)


def _forged_slots(path: str, key: bytes, change: Any) -> None:
    """Rewrite the file at ``path`` with its items' first parts and keys changed by ``change(start, keys)`` and its HMAC made with ``key``."""
    data = bytearray(Path(path).read_bytes())
    body = memoryview(data)[coded_file._START :]
    tag_length, used, row_bytes, refs, slots = coded_file._HEAD.unpack_from(body)
    at = coded_file._START + coded_file._HEAD.size + tag_length + (-tag_length % 8)
    at += used * row_bytes + (-(used * row_bytes) % 8) + refs * 8
    start = np.frombuffer(data, np.int64, slots, at)
    keys = np.frombuffer(data, np.int64, slots, at + slots * 8)
    change(start, keys)
    mac = coded_file._body_mac(key, [bytes(data[coded_file._START :])])
    data[len(coded_file.MAGIC) : coded_file._START] = mac
    Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize("which", ["start", "keys"])
def test_a_file_whose_starts_or_keys_wrap_is_refused(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items' first parts or keys forged to ``2**63 - 1`` then ``-2`` under the right key (their int64 difference wraps above 0): refused, the table built, the hits those of Memory.search."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(40, 3)
    written(url, items)
    path = saved(url, items, monkeypatch)

    def wrapped(start: Any, keys: Any) -> None:
        forged = start if which == "start" else keys
        forged[1:3] = [2**63 - 1, -2]

    with open_store(url) as store:
        version = store.backend.vectors_version("s", FIELDS)
        right = coded_file.CodedFile(store.backend, "s", FIELDS, version, EMBEDDER.name, 64).key()
    _forged_slots(path, right, wrapped)
    assert not first_loads(url, items, monkeypatch)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    width=st.sampled_from([1, 5, 8, 20, 64]),
    items=st.integers(1, 60),
    seed=st.integers(0, 1000),
    chunk=st.sampled_from([8, 64, 256, 1 << 20]),
    piece=st.sampled_from([1, 3, 40, 264, 1000, 1 << 20]),
    threads=st.sampled_from([1, 3]),
    seen=st.booleans(),
)
def test_a_loaded_table_takes_each_rows_scale_and_slack_as_saved(
    width: int,
    items: int,
    seed: int,
    chunk: int,
    piece: int,
    threads: int,
    seen: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each row's scale and slack, taken piece by piece as the chunks are hashed on threads (pieces and rows across chunk and piece bounds, any width) or in one pass where the file is known, are those of the table saved; its parts, items and keys too."""
    monkeypatch.setattr(coded_file, "CHUNK", chunk)
    monkeypatch.setattr(coded_file, "PIECE", piece)
    monkeypatch.setattr(coded_file, "_cores", lambda: threads)
    if seen:  # a file known: no HMAC, the tails taken in one pass
        monkeypatch.setattr(coded_file._Seen, "known", lambda self: True)
    rng = np.random.default_rng(seed)
    keys = np.repeat(np.arange(1, items + 1), rng.integers(1, 4, items))
    vectors = rng.standard_normal((len(keys), width)).astype(np.float32)
    vectors[rng.random(len(keys)) < 0.3] = vectors[0]  # rows repeated: held once
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    built = compact_table([(keys.tolist(), vectors)], "m", EmbedParts(), width, 1 << 30, dict)
    assert isinstance(built, CompactVectors)
    path, key = str(tmp_path / f"coded-{width}-{items}-{seed}"), b"k" * 32
    assert coded_file.save_coded(path, built, b"subject\n7", key)
    loaded = coded_file.load_coded(path, b"subject", key, 1 << 30, "m", EmbedParts(), width, dict)
    assert loaded is not None
    table, version = loaded
    used = built.used
    assert version == b"7"
    assert table.used == used
    assert table.scale[:used].tobytes() == built.scale[:used].tobytes()
    assert table.slack[:used].tobytes() == built.slack[:used].tobytes()
    assert table.part_rows().tolist() == built.part_rows().tolist()
    assert table.start.tolist() == built.start.tolist()
    assert table.key_at.tolist() == built.key_at.tolist()
