"""Search filters: the operators, their documented edge cases, refusals, and RAM and every store against a plain model."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.memory import InvalidQueryError, Memory, MemoryItem
from agents.memory.search import Filter, HashingEmbedder
from agents.memory.search._item_vectors import Vectors
from agents.memory.stores import _ram as ram_store
from agents.memory.stores import open_memory, open_store
from agents.memory.stores._core.filter_values import FEW, ranked_where
from agents.memory.stores._jsonl import backend as jsonl_backend
from agents.memory.stores._sql.dialect import SQLRows
from agents.memory.stores._sql.filters import candidates_query
from agents.memory.stores._sqlite.keyword import SQLiteKeywordIndex

# -- a plain model of the filter language, written apart from agents.memory._filter --------

_MISSING = object()


def kind(value: Any) -> str:
    """The documented kinds: values of two kinds are never equal and never ordered."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def lookup(fields: Mapping[str, Any], name: str) -> Any:
    """The whole field name first, else the dotted path through nested dicts."""
    if name in fields:
        return fields[name]
    if "." not in name:
        return _MISSING
    value: Any = fields
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def same(value: Any, operand: Any) -> bool:
    return value is not _MISSING and kind(value) == kind(operand) and value == operand


def holds(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return same(value, operand)
    if op == "$ne":
        return not same(value, operand)
    if op == "$in":
        return any(same(value, x) for x in operand)
    if op == "$nin":
        return not any(same(value, x) for x in operand)
    if value is _MISSING or kind(value) != kind(operand):
        return False
    return {
        "$gt": value > operand,
        "$gte": value >= operand,
        "$lt": value < operand,
        "$lte": value <= operand,
    }[op]


def model(fields: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether an item's fields pass ``where``, by the rules docs/search.md states."""
    for key, condition in where.items():
        if key == "$and":
            ok = all(model(fields, inner) for inner in condition)
        elif key == "$or":
            ok = any(model(fields, inner) for inner in condition)
        else:
            value = lookup(fields, key)
            if isinstance(condition, range):
                ok = type(value) is int and value in condition
            elif isinstance(condition, dict) and condition and all(k[0] == "$" for k in condition):
                ok = all(holds(value, op, operand) for op, operand in condition.items())
            else:
                ok = same(value, condition)
        if not ok:
            return False
    return True


# -- generated sessions and filters ------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([-1.5, 0.0, 1.0, 2.0, 2.5, 1e300]),
    st.sampled_from(["", "a", "b", "2", "ab", "é"]),
)
values = st.one_of(scalars, st.sampled_from([[1, 2], (1, 2), {"x": 1}, [True]]))
FIELDS = ("step", "n", "s", "meta.n", "meta", "missing")


@st.composite
def items(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "text": " ".join(draw(st.lists(st.sampled_from(["alpha", "beta", "gamma"]), max_size=4)))
        + " alpha"
    }
    for name in ("step", "n", "s"):
        if draw(st.booleans()):
            fields[name] = draw(values)
    choice = draw(st.integers(0, 2))
    if choice == 1:
        fields["meta"] = {"n": draw(values), "tag": "x"}
    elif choice == 2:
        fields["meta"] = draw(values)
    return fields


condition_operands = {
    "$eq": values,
    "$ne": values,
    "$gt": st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 2.0, "a", "2", ""])),
    "$in": st.lists(values, max_size=4),
}
condition_operands["$gte"] = condition_operands["$lt"] = condition_operands["$lte"] = (
    condition_operands["$gt"]
)
condition_operands["$nin"] = condition_operands["$in"]


@st.composite
def conditions(draw: st.DrawFn) -> Any:
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(values)  # a plain value: equality
    if choice == 1:
        start = draw(st.integers(-3, 3))
        return range(start, start + draw(st.integers(0, 4)))
    ops = draw(
        st.lists(st.sampled_from(sorted(condition_operands)), min_size=1, max_size=3, unique=True)
    )
    return {op: draw(condition_operands[op]) for op in ops}


def filters(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.dictionaries(st.sampled_from(FIELDS), conditions(), min_size=1, max_size=2)
    if depth == 0:
        return leaf

    @st.composite
    def node(draw: st.DrawFn) -> dict[str, Any]:
        where = draw(leaf)
        for op in ("$and", "$or"):
            if draw(st.integers(0, 2)) == 0:
                where[op] = draw(st.lists(filters(depth - 1), min_size=1, max_size=3))
        return where

    return node()


# -- RAM ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(fields=items(), where=filters())
def test_filter_keeps_what_the_model_keeps(fields: dict[str, Any], where: dict[str, Any]) -> None:
    """A compiled filter passes an item exactly when the plain model of the documented rules does."""
    assert Filter(where)(MemoryItem(**fields)) is model(fields, where)


@settings(max_examples=80, deadline=None)
@given(session=st.lists(items(), min_size=1, max_size=12), where=filters(), k=st.integers(1, 6))
def test_memory_search_gives_the_best_k_that_pass(
    session: list[dict[str, Any]], where: dict[str, Any], k: int
) -> None:
    """Memory.search(where=) gives the first k items of the unfiltered ranking that the model keeps."""
    memory = Memory(MemoryItem(**fields) for fields in session)
    everything = memory.search("alpha beta", k=len(session))
    want = [(h.item.to_dict(), h.score) for h in everything if model(h.item.to_dict(), where)][:k]
    got = [(h.item.to_dict(), h.score) for h in memory.search("alpha beta", k=k, where=where)]
    assert got == want


# -- every store -------------------------------------------------------------------------


def ram_hits(session: list[dict[str, Any]], where: Any, k: int, **options: Any) -> list[Any]:
    memory = Memory(MemoryItem(**fields) for fields in session)
    return [
        (h.item.to_dict(), h.score)
        for h in memory.search("alpha beta", k=k, where=where, **options)
    ]


FILLER: Final = 16
"""Rows added per generated row, holding none of the filtered fields: a filter the generated rows alone may pass is then rare enough (one row in ``FEW``) that a store scores only the rows that pass."""


def scored_among(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the searches that score only the rows that may pass: the list holds the number of rows scored, one entry a search.

    memory:// and JSONL take that path in ``ranked_where`` (when at most one
    row in ``FEW`` passes), SQLite in ``Backend.keyword_among`` (on a session
    longer than its first ranking).
    """
    counts: list[int] = []

    def counting(
        allowed: set[int], size: int, k: int, among: Any, top: Any
    ) -> list[tuple[float, int]]:
        if allowed and FEW * len(allowed) <= size:
            counts.append(len(allowed))
        return ranked_where(allowed, size, k, among, top)

    monkeypatch.setattr(ram_store, "ranked_where", counting)
    monkeypatch.setattr(jsonl_backend, "ranked_where", counting)
    keyword_among = store.backend.keyword_among

    def among(session_id: str, terms: Any, seqs: Any) -> Any:
        counts.append(len(seqs))
        return keyword_among(session_id, terms, seqs)

    monkeypatch.setattr(store.backend, "keyword_among", among)
    return counts


def test_store_search_and_ranking_agree_with_memory_and_the_model(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On generated sessions and filters, each store's search and ranking give Memory.search's filtered hits, also where a filter is rare enough that only its rows are scored."""
    with open_store(store_url) as store:
        store.append("neighbour", [MemoryItem(step=0, text="alpha beta gamma")])
        scored = scored_among(store, monkeypatch)

        @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(
            session=st.lists(items(), min_size=1, max_size=10),
            where=filters(),
            k=st.integers(1, 5),
            keys=st.sampled_from([None, ["text"]]),
            rare=st.booleans(),
        )
        @example(
            session=[{"text": "alpha beta", "s": "a"}], where={"s": "a"}, k=1, keys=None, rare=True
        )
        def check(
            session: list[dict[str, Any]],
            where: dict[str, Any],
            k: int,
            keys: list[str] | None,
            rare: bool,
        ) -> None:
            if rare:  # rows no condition on a generated field passes, but $ne and $nin
                filler = [{"text": "alpha gamma" if i % 2 else "beta"} for i in range(FILLER)]
                session = [row for fields in session for row in (fields, *filler)]
            sid = f"s{uuid.uuid4().hex}"
            seqs = store.append(sid, [MemoryItem(**fields) for fields in session])
            want = ram_hits(session, where, k, keys=keys)
            hits = store.search(sid, "alpha beta", k, keys=keys, where=where)
            got = [(h.item.to_dict(), h.score) for h in hits]
            assert got == [(f, pytest.approx(s, rel=1e-9)) for f, s in want]
            assert all(model(h.item.to_dict(), where) for h in hits)
            ranked = store.ranking(sid, "alpha beta", k, keys=keys, where=where)
            assert ranked == [(h.seq, h.score) for h in hits]
            assert set(seqs) >= {seq for seq, _ in ranked}

        check()
        # memory:// and JSONL score the rows of a rare filter alone (ranked_where); SQLite's
        # first ranking holds these sessions whole, PostgreSQL ranks the few rows in SQL.
        if store_url.startswith(("memory:", "jsonl:")):
            assert scored, "no filter was rare enough to score only the rows that pass"


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_store_vector_search_with_a_filter_is_memory_search(store_url: str, mode: str) -> None:
    """Semantic and hybrid store searches keep the best k that pass, as Memory.search does."""
    embedder = HashingEmbedder(32)
    session = [
        {"step": i, "text": f"alpha {'beta ' * (i % 3)}gamma {i}", "n": i % 4 - 1.5 * (i % 2)}
        for i in range(40)
    ]
    wheres: list[Any] = [
        {"n": {"$gte": 0}},
        {"$or": [{"step": {"$in": [3, 17, 39]}}, {"n": {"$lt": -1}}]},
        {"step": {"$gt": 35}},
        {"missing": {"$ne": 1}, "step": {"$nin": list(range(0, 40, 2))}},
    ]
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        for where in wheres:
            for k in (1, 3, 8):
                memory = Memory(MemoryItem(**fields) for fields in session)
                want = [
                    (h.item.to_dict(), h.score)
                    for h in memory.search(
                        "alpha beta", k, mode=mode, where=where, embedder=embedder
                    )  # type: ignore[arg-type]  # mode is one of the two
                ]
                hits = store.search(
                    "s",
                    "alpha beta",
                    k,
                    mode=mode,
                    where=where,
                    embedder=embedder,  # type: ignore[arg-type]
                )
                got = [(h.item.to_dict(), h.score) for h in hits]
                assert got == [(f, pytest.approx(s, rel=1e-5, abs=1e-6)) for f, s in want], (
                    where,
                    k,
                )
                assert all(model(h.item.to_dict(), where) for h in hits)


def test_stored_memory_search_and_recall_take_operator_filters(store_url: str) -> None:
    """StoredMemory.search and recall keep the items an operator filter keeps, as Memory does."""
    session = [
        {"step": i, "text": "alpha beta" if i % 2 else "alpha", "cost": i / 4} for i in range(12)
    ]
    where = {"step": {"$gte": 2, "$lte": 5}}
    with open_memory(store_url, "run") as stored:
        stored.add_memory_items([MemoryItem(**fields) for fields in session])
        ram = Memory(MemoryItem(**fields) for fields in session)
        for k in (1, 2, 10):
            got = [(h.item.to_dict(), h.score) for h in stored.search("alpha beta", k, where=where)]
            want = [(h.item.to_dict(), h.score) for h in ram.search("alpha beta", k, where=where)]
            assert got == [(f, pytest.approx(s, rel=1e-9)) for f, s in want]
        assert [i["step"] for i in stored.recall("beta", 5, where=where)] == [3, 5]


# -- the documented rules ----------------------------------------------------------------


def steps(memory: Memory, where: Any) -> list[Any]:
    return sorted(h.item.get_value("step") for h in memory.search("alpha", k=50, where=where))


def test_ranges_of_steps_use_gte_and_lte() -> None:
    """{'step': {'$gte': 2, '$lte': 5}} keeps steps 2 to 5, where it used to keep nothing."""
    memory = Memory(MemoryItem(step=i, text="alpha") for i in range(10))
    assert steps(memory, {"step": {"$gte": 2, "$lte": 5}}) == [2, 3, 4, 5]
    assert steps(memory, {"step": {"$gt": 2, "$lt": 5}}) == [3, 4]
    assert steps(memory, {"step": range(2, 6)}) == [2, 3, 4, 5]


def test_bool_is_never_a_number_and_strings_never_numbers() -> None:
    """True is not 1 and not > 0; '2' is not 2 and is never ordered with numbers."""
    memory = Memory(
        [
            MemoryItem(step=0, text="alpha", v=True),
            MemoryItem(step=1, text="alpha", v=1),
            MemoryItem(step=2, text="alpha", v="2"),
            MemoryItem(step=3, text="alpha", v=2.0),
            MemoryItem(step=4, text="alpha", v=None),
        ]
    )
    assert steps(memory, {"v": 1}) == [1]
    assert steps(memory, {"v": True}) == [0]
    assert steps(memory, {"v": {"$gt": 0}}) == [1, 3]
    assert steps(memory, {"v": 2}) == [3]  # an int operand equals an equal float
    assert steps(memory, {"v": {"$in": ["2", None]}}) == [2, 4]
    assert steps(memory, {"v": {"$gte": ""}}) == [2]  # strings order with strings only
    assert steps(memory, {"v": None}) == [4]


def test_a_missing_field_fails_every_operator_but_ne_and_nin() -> None:
    """An item without the field fails $eq, order and $in, and passes $ne and $nin."""
    memory = Memory([MemoryItem(step=0, text="alpha", v=1), MemoryItem(step=1, text="alpha")])
    assert steps(memory, {"v": {"$ne": 2}}) == [0, 1]
    assert steps(memory, {"v": {"$nin": [1]}}) == [1]
    assert steps(memory, {"v": {"$lt": 5}}) == [0]
    assert steps(memory, {"v": None}) == []
    assert steps(memory, {"$or": [{"v": 1}, {"v": {"$nin": [1, 2]}}]}) == [0, 1]


def test_dotted_names_reach_into_nested_dicts_after_whole_names() -> None:
    """'action.name' is the nested value, unless the item has a field of that whole name."""
    memory = Memory(
        [
            MemoryItem(step=0, text="alpha", action={"name": "click", "args": {"x": 3}}),
            MemoryItem(step=1, text="alpha", action={"name": "type"}),
            MemoryItem(step=2, text="alpha", **{"action.name": "click"}),
            MemoryItem(step=3, text="alpha", action="click"),
        ]
    )
    assert steps(memory, {"action.name": "click"}) == [0, 2]
    assert steps(memory, {"action.args.x": {"$gte": 3}}) == [0]
    assert steps(memory, {"action": {"name": "type"}}) == [1]  # a dict without operators is a value


def test_other_values_compare_for_equality_only() -> None:
    """Lists, tuples and dates are equal to equal values of their own type and are never ordered."""
    when = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    memory = Memory(
        [
            MemoryItem(step=0, text="alpha", v=[1, 2]),
            MemoryItem(step=1, text="alpha", v=(1, 2)),
            MemoryItem(step=2, text="alpha", v=when),
        ]
    )
    assert steps(memory, {"v": [1, 2]}) == [0]
    assert steps(memory, {"v": {"$in": [(1, 2), when]}}) == [1, 2]
    with pytest.raises(InvalidQueryError, match=r"'\$gt' orders numbers or strings"):
        memory.search("alpha", where={"v": {"$gt": when}})


@pytest.mark.parametrize(
    ("where", "match"),
    [
        ({"step": {"$gtt": 2}}, r"field 'step' uses the unknown operator '\$gtt'"),
        (
            {"step": {"$gte": 2, "max": 5}},
            r"field 'step' mixes operators \['\$gte'\] with plain keys \['max'\]",
        ),
        (
            {"step": {"$in": 3}},
            r"field 'step': '\$in' takes a list of values, got int 3; write \{'\$in': \[3\]\}",
        ),
        ({"step": {"$nin": "ab"}}, r"'\$nin' takes a list of values, got str"),
        ({"step": {"$lt": None}}, r"field 'step': '\$lt' orders numbers or strings, got NoneType"),
        ({"step": {"$gt": True}}, r"'\$gt' orders numbers or strings, got bool"),
        ({"step": {"$eq": float("nan")}}, r"field 'step': '\$eq' got NaN"),
        ({"step": {"$in": [1, float("nan")]}}, r"'\$in' got NaN"),
        (
            {"step": {"$or": [{"step": 1}]}},
            r"field 'step' uses '\$or', which combines whole filters",
        ),
        ({"$or": []}, r"'\$or' takes a non-empty list of filters"),
        ({"$and": {"step": 1}}, r"'\$and' takes a non-empty list of filters, got dict"),
        ({"$or": [{"step": 1}, 3]}, r"in \$or\[1\]: '\$or' takes filters"),
        ({"$or": [{"step": {"$gtt": 1}}]}, r"field 'step' in \$or\[0\] uses the unknown operator"),
        ({"$not": {"step": 1}}, r"uses '\$not', which is not an operator"),
        ({3: "x"}, r"where takes field names \(strings\) as keys, got 3"),
        ([("step", 1)], r"where must be a mapping"),
    ],
)
def test_a_filter_not_understood_is_refused_by_memory_and_every_store(
    store_url: str, where: Any, match: str
) -> None:
    """A filter not understood raises InvalidQueryError naming field, operator and fix; never an empty result."""
    memory = Memory([MemoryItem(step=1, text="alpha")])
    with pytest.raises(InvalidQueryError, match=match):
        memory.search("alpha", where=where)
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(step=1, text="alpha")])
        with pytest.raises(InvalidQueryError, match=match):
            store.search("s", "alpha", where=where)
        with pytest.raises(InvalidQueryError, match=match):
            store.ranking("s", "alpha", where=where)
        with pytest.raises(InvalidQueryError, match=match):
            store.search("s", "alpha", where=where, mode="semantic", embedder=HashingEmbedder(8))


def test_a_function_filter_works_in_stores(store_url: str) -> None:
    """A function of the item filters a store's search as it filters Memory.search."""
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(step=i, text="alpha") for i in range(6)])
        hits = store.search("s", "alpha", 2, where=lambda item: item["step"] % 2 == 1)
        assert [h.item["step"] for h in hits] == [1, 3]


def test_a_damaged_sqlite_row_is_reported_by_a_filtered_search(tmp_path: Any) -> None:
    """A row that is not JSON makes a filtered search raise CorruptStoreError naming the row, never skip it."""
    import sqlite3

    from agents.memory import CorruptStoreError

    path = tmp_path / "store.db"
    with open_store(f"sqlite://{path}") as store:
        seqs = store.append("s", [MemoryItem(step=i, text="alpha") for i in range(20)])
    with sqlite3.connect(path) as con:
        con.execute("UPDATE kvmemory_items SET data = x'7b6e6f' WHERE seq = ?", (seqs[-1],))
    with (
        open_store(f"sqlite://{path}") as store,
        pytest.raises(CorruptStoreError, match=f"Item {seqs[-1]} of session 's'.* is damaged"),
    ):
        store.search("s", "alpha", 3, where={"step": {"$gte": 19}})


def test_sql_narrowing_keeps_every_row_that_passes(store_url: str) -> None:
    """Selective filters over values SQL cannot judge (dates, tuples, big ints, NaN, infinities) still find every hit."""
    odd: list[Any] = [
        dt.date(2024, 1, 1),
        (1, 2),
        2**64 - 1,
        2**70,
        float("inf"),
        float("nan"),
        -0.0,
        1e16,
        True,
        "2",
        None,
        {"x": 1},
        [1, 2],
        "a\x00b",  # PostgreSQL keeps no JSONB copy of a row holding NUL
    ]
    n = 100 * len(odd)
    session = [{"step": i, "text": "alpha", "v": odd[i % len(odd)]} for i in range(n)]
    session[-1]["pad"] = "x" * 5000  # a large row holding 1e16 has no JSONB copy either
    session[-1]["v"] = 1e16
    late = {"step": {"$gte": n - 100}}  # the hits lie deep in the ranking (ties by seq): rare
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        for where in (
            {"v": {"$gte": 2**64 - 1}},
            {"v": {"$lte": 0}},
            {"v": 0},
            {"v": {"$in": [(1, 2), None]}},
            {"v": {"$gt": 1e15, "$lt": 1e17}},
            {"v": {"$ne": True}},
            {"v": float("inf")},
            {"v": 2**70},
            {"v": dt.date(2024, 1, 1)},
            {"v": {"$nin": [True, "2", None, 0]}},
            {"v": {"$gte": "a\x00"}},
            {"v": 1e16},
            {"v": [1, 2]},
        ):
            for scope in (late, {}):
                rare = {**where, **scope}
                want = [fields["step"] for fields, _ in ram_hits(session, rare, 5)]
                got = [h.item["step"] for h in store.search("s", "alpha", 5, where=rare)]
                assert got == want, rare


def test_store_search_on_a_long_session_agrees_with_memory_for_any_filter(store_url: str) -> None:
    """On 1,500 generated items, where rare filters make SQL stores narrow the rows first, every store is Memory.search."""
    import random

    rng = random.Random(25)
    pool: list[Any] = [
        None,
        True,
        False,
        -1,
        0,
        1,
        2,
        2.0,
        2.5,
        "",
        "a",
        "b",
        "2",
        "a\x00",
        [1, 2],
        (1, 2),
    ]
    session: list[dict[str, Any]] = []
    for i in range(1500):
        fields: dict[str, Any] = {"step": i, "text": "alpha " + "beta " * rng.randrange(3)}
        for name in ("n", "s"):
            if rng.random() < 0.8:
                fields[name] = rng.choice(pool)
        if rng.random() < 0.5:
            fields["meta"] = {"n": rng.choice(pool)}
        session.append(fields)
    memory = Memory(MemoryItem(**fields) for fields in session)
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])

        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(where=filters(), k=st.sampled_from([1, 5, 20]))
        def check(where: dict[str, Any], k: int) -> None:
            want = [h.item["step"] for h in memory.search("alpha beta", k, where=where)]
            got = [h.item["step"] for h in store.search("s", "alpha beta", k, where=where)]
            assert got == want
            assert [seq for seq, _ in store.ranking("s", "alpha beta", k, where=where)] == [
                h.seq for h in store.search("s", "alpha beta", k, where=where)
            ]

        check()


def test_async_store_search_and_ranking_take_where(store_url: str) -> None:
    """AsyncStore.search and ranking pass where= through to the store."""
    import asyncio

    from agents.memory.stores import open_async_store

    async def main() -> tuple[list[Any], list[tuple[int, float]]]:
        async with open_async_store(store_url) as store:
            await store.append("s", [MemoryItem(step=i, text="alpha") for i in range(10)])
            hits = await store.search("s", "alpha", 3, where={"step": {"$gte": 4, "$lt": 6}})
            ranked = await store.ranking("s", "alpha", 3, where={"step": {"$in": [9]}})
            return [h.item["step"] for h in hits], ranked

    steps, ranked = asyncio.run(main())
    assert steps == [4, 5]
    assert len(ranked) == 1


def test_stored_memory_with_a_rare_filter_is_memory_search(store_url: str) -> None:
    """StoredMemory passes a filter of fields to its store (which may narrow in SQL) and keeps Memory.search's hits."""
    session = [
        {"step": i, "text": "alpha beta" if i % 3 else "alpha", "cost": i % 300}
        for i in range(1200)
    ]
    ram = Memory(MemoryItem(**fields) for fields in session)
    with open_memory(store_url, "run") as stored:
        stored.add_memory_items([MemoryItem(**fields) for fields in session])
        for where in ({"cost": 299}, {"cost": -1}, {"$or": [{"cost": 7}, {"step": 1199}]}):
            for k in (1, 5):
                got = [
                    (h.item["step"], h.score) for h in stored.search("alpha beta", k, where=where)
                ]
                want = [(h.item["step"], h.score) for h in ram.search("alpha beta", k, where=where)]
                assert [s for s, _ in got] == [s for s, _ in want], where
                assert [x for _, x in got] == pytest.approx([x for _, x in want], rel=1e-9)


# -- rare filters rank only the items that may pass ----------------------------------------


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_memory_search_with_a_rare_filter_keeps_what_the_model_keeps(mode: str) -> None:
    """On 800 items whose filtered fields are rare, Memory.search(where=) is the unfiltered ranking's first k the model keeps, also after changes."""
    import random

    rng = random.Random(31)
    pool: list[Any] = [None, True, False, -1, 0, 1, 2, 2.0, 2.5, "", "a", "b", "2", [1, 2], (1, 2)]
    session: list[dict[str, Any]] = []
    for i in range(800):
        fields: dict[str, Any] = {"step": i, "text": "alpha " + "beta " * rng.randrange(3)}
        for name in ("n", "s"):
            if rng.random() < 0.05:
                fields[name] = rng.choice(pool)
        if rng.random() < 0.05:
            fields["meta"] = {"n": rng.choice(pool)}
        session.append(fields)
    memory = Memory(MemoryItem(**fields) for fields in session)
    embedder = HashingEmbedder(64)
    for _ in range(2):
        _agrees_with_model(memory, mode, embedder)
        for item in memory[::7]:  # values change and items go: the filed values follow
            item["n"] = rng.choice(pool)
        for item in memory[3::11]:
            memory.delete_memory_item(item["step"])


def _agrees_with_model(memory: Memory, mode: str, embedder: HashingEmbedder) -> None:
    """Check on generated filters that Memory.search(where=) is the unfiltered ranking's first k the model keeps."""
    everything = memory.search("alpha beta", len(memory), mode=mode, embedder=embedder)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(where=filters(), k=st.sampled_from([1, 5, 20]))
    def check(where: dict[str, Any], k: int) -> None:
        keep = [h for h in everything if model(h.item.to_dict(), where)][:k]
        hits = memory.search("alpha beta", k, mode=mode, where=where, embedder=embedder)
        assert [(h.item["step"], h.score) for h in hits] == [
            (h.item["step"], h.score) for h in keep
        ]

    check()


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_rare_filter_is_asked_only_of_the_items_that_may_pass(mode: str) -> None:
    """A filter 8 of 2,000 items pass is asked of those 8 and of the hits, not of the ranking's best items one by one."""
    from agents.memory.search import search_index

    memory = Memory(
        MemoryItem(step=i, agent="reviewer" if i % 250 == 0 else "host", text="alpha beta")
        for i in range(2000)
    )
    index = search_index(memory)
    memory.search("alpha", 5, mode=mode, embedder=HashingEmbedder(64))  # embeds, tokenizes
    before = index.filter_tests
    hits = memory.search(
        "alpha", 5, mode=mode, where={"agent": "reviewer"}, embedder=HashingEmbedder(64)
    )
    assert [h.item["step"] for h in hits] == [0, 250, 500, 750, 1000]
    assert index.filter_tests - before <= 8 + 5


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_stored_semantic_search_with_a_rare_filter_reads_only_the_vectors_that_may_pass(
    kind: str, durable_url: Any
) -> None:
    """A semantic store search with a filter 6 of 600 rows pass reads those 6 rows' vectors, none other, and ranks as Memory.search."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(600)
    where = {"agent": "reviewer"}
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        store.index_embeddings("s", embedder)
        backend = store.backend
        read: list[int] = []
        pages, rows_of = backend.vector_pages, backend.vectors_of

        def counted_pages(*args: Any) -> Any:
            for page in pages(*args):
                read.extend(seq for seq, _ in page)
                yield page

        def counted_rows(*args: Any) -> Any:
            rows = rows_of(*args)
            read.extend(seq for seq, _ in rows)
            return rows

        # The real backend's reads, counted on the way through.
        backend.vector_pages = counted_pages  # type: ignore[method-assign]
        backend.vectors_of = counted_rows  # type: ignore[method-assign]
        hits = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
        seqs = {h.seq: h.item["step"] for h in hits}
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert len(read) == len(set(read)) == 6
    assert set(seqs.values()) <= {7, 107, 207, 307, 407, 507}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_semantic_search_over_vectors_kept_in_memory_walks_their_ranking_for_a_one_percent_filter(
    kind: str, durable_url: Any, backend_calls: Any
) -> None:
    """Once a session's vectors are kept in memory, a semantic search with a filter 1% of 2,000 rows pass walks every cosine's ranking, asks SQL nothing, and ranks as Memory.search."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(2000)
    where = WALKED[kind]
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        store.index_embeddings("s", embedder)
        for _ in range(2):  # the first query at a version reads the vectors, the next keeps them
            store.search("s", "alpha", 3, mode="semantic", embedder=embedder)
        backend = store.backend
        asked = backend_calls(backend, "filter_candidates")
        capped = backend_calls(backend, "filter_few")
        hits = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert asked == capped == []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_one_percent_semantic_filter_over_kept_vectors_reads_only_the_items_that_pass(
    kind: str, durable_url: Any
) -> None:
    """A semantic search over vectors kept in memory with a filter 1% of 2,000 rows pass reads only rows that pass, and ranks as Memory.search."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(2000)
    where = {"agent": "reviewer"}
    with open_store(durable_url(kind)) as store:
        seqs = store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        passing = {
            seq for seq, fields in zip(seqs, session, strict=True) if fields["agent"] == "reviewer"
        }
        backend = store.backend
        read: list[int] = []
        read_seqs = backend.read_seqs
        among_rows = backend.filter_among_rows

        def counted_read(sid: str, wanted: Any) -> Any:
            read.extend(wanted)
            return read_seqs(sid, wanted)

        def counted_among_rows(sid: str, tree: Any, asked: Any) -> Any:
            rows = among_rows(sid, tree, asked)
            read.extend(seq for seq, _ in rows or ())
            return rows

        # The real backend's calls, counted on the way through.
        backend.read_seqs = counted_read  # type: ignore[method-assign]
        backend.filter_among_rows = counted_among_rows  # type: ignore[method-assign]
        hits = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert read
    assert set(read) <= passing


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_semantic_filter_too_rare_for_the_first_ranking_over_kept_vectors_screens_a_longer_one(
    kind: str, durable_url: Any, backend_calls: Any
) -> None:
    """When the first 1,024 cosines hold fewer than k rows that pass, a longer ranking is screened (filter_among) instead of judging the whole session (filter_candidates), and ranks as Memory.search."""
    embedder = HashingEmbedder(32)
    session = [
        {
            "step": i,
            "agent": "reviewer" if i % 1000 == 7 else "host",
            "text": f"alpha beta {i % 13}",
        }
        for i in range(2000)
    ]
    where = WALKED[kind]
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        backend = store.backend
        asked = backend_calls(backend, "filter_candidates")
        capped = backend_calls(backend, "filter_few")
        hits = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert len(hits) == 2
    assert asked == capped == []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_one_percent_semantic_filter_over_kept_vectors_settles_in_two_filter_among_statements(
    kind: str, durable_url: Any, backend_calls: Any
) -> None:
    """A filter 1% of 4,000 rows pass, k=5 over kept vectors: the second slice screened reaches as deep as the pass rate of the first says, so two filter_among_rows statements settle it, ranked as Memory.search."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(4000)
    where = WALKED[kind]
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        backend = store.backend
        asked = backend_calls(backend, "filter_among_rows")
        hits = store.search("s", "beta 7", 5, mode="semantic", where=where, embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 5, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert 1 <= len(asked) <= 2


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_one_percent_semantic_filter_over_kept_vectors_reads_its_items_with_the_screen(
    kind: str, durable_url: Any, backend_calls: Any
) -> None:
    """A filter 1% of 4,000 rows pass over kept vectors: each slice's statement also reads the rows that may pass, so no other read of items follows, ranked as Memory.search."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(4000)
    where = WALKED[kind]
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        backend = store.backend
        reads = backend_calls(backend, "read_seqs")
        hits = store.search("s", "beta 7", 5, mode="semantic", where=where, embedder=embedder)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 5, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert reads == []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_semantic_filter_over_kept_vectors_scores_them_once_however_deep_it_walks(
    kind: str, durable_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter too rare for the first ranking of kept vectors walks a longer one without scoring the vectors again: one product over their rows a query."""
    from agents.memory.search import _item_vectors

    embedder = HashingEmbedder(32)
    session = [
        {"step": i, "agent": "reviewer" if i % 1000 == 7 else "host", "text": f"alpha {i % 13}"}
        for i in range(2000)
    ]
    where = {"agent": "reviewer"}
    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        products: list[int] = []
        product = _item_vectors.cosines

        def counted(matrix: Any, query: Any) -> Any:
            products.append(len(matrix))
            return product(matrix, query)

        # The real product, counted on the way through.
        monkeypatch.setattr(_item_vectors, "cosines", counted)
        hits = store.search("s", "alpha 7", 3, mode="semantic", where=where, embedder=embedder)
        monkeypatch.undo()
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("alpha 7", 3, mode="semantic", where=where, embedder=embedder)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert len(hits) == 2
    assert len(products) == 1


def _semantic_over_kept_vectors(
    postgres_url: str, backend_calls: Any, where: dict[str, Any], k: int, times: int = 1
) -> tuple[list[Any], list[Any], list[Any]]:
    """Search 2,000 reviewer steps on PostgreSQL, vectors kept in memory, for "beta 7" with ``where`` (a filter the GIN index names) ``times`` times, assert the hits and scores are Memory.search's, and return the calls made of filter_candidates, filter_few and filter_among_rows."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(2000)
    with open_store(postgres_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        backend = store.backend
        assert backend.filter_named(Filter(where).tree)
        asked = backend_calls(backend, "filter_candidates")
        capped = backend_calls(backend, "filter_few")
        judged = backend_calls(backend, "filter_among_rows")
        found = [
            store.search("s", "beta 7", k, mode="semantic", where=where, embedder=embedder)
            for _ in range(times)
        ]
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", k, mode="semantic", where=where, embedder=embedder)
    for hits in found:
        assert [(h.item["step"], h.score) for h in hits] == [
            (h.item["step"], h.score) for h in want
        ]
    return asked, capped, judged


@pytest.mark.parametrize(
    "where",
    [
        {"agent": "reviewer"},
        {"agent": {"$in": ["reviewer", "auditor"]}},
        {"agent": "auditor"},
        {"$and": [{"agent": "reviewer"}, {"step": {"$gt": 1000}}]},
    ],
)
@pytest.mark.parametrize("k", [2, 5, 40])  # k = 1: step 7, a reviewer's, leads the first slice
def test_a_semantic_filter_the_postgres_index_names_ranks_only_its_candidates_over_kept_vectors(
    postgres_url: str, backend_calls: Any, where: dict[str, Any], k: int
) -> None:
    """Over vectors kept in memory, a filter PostgreSQL's GIN index names (1% of 2,000 rows, or none) asks the index once for the rows that may pass and scores those alone, judging no slice of the ranking by key; hits and scores are Memory.search's."""
    asked, capped, judged = _semantic_over_kept_vectors(postgres_url, backend_calls, where, k)
    assert len(asked) + len(capped) == 1
    assert judged == []


@pytest.mark.parametrize("where", [{"agent": "host"}, {"agent": {"$in": ["host", "x"]}}])
def test_a_semantic_filter_the_postgres_index_names_that_most_rows_pass_settles_in_the_first_slice(
    postgres_url: str, backend_calls: Any, where: dict[str, Any]
) -> None:
    """Over vectors kept in memory, a filter the GIN index names that 99% of 2,000 rows pass is settled by the first slice of the ranking (one filter_among_rows statement a query); the index is asked once, capped, for the rows that may pass, and not again by the handle that found many pass; hits and scores are Memory.search's."""
    asked, capped, judged = _semantic_over_kept_vectors(postgres_url, backend_calls, where, 5, 3)
    assert asked == []
    assert len(capped) == 1
    assert len(judged) == 3


WALKED: dict[str, dict[str, Any]] = {
    "sqlite": {"agent": "reviewer"},
    "postgres": {"agent": {"$nin": ["host"]}},
}
"""A filter the reviewer's steps pass that no index names (PostgreSQL's GIN index names ``$eq``, whose rows it then ranks alone)."""


def reviewer_session(n: int) -> list[dict[str, Any]]:
    """Return ``n`` steps of which 1% (every 100th, from step 7) the reviewer took, texts "alpha beta {i % 13}"."""
    return [
        {"step": i, "agent": "reviewer" if i % 100 == 7 else "host", "text": f"alpha beta {i % 13}"}
        for i in range(n)
    ]


def keep_vectors_in_memory(store: Any, embedder: HashingEmbedder) -> None:
    """Index a session's vectors and query it twice, so that the next query finds them kept in memory."""
    store.index_embeddings("s", embedder)
    for _ in range(2):  # the first query at a version reads the vectors, the next keeps them
        store.search("s", "alpha", 3, mode="semantic", embedder=embedder)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_filter_among_holds_filter_candidates_among_the_seqs_asked(
    kind: str, durable_url: Any
) -> None:
    """filter_among(seqs) holds filter_candidates restricted to seqs (None with it, but empty for no seqs), more only for rows holding arrays or objects, and keeps every row among them that passes."""
    with open_store(durable_url(kind)) as store:
        counter = iter(range(10**6))

        @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(
            rows=st.lists(items(), min_size=1, max_size=8),
            where=filters(),
            picks=st.lists(st.integers(0, 9), max_size=10),
        )
        @example(rows=[{"text": " alpha"}], where={"step": 1e300}, picks=[])  # not judged in SQL
        def check(rows: list[dict[str, Any]], where: dict[str, Any], picks: list[int]) -> None:
            session = f"s{next(counter)}"
            seqs = store.append(session, [MemoryItem(**fields) for fields in rows])
            among = sorted({seqs[0] + pick for pick in picks})  # some the session does not hold
            compiled = Filter.of(where)
            assert compiled is not None
            every = store.backend.filter_candidates(session, compiled.tree)
            some = store.backend.filter_among(session, compiled.tree, among)
            if every is None:  # not judged in SQL: no answer, but for no seqs at all
                assert some == (set() if not among else None)
                return
            # Both sound, not always the same set: filter_among's SQL condition keeps rows
            # holding JSON arrays or objects, which no range passes and the leaf tables never name.
            assert every & set(among) <= some <= set(among)
            held = dict(zip(seqs, rows, strict=True))
            assert all(
                any(isinstance(value, (list, dict)) for value in held[seq].values())
                for seq in some - every
            )
            passing = {seq for seq, fields in zip(seqs, rows, strict=True) if model(fields, where)}
            assert passing & set(among) <= some

        check()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_stored_semantic_search_with_a_rare_filter_it_cannot_narrow_reads_the_vectors_once(
    kind: str, durable_url: Any
) -> None:
    """A semantic store search over parts with a filter SQL cannot judge scores every vector once, not once per longer ranking, and ranks as Memory.search."""
    embedder = HashingEmbedder(32)
    session = reviewer_session(600)

    def where(item: MemoryItem) -> bool:
        return bool(item["agent"] == "reviewer")

    with open_store(durable_url(kind)) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        store.index_embeddings("s", embedder)
        backend = store.backend
        passes: list[str] = []
        pages = backend.vector_pages

        def counted_pages(*args: Any) -> Any:
            passes.append(args[0])
            yield from pages(*args)

        # The real backend's reads, counted on the way through.
        backend.vector_pages = counted_pages  # type: ignore[method-assign]
        hits = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
        got = [(h.item["step"], h.score) for h in hits]
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
    assert got == [(h.item["step"], h.score) for h in want]
    assert passes == ["s"]


# -- SQL narrowing of dotted paths -------------------------------------------------------

nested_values = st.one_of(
    scalars,
    st.sampled_from(
        [
            "red",
            "re\x00d",
            [1, 2],
            ["red"],
            (1, 2),
            dt.date(2024, 1, 1),
            2**70,
            float("nan"),
            float("inf"),
            {"b": 1},
            {"b": "red"},
            {"b": True},
            {1: "x", "b": 2},  # non-string keys: the codec tags the dict
            {"$kv": "x", "b": 2},  # a "$kv" key: tagged too
            {"v": 2},
        ]
    ),
)
DOTTED = ("value.a", "value.a.b", "value.v", "value.$kv", "value.0", "value.a.v")


@st.composite
def nested_items(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {"text": "alpha"}
    choice = draw(st.integers(0, 3))
    if choice == 0:
        fields["value"] = draw(st.dictionaries(st.sampled_from(["a", "v", "0"]), nested_values))
    elif choice == 1:
        fields["value"] = draw(nested_values)
    elif choice == 2:  # a dict the codec tags, holding a path SQL would otherwise follow
        fields["value"] = {1: "x", "a": draw(nested_values)}
    if draw(st.booleans()):
        fields[draw(st.sampled_from(DOTTED))] = draw(nested_values)  # a whole name with dots
    return fields


def dotted_filters() -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.dictionaries(st.sampled_from(DOTTED), conditions(), min_size=1, max_size=2)
    return st.one_of(leaf, st.builds(lambda parts: {"$or": parts}, st.lists(leaf, min_size=1)))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sql_narrowing_of_dotted_paths_keeps_every_row_that_passes(
    kind: str, durable_url: Any
) -> None:
    """For dotted paths into nested values (tagged, lists, missing, bools), SQL keeps every row the Python filter keeps."""
    with open_store(durable_url(kind)) as store:
        counter = iter(range(10**6))

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(rows=st.lists(nested_items(), min_size=1, max_size=6), where=dotted_filters())
        def check(rows: list[dict[str, Any]], where: dict[str, Any]) -> None:
            session = f"s{next(counter)}"
            seqs = store.append(session, [MemoryItem(**fields) for fields in rows])
            compiled = Filter.of(where)
            assert compiled is not None
            passing = {
                seq
                for seq, fields in zip(seqs, rows, strict=True)
                if compiled(MemoryItem(**fields))
            }
            assert passing == {
                seq for seq, fields in zip(seqs, rows, strict=True) if model(fields, where)
            }
            allowed = store.backend.filter_candidates(session, compiled.tree)
            asked = candidates_query(compiled.tree, session, postgres=kind == "postgres")
            assert (allowed is None) == (asked is None)  # SQL ran (no error made it give up)
            assert allowed is None or passing <= allowed

        check()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sql_narrows_a_dotted_path_to_the_rows_that_match(kind: str, durable_url: Any) -> None:
    """A filter on a nested value (LangGraph's ``value.color``) is judged in SQL: only matching rows are read."""
    colors = ["red", "blue", True, 1, None, 2.5]
    with open_store(durable_url(kind)) as store:
        seqs = store.append("s", [MemoryItem(value={"color": c}) for c in colors])
        for where, want in (
            ({"value.color": "red"}, [seqs[0]]),
            ({"value.color": True}, [seqs[2]]),
            ({"value.color": {"$gte": 1}}, [seqs[3], seqs[5]]),
            ({"value.color": {"$ne": "red"}}, seqs[1:]),
            ({"value.shade": "red"}, []),
        ):
            compiled = Filter.of(where)
            assert compiled is not None
            assert store.backend.filter_candidates("s", compiled.tree) == set(want), where


def test_store_tail_with_where_is_the_last_items_that_pass(store_url: str) -> None:
    """``Store.tail(n, where=)`` gives the newest ``n`` items that pass, oldest first, on every store."""
    import random

    rng = random.Random(30)
    pool: list[Any] = [None, True, 1, 2.5, "red", "blue", [1], (1, 2), {1: "x"}, "re\x00d"]
    session: list[dict[str, Any]] = []
    for i in range(400):
        value = {"color": rng.choice(pool)} if rng.random() < 0.8 else rng.choice(pool)
        session.append({"step": i, "value": value, "n": rng.choice(pool)})
    with open_store(store_url) as store:
        seqs = store.append("s", [MemoryItem(**fields) for fields in session])
        for where in (
            {"value.color": "red"},
            {"value.color": {"$ne": "red"}},
            {"value.color": {"$gte": 1}},
            {"n": True, "value.color": {"$in": [None, "blue"]}},
            {"value.color.x": 1},
            {"step": {"$gte": 395}},
        ):
            compiled = Filter.of(where)
            assert compiled is not None
            passing = [
                seq
                for seq, fields in zip(seqs, session, strict=True)
                if compiled(MemoryItem(**fields))
            ]
            for n in (1, 3, 50, 1000):
                got = [record.seq for record in store.tail("s", n, where=where)]
                assert got == passing[-n:], (where, n)
        assert store.tail("s", 2, steps=[5, 6, 7], where={"step": {"$lte": 6}}) == store.tail(
            "s", 2, steps=[5, 6]
        )


# -- a rare keyword filter scores only the rows that may pass --------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_keyword_among_scores_rows_as_keyword_top_does(kind: str, durable_url: Any) -> None:
    """Backend.keyword_among gives any chosen rows the (score, seq) keyword_top gives them, in its order, with the whole session's statistics."""
    from agents.memory.search import Tokenizer

    words = ("alpha", "beta", "gamma", "delta", "omega")
    with open_store(durable_url(kind)) as store:
        sid = f"s{uuid.uuid4().hex[:8]}"

        @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(
            texts=st.lists(st.lists(st.sampled_from(words), max_size=6), min_size=1, max_size=40),
            query=st.lists(st.sampled_from((*words, "missing")), min_size=1, max_size=4),
            chosen=st.sets(st.integers(0, 45)),
        )
        def check(texts: list[list[str]], query: list[str], chosen: set[int]) -> None:
            store.delete_session(sid)
            store.append(sid, [MemoryItem(step=i, text=" ".join(t)) for i, t in enumerate(texts)])
            seqs = [row.seq for row in store.records(sid)]
            terms = Tokenizer()(" ".join(query))
            picked = [*sorted(seqs[i] for i in chosen if i < len(seqs)), 10**9]
            every = store.backend.keyword_top(sid, terms, len(seqs) + 1)
            assert every is not None
            want = [(score, seq) for score, seq in every if seq in picked]
            assert store.backend.keyword_among(sid, terms, picked) == want

        check()


def two_reviewer_steps() -> list[dict[str, Any]]:
    """Return 4,000 steps of which 2 (steps 7 and 2007) the reviewer took, texts "alpha beta {i % 13}"."""
    return [
        {
            "step": i,
            "agent": "reviewer" if i % 2000 == 7 else "host",
            "text": f"alpha beta {i % 13}",
        }
        for i in range(4000)
    ]


def every_score_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Return a list that gets, for each later cosine of every row of a kept vector table (``Vectors.every_score``, still answering), the table's number of slots."""
    scored: list[int] = []
    every_score = Vectors.every_score

    def counted(self: Any, query: Any) -> Any:
        scored.append(len(self.key_at))
        return every_score(self, query)

    monkeypatch.setattr(Vectors, "every_score", counted)
    return scored


def test_a_rare_keyword_filter_on_sqlite_scores_only_the_rows_that_may_pass(
    durable_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SQLite keyword search with a filter 2 of 4,000 rows pass, asked again, ranks no session, scores those 2 rows only, and gives Memory.search's hits and scores."""
    session = two_reviewer_steps()
    where = {"agent": "reviewer"}
    with open_store(durable_url("sqlite")) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        store.search("s", "beta 7", 3, where=where)  # asked once: the ranking walked
        backend = store.backend
        rankings: list[int] = []
        scored: list[int] = []
        top, among = backend.keyword_top, SQLiteKeywordIndex.among

        def counted_top(sid: str, terms: Any, k: int) -> Any:
            rankings.append(k)
            return top(sid, terms, k)

        def counted_among(self: Any, sid: str, terms: Any, seqs: Any) -> Any:
            scored.extend(seqs)
            return among(self, sid, terms, seqs)

        # The real backend's calls, counted on the way through.
        backend.keyword_top = counted_top  # type: ignore[method-assign]
        monkeypatch.setattr(SQLiteKeywordIndex, "among", counted_among)
        hits = store.search("s", "beta 7", 3, where=where)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, where=where)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert rankings == []
    assert len(scored) == 2


def filter_statements(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[list[int]]]:
    """Count the SQL that judges filters, on the way through to the real statements: the cap of each whole-session judgement (``filter_few``), and the rows of each judgement by row (``filter_among``)."""
    wholes: list[int] = []
    rows: list[list[int]] = []
    few, among = SQLRows.filter_few, SQLRows.filter_among

    def counted_few(self: Any, sid: str, tree: Any, most: int) -> Any:
        wholes.append(most)
        return few(self, sid, tree, most)

    def counted_among(self: Any, sid: str, tree: Any, seqs: Any) -> Any:
        rows.append(list(seqs))
        return among(self, sid, tree, seqs)

    monkeypatch.setattr(SQLRows, "filter_few", counted_few)
    monkeypatch.setattr(SQLRows, "filter_among", counted_among)
    return wholes, rows


def test_a_one_percent_keyword_filter_on_sqlite_judges_only_the_rows_its_handle_wrote_since(
    durable_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SQLite keyword search with a filter 1% of 2,000 rows pass judges the session in SQL once, when asked again; after its handle appends, updates or deletes, only the rows written are judged again; after another handle's write, the session again when asked twice; hits always Memory.search's."""
    session = reviewer_session(2000)
    where = {"agent": "reviewer"}
    wholes, rows = filter_statements(monkeypatch)
    url = durable_url("sqlite")
    memory = Memory(MemoryItem(**fields) for fields in session)

    def same(store: Any) -> None:
        hits = store.search("s", "beta 7", 5, where=where)
        want = memory.search("beta 7", 5, where=where)
        assert [(h.item["step"], h.score) for h in hits] == [
            (h.item["step"], h.score) for h in want
        ]

    with open_store(url) as store, open_store(url) as other:
        store.append("s", [MemoryItem(**fields) for fields in session])
        same(store)
        assert (len(wholes), rows) == (0, [])  # asked once: the ranking walked
        same(store)
        same(store)
        assert (len(wholes), rows) == (1, [])
        new = {"step": 2000, "agent": "reviewer", "text": "alpha beta 7"}
        (seq,) = store.append("s", [MemoryItem(**new)])
        memory.add_memory_item(MemoryItem(**new))
        same(store)
        assert (len(wholes), rows) == (1, [[seq]])
        seqs = [row.seq for row in store.records("s")]
        with store.batch("s") as batch:
            batch.update({seqs[7]: MemoryItem(step=7, agent="host", text="alpha beta 7")})
            batch.delete([seqs[107]])
        memory.delete_memory_item(7)
        memory.delete_memory_item(107)
        memory.add_memory_item(MemoryItem(step=7, agent="host", text="alpha beta 7"))
        same(store)
        assert (len(wholes), sorted(rows[-1])) == (1, sorted([seqs[7], seqs[107]]))
        other.delete_seqs("s", [seqs[207]])
        memory.delete_memory_item(207)
        same(store)
        assert len(wholes) == 1  # asked once since another handle wrote: walked
        same(store)
        assert len(wholes) == 2


def test_a_bulk_append_has_an_sqlite_handle_judge_its_filters_whole_again(
    durable_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its handle appends more rows than it notes one by one (4,096), a kept filter is judged over the whole session again, not row by row, and the hits are Memory.search's."""
    session = reviewer_session(200)
    where = {"agent": "reviewer"}
    wholes, rows = filter_statements(monkeypatch)
    with open_store(durable_url("sqlite")) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        for _ in range(2):  # asked again: judged and kept
            store.search("s", "beta 7", 5, where=where)
        assert len(wholes) == 1
        more = reviewer_session(4300)[200:]
        store.append("s", [MemoryItem(**fields) for fields in more])
        hits = store.search("s", "beta 7", 5, where=where)
    memory = Memory(MemoryItem(**fields) for fields in [*session, *more])
    want = memory.search("beta 7", 5, where=where)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert (len(wholes), rows) == (2, [])


def test_a_rare_semantic_filter_on_sqlite_asked_again_scores_only_the_vectors_of_its_rows(
    durable_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SQLite semantic search over kept part vectors with a filter 2 of 4,000 rows pass walks its ranking when asked once, judges the session once when asked again, and then judges no row and scores only the vectors of those rows; hits and scores Memory.search's each time."""
    session = two_reviewer_steps()
    where = {"agent": "reviewer"}
    embedder = HashingEmbedder(32)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = [
        (h.item["step"], h.score)
        for h in memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
    ]
    wholes, rows = filter_statements(monkeypatch)
    among_rows = SQLRows.filter_among_rows

    def counted_rows(self: Any, sid: str, tree: Any, seqs: Any) -> Any:
        rows.append(list(seqs))  # judged row by row, read with their data
        return among_rows(self, sid, tree, seqs)

    monkeypatch.setattr(SQLRows, "filter_among_rows", counted_rows)
    with open_store(durable_url("sqlite")) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        scored = every_score_calls(monkeypatch)

        def hits() -> list[tuple[int, float]]:
            found = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
            return [(h.item["step"], h.score) for h in found]

        assert hits() == want
        assert (len(wholes), len(scored)) == (0, 1)  # asked once: every cosine, the ranking walked
        assert rows
        del rows[:]
        assert hits() == want
        assert (len(wholes), len(scored), rows) == (1, 1, [])  # asked again: judged, kept
        assert hits() == want
        assert (len(wholes), len(scored), rows) == (1, 1, [])  # the answer kept: two rows scored


def test_a_semantic_filter_postgres_indexes_scores_only_its_rows_and_a_common_one_is_asked_once(
    durable_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL semantic search over kept part vectors with a filter the GIN index names scores only the vectors of the rows it names where few pass (no cosine of every row); a filter most rows pass is asked of the index once by the handle, then walked; hits and scores Memory.search's each time."""
    session = reviewer_session(2000)
    embedder = HashingEmbedder(32)
    memory = Memory(MemoryItem(**fields) for fields in session)
    wholes, _ = filter_statements(monkeypatch)
    with open_store(durable_url("postgres")) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        scored = every_score_calls(monkeypatch)

        def same(where: dict[str, Any]) -> None:
            found = store.search("s", "beta 7", 5, mode="semantic", where=where, embedder=embedder)
            want = memory.search("beta 7", 5, mode="semantic", where=where, embedder=embedder)
            assert [(h.item["step"], h.score) for h in found] == [
                (h.item["step"], h.score) for h in want
            ]

        for asked in (1, 2):
            same({"agent": "reviewer"})
            assert (len(wholes), scored) == (asked, [])  # the index asked, 20 rows scored
        for _ in range(2):
            same({"agent": "host"})
            assert len(wholes) == 3  # found common once: not asked again
        assert len(scored) == 2  # the common filter's ranking walked each time


def test_a_semantic_filter_on_memory_scores_only_the_vectors_of_the_rows_its_value_index_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A memory:// semantic search over kept part vectors with a filter 2 of 4,000 rows pass, or none, scores only the vectors of the rows the value index names, from the first ask; a filter most rows pass walks the ranking; hits and scores Memory.search's."""
    session = two_reviewer_steps()
    embedder = HashingEmbedder(32)
    memory = Memory(MemoryItem(**fields) for fields in session)
    with open_store(f"memory://{uuid.uuid4().hex}") as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        keep_vectors_in_memory(store, embedder)
        scored = every_score_calls(monkeypatch)
        for where in ({"agent": "reviewer"}, {"agent": "auditor"}, {"agent": "host"}):
            found = store.search("s", "beta 7", 3, mode="semantic", where=where, embedder=embedder)
            want = memory.search("beta 7", 3, mode="semantic", where=where, embedder=embedder)
            assert [(h.item["step"], h.score) for h in found] == [
                (h.item["step"], h.score) for h in want
            ]
        assert scored == [4000]  # only the common filter scored every row


SQLITE_RARE: Final = [
    {"agent": "reviewer"},
    {"meta.owner": "reviewer"},
    {"team": {"$in": ["red", "blue"]}},
    {"n": {"$gte": 3, "$lt": 5}},
    {"tier": "gold"},
    {"agent": "auditor"},
]
"""Filters a few rows of :func:`sqlite_rows` pass at most (one of them none, one at most a row or two)."""


@st.composite
def sqlite_rows(draw: st.DrawFn) -> dict[str, Any]:
    """Return one row of a session that the filters of :data:`SQLITE_RARE` pass rarely."""
    rare = draw(st.integers(0, 15)) == 0
    return {
        "text": " ".join(draw(st.lists(st.sampled_from(["alpha", "beta", "gamma"]), max_size=3)))
        + " alpha",
        "agent": "reviewer" if rare else "host",
        "meta": {"owner": "reviewer" if draw(st.integers(0, 15)) == 0 else "host"},
        "team": draw(st.sampled_from(["red", "blue", *["grey"] * 14])),
        "n": draw(st.integers(0, 40)),
        "tier": "gold" if draw(st.integers(0, 60)) == 0 else "plain",
    }


writes = st.one_of(
    st.tuples(st.just("append"), st.booleans(), st.lists(sqlite_rows(), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.booleans(), st.lists(st.integers(0, 10**6), max_size=3)),
    st.tuples(st.just("update"), st.booleans(), st.lists(sqlite_rows(), min_size=1, max_size=2)),
)


@pytest.mark.parametrize("mode", ["keyword", "semantic"])
def test_a_rare_filter_on_sqlite_follows_writes_of_its_handle_and_of_another(
    tmp_path: Any, mode: str
) -> None:
    """An SQLite keyword or semantic search with a rare filter gives Memory.search's hits and scores over the live rows, asked again between appends, updates and deletes by its handle and by a second handle."""
    counter = iter(range(10**6))
    embedder = HashingEmbedder(16)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        first=st.lists(sqlite_rows(), min_size=0, max_size=70),
        steps=st.lists(writes, max_size=6),
        query=st.sampled_from(["alpha", "beta gamma", "gamma"]),
        k=st.sampled_from([1, 3, 10]),
    )
    def check(first: list[dict[str, Any]], steps: list[Any], query: str, k: int) -> None:
        url = f"sqlite://{tmp_path / f'{next(counter)}.db'}"
        live: dict[int, dict[str, Any]] = {}
        numbered = iter(range(10**6))

        def append(store: Any, rows: list[dict[str, Any]]) -> None:
            rows = [{**row, "step": next(numbered)} for row in rows]
            seqs = store.append("s", [MemoryItem(**row) for row in rows])
            live.update(zip(seqs, rows, strict=True))

        def same(store: Any) -> None:
            memory = Memory(MemoryItem(**live[seq]) for seq in sorted(live))
            for where in SQLITE_RARE:
                for _ in range(2):  # asked again: judged in SQL once and kept
                    found = memory.search(query, k, mode=mode, where=where, embedder=embedder)
                    want = [(h.item["step"], h.score) for h in found]
                    got = store.search("s", query, k, mode=mode, where=where, embedder=embedder)
                    assert [(h.item["step"], h.score) for h in got] == want, where

        with open_store(url) as store, open_store(url) as other:
            append(store, [*first, {"text": "alpha"}])
            same(store)
            for action, by_other, what in steps:
                writer = other if by_other else store
                seqs = sorted(live)
                if action == "append":
                    append(writer, what)
                elif action == "delete" and seqs:
                    gone = {seqs[i % len(seqs)] for i in what}
                    writer.delete_seqs("s", gone)
                    for seq in gone:
                        del live[seq]
                elif action == "update" and seqs:
                    changed = {seqs[(7 * i) % len(seqs)]: row for i, row in enumerate(what)}
                    with writer.batch("s") as batch:
                        batch.update(
                            {
                                seq: MemoryItem(**{**row, "step": live[seq]["step"]})
                                for seq, row in changed.items()
                            }
                        )
                    for seq, row in changed.items():
                        live[seq] = {**row, "step": live[seq]["step"]}
                same(store)

    check()


RARE_FILTERS: list[dict[str, Any]] = [
    {"agent": "reviewer"},
    {"meta.owner": "reviewer"},
    {"team": {"$in": ["red", "blue"]}},
    {"weight": {"$gte": 0.25, "$lt": 0.26}},
]


@pytest.mark.parametrize("where", RARE_FILTERS)
def test_a_rare_keyword_filter_on_postgresql_is_one_ranking_of_the_rows_that_may_pass(
    postgres_url: str, where: dict[str, Any]
) -> None:
    """On PostgreSQL a keyword search with a filter 8 of 2,000 rows pass is one statement (keyword_top_where), no other ranking, and gives Memory.search's hits and scores."""
    session = []
    for i in range(2000):
        rare = i % 250 == 7
        session.append(
            {
                "step": i,
                "agent": "reviewer" if rare else "host",
                "meta": {"owner": "reviewer" if rare else "host"},
                "team": ("red" if i % 2 else "blue") if rare else "grey",
                "weight": 0.255 if rare else 0.5 + i / 10_000,
                "text": f"alpha beta {i % 13}",
            }
        )
    with open_store(postgres_url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        backend = store.backend
        calls: list[str] = []
        top, among, top_where = (
            backend.keyword_top,
            backend.keyword_among,
            backend.keyword_top_where,
        )

        def counted_top(sid: str, terms: Any, k: int) -> Any:
            calls.append("top")
            return top(sid, terms, k)

        def counted_among(sid: str, terms: Any, seqs: Any) -> Any:
            calls.append("among")
            return among(sid, terms, seqs)

        def counted_top_where(sid: str, terms: Any, k: int, tree: Any) -> Any:
            calls.append("top_where")
            return top_where(sid, terms, k, tree)

        # The real backend's calls, counted on the way through.
        backend.keyword_top = counted_top  # type: ignore[method-assign]
        backend.keyword_among = counted_among  # type: ignore[method-assign]
        backend.keyword_top_where = counted_top_where  # type: ignore[method-assign]
        hits = store.search("s", "beta 7", 3, where=where)
        ranked = store.ranking("s", "beta 7", 3, where=where)
    memory = Memory(MemoryItem(**fields) for fields in session)
    want = memory.search("beta 7", 3, where=where)
    assert [(h.item["step"], h.score) for h in hits] == [(h.item["step"], h.score) for h in want]
    assert [score for _, score in ranked] == [h.score for h in want]
    assert calls == ["top_where", "top_where"]


def test_keyword_top_where_ranks_the_rows_that_may_pass_as_keyword_top_does(
    postgres_url: str,
) -> None:
    """PostgreSQL's keyword_top_where gives the (score, seq) keyword_top gives the rows SQL finds may pass, best first, every ranked row that passes among them; filter_candidates names every row that passes."""
    from agents.memory.search import Tokenizer

    with open_store(postgres_url) as store:
        counter = iter(range(10**6))

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(
            session=st.lists(items(), min_size=1, max_size=30),
            where=filters(),
            query=st.lists(st.sampled_from(["alpha", "beta", "gamma", "nil"]), min_size=1),
            k=st.integers(1, 8),
        )
        def check(session: list[dict[str, Any]], where: Any, query: list[str], k: int) -> None:
            sid = f"s{next(counter)}"
            seqs = store.append(sid, [MemoryItem(**fields) for fields in session])
            compiled = Filter.of(where)
            assert compiled is not None
            terms = Tokenizer()(" ".join(query))
            got = store.backend.keyword_top_where(sid, terms, k, compiled.tree)
            allowed = store.backend.filter_candidates(sid, compiled.tree)
            assert (got is None) == (allowed is None)
            if got is None or allowed is None:
                return
            every = store.backend.keyword_top(sid, terms, len(seqs) + 1)
            may = store.backend.keyword_top_where(sid, terms, len(seqs) + 1, compiled.tree)
            assert every is not None
            assert may is not None
            # The condition keyword_top_where writes and the rows filter_candidates
            # names are both sound, not the same set (JSON arrays, which no range
            # passes, are kept by the one and never named by the other).
            kept = {seq for _, seq in may}
            assert got == may[:k] == [hit for hit in every if hit[1] in kept][:k]
            assert may == [hit for hit in every if hit[1] in kept]
            passing = {
                seq
                for seq, fields in zip(seqs, session, strict=True)
                if compiled(MemoryItem(**fields))
            }
            ranked = {seq for _, seq in every}
            assert passing & ranked <= kept
            assert passing <= allowed

        check()


def test_a_rare_filter_on_a_dotted_path_is_asked_only_of_the_items_that_may_pass() -> None:
    """In RAM, a filter on a dotted path that 9 of 2,000 items pass is asked of those 9 and of the hits, and keeps the model's hits, also after changes."""
    from agents.memory.search import search_index

    memory = Memory(
        MemoryItem(step=i, meta={"owner": "reviewer" if i % 250 == 0 else "host"}, text="alpha")
        for i in range(2000)
    )
    memory[1]["meta.owner"] = "reviewer"  # a field of the whole dotted name is read first
    index = search_index(memory)
    for where in ({"meta.owner": "reviewer"}, {"meta.owner": {"$in": ["reviewer"]}}):
        everything = memory.search("alpha", len(memory))
        before = index.filter_tests
        hits = memory.search("alpha", 5, where=where)
        want = [h for h in everything if model(h.item.to_dict(), where)][:5]
        assert [(h.item["step"], h.score) for h in hits] == [
            (h.item["step"], h.score) for h in want
        ]
        assert index.filter_tests - before <= 9 + 5
        memory[0]["meta"] = {"owner": "host"}  # a change reaches the filed values
        memory[250]["meta"] = "reviewer"  # no dict on the way: the path holds nothing


def test_sql_narrowing_by_text_keeps_rows_that_spell_a_string_another_way(tmp_path: Any) -> None:
    """SQLite skips unparsed the rows whose text lacks a filter's string, yet keeps the rows that spell it with escapes, as Memory.search does."""
    import sqlite3

    session: list[dict[str, Any]] = [
        {"step": i, "agent": "host", "text": "alpha"} for i in range(200)
    ]
    session[20]["agent"] = ("reviewer",)  # tagged by the codec: judged in SQL as before
    session[40]["agent"] = "reviewer"
    session[60]["meta"] = {"owner": "reviewer/a"}
    url = f"sqlite://{tmp_path / 'store.db'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(**fields) for fields in session])
        seqs = [row.seq for row in store.records("s")]
    with sqlite3.connect(tmp_path / "store.db") as con:  # rows another writer spelled with escapes
        for step, old, new in ((80, '"host"', '"revi\\u0065wer"'), (60, "r/a", "r\\/a")):
            con.execute(
                "UPDATE kvmemory_items SET data = CAST(replace(CAST(data AS TEXT), ?, ?) AS BLOB)"
                " WHERE seq = ?",
                (old, new, seqs[step]),
            )
    with open_store(url) as store:
        items = {row.seq: row.item for row in store.records("s", on_unknown_class="base")}
        memory = Memory(items[seq] for seq in seqs)
        for where in (
            {"agent": "reviewer"},
            {"agent": {"$in": ["reviewer", "nobody"]}},
            {"meta.owner": "reviewer/a"},
            {"$or": [{"agent": "reviewer"}, {"meta.owner": "reviewer/a"}]},
        ):
            keep = store.backend.filter_candidates("s", Filter(where).tree)
            assert keep is not None
            passing = {seq for seq in seqs if Filter(where)(items[seq])}
            assert passing <= keep, where
            assert len(keep) <= len(passing) + 2, where  # and the rows it cannot judge
            got = [h.item["step"] for h in store.search("s", "alpha", 5, where=where)]
            assert got == [h.item["step"] for h in memory.search("alpha", 5, where=where)]


def test_a_rare_numeric_range_is_asked_only_of_the_items_that_may_pass() -> None:
    """In RAM, {"$gte": a, "$lt": b} on a float field that 1 item in 100 holds is asked of those items and the hits, and keeps the model's hits."""
    import random

    from agents.memory.search import search_index

    rng = random.Random(7)
    memory = Memory(MemoryItem(step=i, weight=rng.random(), text="alpha") for i in range(3000))
    memory[5]["weight"] = "0.255"  # a string is never in a numeric span
    memory[6]["weight"] = float("nan")
    index = search_index(memory)
    everything = memory.search("alpha", len(memory))
    for where in (
        {"weight": {"$gte": 0.25, "$lt": 0.26}},
        {"$and": [{"weight": {"$gt": 0.5}}, {"weight": {"$lte": 0.51}}]},
        {"step": range(2990, 3100)},
    ):
        before = index.filter_tests
        hits = memory.search("alpha", 5, where=where)
        want = [h for h in everything if model(h.item.to_dict(), where)][:5]
        assert [h.item["step"] for h in hits] == [h.item["step"] for h in want], where
        assert index.filter_tests - before <= 60, where
