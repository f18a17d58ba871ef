"""A stale coded file caught up in place (the file's rows stay mapped, the changed items' rows beside them), saved back by the reader that caught up enough, and kept past the budget by a little: Memory.search's hits and floats through appends, updates, deletes, reopens, a second process and damaged files."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from coded_sessions import (
    EMBEDDER,
    QUERIES,
    acted,
    closed_saves,
    coded_budget,
    coded_handle,
    coded_path,
    coded_session,
    expected,
    file_of,
    first_loads,
    found,
    harm_file,
    kept_tables,
    more_steps,
    saved,
    steps,
    written,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agents.memory import MemoryItem
from agents.memory.search import EmbedParts
from agents.memory.stores import Store, open_store
from agents.memory.stores._search import coded_file, coded_saves
from agents.memory.stores._search.compact import CompactVectors, compact_table

# Each test twice (int8_kernel): the coded rows bounded by simsimd, then by numpy (simsimd
# refused); a mark a test, as the stateful machine's TestCase takes no parametrized fixture.
BOTH_KERNELS = pytest.mark.usefixtures("int8_kernel")


def file_version(url: str) -> tuple[Any, Any]:
    """Return the version the session's file was saved at and the session's vectors version now."""
    with open_store(url) as store:
        file = file_of(store)
        return file.saved_version(), file.version


def stale_by(
    url: str, items: list[MemoryItem], added: int, monkeypatch: pytest.MonkeyPatch
) -> list[MemoryItem]:
    """Save the coded file of ``items``, then append ``added`` steps on another handle (which closes without coding them); return every item."""
    coded_session(url, items, monkeypatch)
    more = more_steps(added, 31)
    with open_store(url) as other:
        other.append("s", more)
        other.index_embeddings("s", EMBEDDER)
    closed_saves()
    return [*items, *more]


@BOTH_KERNELS
def test_a_caught_up_table_keeps_the_files_rows_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale file's table is caught up without a copy of its rows: the rows stay the file's mapped pages, the changed items' rows are coded beside them, the hits Memory.search's."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    every = stale_by(url, steps(60, 41), 5, monkeypatch)
    with coded_handle(url, every, monkeypatch) as store:
        assert found(store, QUERIES[1], 9, "semantic") == expected(
            every, QUERIES[1], 9, "semantic", None
        )
        [table] = kept_tables(store)
        assert isinstance(table, CompactVectors)
        assert not table.matrix.flags.writeable  # the file's pages, mapped
        assert table.used - len(table.matrix) >= 5
        assert found(store, QUERIES[0], 60, "hybrid") == expected(
            every, QUERIES[0], 60, "hybrid", None
        )


@BOTH_KERNELS
def test_a_reader_that_caught_up_enough_items_saves_the_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that caught up at least ``rebuild_rows`` items saves the table back as it closes (its live items only): the next fresh handle loads a current file, asks for no changes, and ranks as Memory.search."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(300, 42)
    coded_session(url, items, monkeypatch)
    with open_store(url) as other:  # 70 appended (past rebuild_rows: 64), 2 deleted
        more = more_steps(70, 43)
        other.append("s", more)
        other.index_embeddings("s", EMBEDDER)
        assert other.delete_steps("s", [items[40].step, items[41].step]) == 2
    closed_saves()
    every = [item for item in [*items, *more] if item not in items[40:42]]
    saved_at, now = file_version(url)
    assert saved_at != now
    assert first_loads(url, every, monkeypatch)
    closed_saves()
    assert file_version(url)[0] == now
    asked: list[Any] = []
    with open_store(url) as store:
        backend = type(store.backend)
        original = backend.vector_changes
        monkeypatch.setattr(
            backend, "vector_changes", lambda *args: asked.append(args) or original(*args)
        )
        coded_budget(store, every, monkeypatch)
        for query in QUERIES:
            assert found(store, query, 40, "semantic") == expected(
                every, query, 40, "semantic", None
            )
        [table] = kept_tables(store)
        assert isinstance(table, CompactVectors)
        assert len(table.key_at) == len(every)
        assert bool(table.alive.all())
    assert asked == []


@BOTH_KERNELS
def test_a_reader_that_caught_up_few_items_leaves_the_file_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that caught up fewer than ``rebuild_rows`` items closes without saving (the next reader catches them up as cheaply)."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    every = stale_by(url, steps(300, 44), 3, monkeypatch)
    before = file_version(url)
    assert first_loads(url, every, monkeypatch)
    closed_saves()
    assert file_version(url) == before
    assert first_loads(url, every, monkeypatch)


@BOTH_KERNELS
def test_a_coded_table_a_catch_up_grows_past_the_budget_stays_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's table fits the budget; the rows coded for the steps appended since pass it by less than a quarter: the table stays kept, and later queries neither load the file nor catch it up again."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(200, 45)
    coded_session(url, items, monkeypatch)
    with coded_handle(url, items, monkeypatch) as store:
        found(store, QUERIES[0], 1, "semantic")
        [table] = kept_tables(store)
        budget = int(table.matrix.nbytes)  # the file's rows, just
    more = more_steps(6, 46)
    written(url, more)
    every = [*items, *more]
    loads: list[str] = []
    original = coded_file.load_coded
    monkeypatch.setattr(
        coded_file, "load_coded", lambda *args: loads.append(args[0]) or original(*args)
    )
    with open_store(url) as store:
        path = coded_path(store)
        monkeypatch.setattr(store._vectors._cache, "_budget", budget)
        for query in [*QUERIES, *QUERIES]:
            assert found(store, query, 12, "semantic") == expected(
                every, query, 12, "semantic", None
            )
        [table] = kept_tables(store)
        assert isinstance(table, CompactVectors)
        assert table.nbytes > store._vectors._cache.budget >= int(table.matrix.nbytes)
    assert loads == [path]


def bodies_hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Return a list that gets the length of each coded file's body hashed from now on."""
    hashed: list[int] = []
    original = coded_file._BodyMac

    class Counted(original):  # type: ignore[misc,valid-type]  # counts the bodies hashed
        def __init__(self, key: bytes, body: memoryview) -> None:
            hashed.append(len(body))
            super().__init__(key, body)

    monkeypatch.setattr(coded_file, "_BodyMac", Counted)
    return hashed


@BOTH_KERNELS
def test_a_file_this_process_authenticated_is_not_hashed_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second fresh handle of the process loads the unchanged file without hashing it again; a file put in its place, or written in place, is hashed (a damaged one refused), the hits Memory.search's throughout."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(60, 47)
    path = coded_session(url, items, monkeypatch)
    # Files are remembered at once here (not 2 s after their last change): their writes below
    # come far later than a file system's timestamp tick.
    monkeypatch.setattr(coded_file, "_SETTLED_NS", 0)
    hashed = bodies_hashed(monkeypatch)
    assert first_loads(url, items, monkeypatch)
    assert first_loads(url, items, monkeypatch)
    assert len(hashed) == 1
    good = Path(path).read_bytes()
    shutil.copyfile(path, f"{path}.harmed")
    harm_file(f"{path}.harmed", "flip")
    os.replace(f"{path}.harmed", path)  # another inode under the name
    assert not first_loads(url, items, monkeypatch)  # refused
    assert len(hashed) == 2
    saved(url, items, monkeypatch)  # refused again, then built and saved (its second query)
    assert len(hashed) == 3
    assert first_loads(url, items, monkeypatch)
    assert first_loads(url, items, monkeypatch)
    assert len(hashed) == 4
    with open(path, "r+b") as file:  # the same inode, written in place: its change time moves
        file.write(good[:8])
    assert first_loads(url, items, monkeypatch)
    assert len(hashed) == 5


@BOTH_KERNELS
def test_a_file_changed_just_now_is_hashed_at_each_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose last change is more recent than ``_SETTLED_NS`` is not remembered (a write in the same timestamp tick would leave its times as they were): each fresh handle hashes it."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    items = steps(60, 48)
    coded_session(url, items, monkeypatch)
    monkeypatch.setattr(coded_file, "_SETTLED_NS", 10**15)
    hashed = bodies_hashed(monkeypatch)
    assert first_loads(url, items, monkeypatch)
    assert first_loads(url, items, monkeypatch)
    assert len(hashed) == 2


@BOTH_KERNELS
def test_a_loaded_tables_catch_up_copies_no_scales_and_makes_no_slot_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded file's scales and slacks are read into arrays with room: a catch-up codes its rows' there (no copy of the file's million), and neither the load nor the catch-up makes the slot map (made only when asked for, the same)."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    stale_by(url, steps(60, 41), 5, monkeypatch)
    with open_store(url) as store:
        loaded = file_of(store).load(1 << 30, EmbedParts(), lambda query, keys: {})
    assert loaded is not None
    table = loaded[0]
    scales, slacks = table.scale[: table.used].copy(), table.slack[: table.used].copy()
    keys = table.key_at.tolist()
    rng = np.random.default_rng(5)
    vectors = {key: rng.standard_normal((2, 64)).astype(np.float32) / 8 for key in (keys[3], 999)}
    caught = table.changed([keys[3], keys[7], 999], vectors)
    assert np.shares_memory(caught.scale, table.scale)
    assert np.shares_memory(caught.slack, table.slack)
    assert caught.ref_row is table.ref_row  # the file's part rows, mapped: the new parts' implied
    assert caught.part_rows().tolist() == [*table.ref_row.tolist(), *range(table.used, caught.used)]
    assert caught.used == table.used + 4
    assert (table.scale[: table.used] == scales).all()  # the loaded table sees none of them
    assert (table.slack[: table.used] == slacks).all()
    assert table.slot_map is None  # made by neither
    assert caught.slot_map is None
    assert caught.items == len(keys)  # one dropped, one added
    live = {key: slot for slot, key in enumerate(keys) if key != keys[7]}
    live.update({keys[3]: len(keys), 999: len(keys) + 1})
    assert caught.slot_of == live


WIDTH = 16
"""The width of the vectors of the tables built from a model (:func:`model_table`)."""


def unit_rows(rng: np.random.Generator, rows: int) -> Any:
    """Return ``rows`` random unit vectors of :data:`WIDTH` float32."""
    block = rng.standard_normal((rows, WIDTH)).astype(np.float32)
    return block / np.linalg.norm(block, axis=1, keepdims=True)


def model_table(model: dict[int, Any]) -> CompactVectors:
    """Return the coded table of ``model`` (each key's part vectors, keys ascending), its exact cosines those of the model as it is when asked."""

    def cosines_of(query: Any, keys: Any) -> dict[int, float]:
        return {key: float((model[key] @ query).max()) for key in keys if key in model}

    keys = [key for key in sorted(model) for _ in model[key]]
    pages = [(keys, np.concatenate([model[key] for key in sorted(model)]))]
    table = compact_table(pages, "m", EmbedParts(), WIDTH, 1 << 30, cosines_of)
    assert table is not None
    return table


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    rounds=st.lists(
        st.tuples(
            st.lists(st.integers(0, 45), max_size=10, unique=True),
            st.lists(st.integers(0, 45), max_size=5, unique=True),
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
)
@BOTH_KERNELS
def test_a_change_finds_its_slots_alike_with_or_without_the_slot_map(
    seed: int, rounds: list[tuple[list[int], list[int], bool]]
) -> None:
    """``changed`` on a table whose slot map is not made yet marks the same slots dead and gives the same slot map, bounds and scores as on one whose map is made."""
    rng = np.random.default_rng(seed)
    unit = functools.partial(unit_rows, rng)

    model = {key: unit(int(rng.integers(1, 4))) for key in range(40)}

    lazy = model_table(model)
    made = lazy.live()
    for changed, dropped, ask in rounds:
        made.slot_of  # noqa: B018 (made now: the path that updates a map)
        for key in changed:
            model[key] = unit(int(rng.integers(1, 4)))
        for key in dropped:
            model.pop(key, None)
        touched = sorted({*changed, *dropped})
        vectors = {key: model[key] for key in touched if key in model}
        lazy, made = lazy.changed(touched, vectors), made.changed(touched, vectors)
        assert lazy.items == made.items == len(made.slot_of) == len(model)
        if ask:  # the map made on the lazy side too, now and then: later changes update it
            assert lazy.slot_of == made.slot_of
        assert (lazy.alive == made.alive).all()
        assert lazy.key_at.tolist() == made.key_at.tolist()
    assert lazy.slot_of == made.slot_of
    zero = np.zeros(WIDTH, dtype=np.float32)  # read through part_rows: the parts coded since too
    keys, every = lazy.every_score(zero)
    assert keys.tolist() == sorted(model)
    assert every.tolist() == [0.0] * len(model)
    query = unit(1)[0]
    assert live_bounds(lazy, query) == live_bounds(made, query)
    for limit in (1, 5, None):
        assert lazy.scores(query, limit) == made.scores(query, limit)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    among=st.lists(
        st.one_of(st.sampled_from([-1, 0, 1, 2, 78, 79, 80]), st.integers(-3, 90)), max_size=12
    ),
    changed=st.booleans(),
)
@BOTH_KERNELS
def test_a_tables_items_are_found_alike_with_or_without_the_slot_map(
    seed: int, among: list[int], changed: bool
) -> None:
    """``scores(among=)`` and ``scores_of`` find the items asked for in the keys laid out while the slot map is not made (a loaded table's first hybrid query), as the map would: the same floats."""
    rng = np.random.default_rng(seed)
    unit = functools.partial(unit_rows, rng)

    model = {key: unit(int(rng.integers(1, 4))) for key in range(0, 80, 2)}

    lazy, made = model_table(model), model_table(model)
    if changed:  # an item re-coded: the lookup goes through the map on both sides
        model[4] = unit(2)
        lazy, made = lazy.changed([4], {4: model[4]}), made.changed([4], {4: model[4]})
    made.slot_of  # noqa: B018 (made now)
    query = unit(1)[0]
    for limit in (1, 3, None):
        assert lazy.scores(query, limit, among) == made.scores(query, limit, among)
    assert lazy.scores_of(query, among) == made.scores_of(query, among)
    assert lazy.slot_map is None or changed  # not made by the lookups
    assert lazy.slot_of == made.slot_of


def live_bounds(table: CompactVectors, query: Any) -> dict[int, tuple[float, float]]:
    """Return each live item's upper and lower bound with ``query``, by key."""
    upper, lower = table._bounds(np, query)
    slots = zip(table.key_at.tolist(), upper.tolist(), lower.tolist(), strict=True)
    alive = table.alive[: len(table.key_at)].tolist()
    return {key: (up, low) for (key, up, low), live in zip(slots, alive, strict=True) if live}


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    changed=st.lists(st.integers(0, 45), max_size=12, unique=True),
    dropped=st.lists(st.integers(0, 45), max_size=6, unique=True),
)
@BOTH_KERNELS
def test_live_lays_out_the_live_items_by_key_with_their_rows(
    seed: int, changed: list[int], dropped: list[int]
) -> None:
    """A table whose items were re-coded, dropped and added (``changed``) gives a ``live`` copy with its live items only, keys ascending, each with its own parts' rows: the same bounds and scores."""
    rng = np.random.default_rng(seed)
    unit = functools.partial(unit_rows, rng)

    model = {key: unit(int(rng.integers(1, 4))) for key in range(40)}
    model[3] = model[1].copy()  # equal parts, held once

    table = model_table(model)
    for key in changed:
        model[key] = unit(int(rng.integers(1, 4)))
    for key in dropped:
        model.pop(key, None)
    touched = sorted({*changed, *dropped})
    table = table.changed(touched, {key: model[key] for key in touched if key in model})
    live = table.live()
    assert live.key_at.tolist() == sorted(model)
    assert bool(live.alive.all())
    assert live.used <= table.used
    for _ in range(4):
        query = unit(1)[0]
        assert live_bounds(live, query) == live_bounds(table, query)
        for limit in (1, 5, None):
            assert live.scores(query, limit) == table.scores(query, limit)


# -- a plain model against a session written, reopened and damaged ---------------------------


class CodedSession(RuleBasedStateMachine):
    """A session of part vectors kept coded, written by other handles and another process, read by a handle closed and opened again (saving back what it caught up), its file damaged now and then: each query ranks as Memory.search over the plain model."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp()
        self.db = str(Path(self.folder) / "store.db")
        self.url = f"sqlite://{self.db}"
        self.items: list[MemoryItem] = []
        self.seqs: dict[int, int] = {}  # step -> seq of the steps written first
        self.store: Store | None = None
        self.patch = pytest.MonkeyPatch()
        # Small sessions: a reader saves back once 4 items changed (not 64).
        self.patch.setattr(coded_saves, "_FEWEST_ROWS", 4)
        self.added = 0
        self.foreign = ""  # the coded file of another store, made once

    @initialize(n=st.integers(40, 90), seed=st.integers(0, 1000))
    def start(self, n: int, seed: int) -> None:
        self.items = steps(n, seed)
        self.seqs = dict(
            zip([item.step for item in self.items], written(self.url, self.items), strict=True)
        )
        saved(self.url, self.items, self.patch)
        self.reopen()

    def reader(self) -> Store:
        assert self.store is not None
        coded_budget(self.store, self.items, self.patch)
        cache = self.store._vectors._cache
        # Room for the table a catch-up grows, as a kept table grows with writes.
        self.patch.setattr(cache, "_budget", cache._budget * 3 // 2)
        return self.store

    @rule()
    def reopen(self) -> None:
        """Close the reader (its saves done) and open a fresh one."""
        if self.store is not None:
            self.store.close()
            closed_saves()
        self.store = open_store(self.url)

    @rule(count=st.integers(1, 4), seed=st.integers(0, 1000), process=st.booleans())
    def append(self, count: int, seed: int, process: bool) -> None:
        """Steps appended and embedded by another handle, or another process."""
        more = [
            MemoryItem(**{**item.to_dict(), "step": 5000 + self.added + i})
            for i, item in enumerate(steps(count, seed))
        ]
        self.added += count
        self.act([("append", [item.to_dict() for item in more])], process)
        self.items.extend(more)

    @precondition(lambda self: len(self.items) > 20)
    @rule(pick=st.integers(0, 1000), process=st.booleans())
    def delete(self, pick: int, process: bool) -> None:
        """A step past the first 16 (the file's key) deleted by another handle or process."""
        item = self.items[16 + pick % (len(self.items) - 16)]
        self.act([("delete", item.step)], process)
        self.items.remove(item)

    @rule(pick=st.integers(0, 1000))
    def re_embed(self, pick: int) -> None:
        """A stored vector of a first-written step past the first 16 embedded again (its row written anew)."""
        later = [item for item in self.items[16:] if item.step in self.seqs]
        if later:
            self.act([("re-embed", self.seqs[later[pick % len(later)].step])], False)

    @rule(harm=st.sampled_from(["flip", "cut", "magic", "swap"]))
    def damage(self, harm: str) -> None:
        """The file beside the store replaced by a damaged copy, or by the file of another session (a fresh handle must not trust either).

        Replaced, not written in place: the file is the owner's alone
        (mode 0600, as the database), and someone who may write the folder
        puts a file of their own there (a handle that mapped the old one
        keeps its pages).
        """
        assert self.store is not None
        path = coded_path(self.store)
        if not os.path.exists(path):
            return
        copy = f"{path}.harmed"
        if harm == "swap":  # another store's file of a session ``s``, under this one's name
            other = f"sqlite://{Path(self.folder) / 'other.db'}"
            if not self.foreign:
                written(other, steps(40, 7))
                self.foreign = saved(other, steps(40, 7), self.patch)
            shutil.copyfile(self.foreign, copy)
        else:
            shutil.copyfile(path, copy)
            harm_file(copy, harm)
        os.replace(copy, path)

    def act(self, actions: list[Any], process: bool) -> None:
        if not process:
            acted(self.db, actions)
            return
        script = f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from coded_sessions import acted
            acted({self.db!r}, {actions!r})
        """
        subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True)

    @rule(
        query=st.sampled_from(QUERIES),
        k=st.integers(1, 30),
        mode=st.sampled_from(["semantic", "hybrid"]),
    )
    def search(self, query: str, k: int, mode: str) -> None:
        """A query ranks as Memory.search over the model."""
        assert found(self.reader(), query, k, mode) == expected(self.items, query, k, mode, None)

    @invariant()
    def ranks_every_item(self) -> None:
        if self.store is not None and self.items:
            for k in (3, len(self.items)):  # the few that rank (a bound cuts), and every item
                want = expected(self.items, QUERIES[2], k, "semantic", None)
                assert found(self.reader(), QUERIES[2], k, "semantic") == want

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
            closed_saves()
        self.patch.undo()
        shutil.rmtree(self.folder, ignore_errors=True)


CodedSession.TestCase.settings = settings(
    max_examples=15,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_a_coded_session_through_writes_reopens_and_damage_ranks_as_memory_search = (
    CodedSession.TestCase
)
