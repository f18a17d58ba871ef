"""The store contract: every store means the same thing by the same call.

Each test runs against the in-process store, SQLite, the JSONL log and
PostgreSQL (a real server; see ``conftest.py``).
"""

from __future__ import annotations

import datetime as dt
import enum
import math
import pathlib
import uuid
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from agents.memory import MemoryItem, StoreError, field
from agents.memory.exceptions import InvalidSessionIdError
from agents.memory.stores import BaseStore, open_store


class Color(enum.Enum):
    """An enum for the round-trip test."""

    RED = "red"


class Step(MemoryItem):
    """A typed item for the round-trip test."""

    step: int
    cost: float = field(default=0.0)


def every_codec_type() -> list[MemoryItem]:
    """Return items holding every value type the codec round-trips."""
    return [
        MemoryItem(step=1, text="héllo \u2603", n=2**70, f=1.5, none=None, flag=True),
        MemoryItem(
            step=2,
            when=dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc),
            day=dt.date(2024, 5, 1),
            at=dt.time(8, 15),
            span=dt.timedelta(days=1, seconds=3),
            pair=(1, "a"),
            tags={"x", "y"},
            frozen=frozenset({3}),
            raw=b"\x00\xff",
            buf=bytearray(b"ab"),
        ),
        MemoryItem(
            step=3,
            id=uuid.UUID(int=7),
            price=Decimal("1.10"),
            z=complex(1, -2),
            path=pathlib.PurePosixPath("/a/b.png"),
            color=Color.RED,
            nan=math.nan,
            inf=-math.inf,
            nested={"k": [1, (2, 3)], "$kv": "literal"},
            intkeys={1: "one"},
            nul="a\x00b",
        ),
        MemoryItem(
            step=4, array=np.arange(6, dtype=np.int32).reshape(2, 3), scalar=np.float32(0.5)
        ),
        Step(step=5, cost=2.5, extra="dynamic"),
        MemoryItem(note="an item without a step"),
    ]


def same(a: MemoryItem, b: MemoryItem) -> bool:
    """Return whether two items have the same class and fields (NaN and arrays compared by value)."""
    if type(a) is not type(b) or list(a.keys()) != list(b.keys()):
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)):
                return False
        elif isinstance(x, float) and math.isnan(x):
            if not (isinstance(y, float) and math.isnan(y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def steps_of(items: list[MemoryItem]) -> list[Any]:
    """Return the step field of each item."""
    return [item.get_value("step") for item in items]


@pytest.fixture
def store(store_url: str) -> Any:
    """Yield an open store of each kind."""
    with open_store(store_url) as opened:
        yield opened


def test_store_is_a_base_store(store: BaseStore) -> None:
    """Every opened store is a BaseStore."""
    assert isinstance(store, BaseStore)


def test_round_trip_of_every_codec_type(store: BaseStore) -> None:
    """Items come back with the same classes, values and field order."""
    items = every_codec_type()
    store.append("s", items)
    back = store.read("s")
    assert len(back) == len(items)
    for original, loaded in zip(items, back, strict=True):
        assert same(original, loaded), (original, loaded)


def test_order_is_append_order_across_calls(store: BaseStore) -> None:
    """Single appends and batches read back in the order they were made."""
    store.append("s", [MemoryItem(step=1)])
    store.append("s", [MemoryItem(step=2), MemoryItem(step=3)])
    store.append("s", [MemoryItem(step=0)])
    assert steps_of(store.read("s")) == [1, 2, 3, 0]


def test_seqs_increase_and_after_reads_only_newer(store: BaseStore) -> None:
    """append returns increasing seqs and read(after=) returns only later items."""
    first = store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
    second = store.append("s", [MemoryItem(step=3)])
    assert first[0] < first[1] < second[0]
    assert steps_of(store.read("s", after=first[1])) == [3]


def test_sessions_are_isolated(store: BaseStore) -> None:
    """Items of one session never show in another, even one whose id is a prefix."""
    store.append("run", [MemoryItem(step=1)])
    store.append("run-2", [MemoryItem(step=2)])
    assert steps_of(store.read("run")) == [1]
    assert steps_of(store.read("run-2")) == [2]
    assert store.read("ru") == []


def test_step_filter_matches_like_memory(store: BaseStore) -> None:
    """Step filters match equal numbers (1 and 1.0), strings exactly, and never stepless items."""
    store.append(
        "s",
        [
            MemoryItem(step=1, a=1),
            MemoryItem(step="1", a=2),
            MemoryItem(step=2, a=3),
            MemoryItem(a=4),
            MemoryItem(step=1, a=5),
        ],
    )
    assert [i["a"] for i in store.read("s", steps=[1.0])] == [1, 5]
    assert [i["a"] for i in store.read("s", steps=["1", 2])] == [2, 3]
    assert store.read("s", steps=[]) == []


def test_delete_steps_removes_only_those_steps(store: BaseStore) -> None:
    """delete_steps deletes every item of the steps and reports how many."""
    store.append("s", [MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=1)])
    store.append("other", [MemoryItem(step=1)])
    assert store.delete_steps("s", [1]) == 2
    assert steps_of(store.read("s")) == [2]
    assert store.count("other") == 1


def test_delete_seqs_removes_those_items(store: BaseStore) -> None:
    """delete_seqs deletes exactly the given items and counts only those that existed."""
    seqs = store.append("s", [MemoryItem(step=i) for i in range(4)])
    assert store.delete_seqs("s", [seqs[1], seqs[3], 10**9]) == 2
    assert steps_of(store.read("s")) == [0, 2]


def test_clear_empties_session_but_keeps_it_listed(store: BaseStore) -> None:
    """clear deletes the items, returns their number, and the session stays listed."""
    store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
    assert store.clear("s") == 2
    assert store.count("s") == 0
    assert store.sessions() == ["s"]


def test_sessions_are_listed_sorted_and_deleted(store: BaseStore) -> None:
    """sessions() lists every session sorted; delete_session removes one with its items."""
    for sid in ("b", "a", "c"):
        store.append(sid, [MemoryItem(step=1)])
    assert store.sessions() == ["a", "b", "c"]
    assert store.delete_session("b") is True
    assert store.delete_session("b") is False
    assert store.sessions() == ["a", "c"]
    assert store.read("b") == []


def test_keep_last_trims_oldest(store: BaseStore) -> None:
    """keep_last(n) deletes all but the newest n items."""
    store.append("s", [MemoryItem(step=i) for i in range(5)])
    assert store.keep_last("s", 2) == 3
    assert steps_of(store.read("s")) == [3, 4]
    assert store.keep_last("s", 0) == 2
    assert store.count("s") == 0


def test_expire_deletes_only_items_older_than_age(store: BaseStore) -> None:
    """expire keeps items younger than the age and deletes the older ones."""
    store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
    assert store.expire("s", dt.timedelta(hours=1)) == 0
    assert store.count("s") == 2
    assert store.expire("s", 0) == 2
    assert store.count("s") == 0


def test_reopen_gives_back_the_same_session(store_url: str) -> None:
    """Closing and reopening the store gives back the same items in the same order."""
    items = every_codec_type()
    with open_store(store_url) as first:
        first.append("s", items[:3])
        first.append("s", items[3:])
    with open_store(store_url) as again:
        back = again.read("s")
    assert all(same(a, b) for a, b in zip(items, back, strict=True))


def test_unknown_session_reads_empty(store: BaseStore) -> None:
    """An unknown session reads as empty with count 0."""
    assert store.read("never") == []
    assert store.count("never") == 0


@pytest.mark.parametrize(
    "bad", ["", "../x", "a/b", "a\\b", "it's", 'say"hi', "a b", ".hidden", "x" * 129]
)
def test_invalid_session_id_is_refused_and_changes_nothing(store: BaseStore, bad: str) -> None:
    """A session id with separators, quotes, spaces or bad length is refused before any write."""
    store.append("good", [MemoryItem(step=1)])
    with pytest.raises(InvalidSessionIdError, match="ession id"):
        store.append(bad, [MemoryItem(step=2)])
    assert store.sessions() == ["good"]


def test_reading_without_session_id_is_an_error(store: BaseStore) -> None:
    """Passing None as the session id raises instead of reading every session."""
    store.append("s", [MemoryItem(step=1)])
    with pytest.raises(InvalidSessionIdError, match="must be a string"):
        store.read(None)  # type: ignore[arg-type]


def test_other_step_key_is_refused_and_writes_nothing(store: BaseStore) -> None:
    """Appending with a step key other than the session's raises and writes nothing."""
    store.append("s", [MemoryItem(Step=1)], step_key="Step")
    with pytest.raises(StoreError, match="step_key='Step'"):
        store.append("s", [MemoryItem(step=2)], step_key="step")
    assert store.count("s") == 1


def test_unencodable_value_writes_nothing(store: BaseStore) -> None:
    """A batch with an unencodable value raises and none of the batch is written."""
    from agents.memory import SerializationError

    with pytest.raises(SerializationError, match="'obj' of step 2"):
        store.append("s", [MemoryItem(step=1), MemoryItem(step=2, obj=object())])
    assert store.count("s") == 0


def test_closed_store_refuses_calls(store_url: str) -> None:
    """Calls on a closed store raise StoreError naming the store."""
    opened = open_store(store_url)
    opened.close()
    opened.close()
    with pytest.raises(StoreError, match="is closed"):
        opened.read("s")


def test_project_returns_chosen_keys_in_key_order(store: BaseStore) -> None:
    """project() gives one dict per item with the asked keys in the asked order, {} for none."""
    store.append(
        "s",
        [
            MemoryItem(step=1, action="click", image="x" * 5000, cost=0.30000000000000004),
            Step(step=2, when=dt.date(2024, 5, 1), pair=(1, 2)),
            MemoryItem(note="no step"),
        ],
    )
    assert store.project("s", ["cost", "step", "when", "pair"]) == [
        {"cost": 0.30000000000000004, "step": 1},
        {"cost": 0.0, "step": 2, "when": dt.date(2024, 5, 1), "pair": (1, 2)},
        {},
    ]


def test_project_with_steps_matches_step_filter(store: BaseStore) -> None:
    """project(steps=...) keeps the items read(steps=...) keeps."""
    store.append("s", [MemoryItem(step=s, action=f"a{s}", big="y" * 100) for s in range(5)])
    assert store.project("s", ["action"], steps=[1, 3]) == [{"action": "a1"}, {"action": "a3"}]
    assert store.project("s", ["action"], steps=[]) == []


def test_project_keeps_exact_values(store: BaseStore) -> None:
    """Projected values equal the stored ones: big ints, nested JSON, unicode, keys with quotes."""
    item = MemoryItem(
        step=1,
        pad="p" * 5000,  # a large row, which PostgreSQL cuts down on the server
        n=2**70,
        nested={"a": [1, {"b": None}], "t": True},
        text='héllo \u2603 "quoted"',
        **{'we"ird key': 1.5e300},
    )
    store.append("s", [item])
    plain = MemoryItem(step=2, pad="p" * 5000, f=0.1 + 0.2, ok=False, none=None, e=1e-7)
    store.append("s", [plain])
    keys = ["n", "nested", "text", 'we"ird key', "f", "ok", "none", "e"]
    assert store.project("s", keys) == [item.filter(keys), plain.filter(keys)]


def test_project_rejects_non_string_keys(store: BaseStore) -> None:
    """A non-string key is refused by name."""
    with pytest.raises(TypeError, match=r"string keys, got 3 \(int\)"):
        store.project("s", ["step", 3])  # type: ignore[list-item]  # the wrong type is the point


def test_batch_applies_its_writes_in_one_go(store_url: str) -> None:
    """A write batch stages clear, deletes, updates and appends and applies them on exit."""
    with open_store(store_url) as store:
        first = store.append("s", [MemoryItem(step=1), MemoryItem(step=2), MemoryItem(step=3)])
        with store.batch("s") as batch:
            batch.delete([first[0]])
            batch.update({first[1]: MemoryItem(step=2, note="changed")})
            batch.append([MemoryItem(step=4)])
            assert batch.appended == []
        assert len(batch.appended) == 1
        assert [item.to_dict() for item in store.read("s")] == [
            {"step": 2, "note": "changed"},
            {"step": 3},
            {"step": 4},
        ]


def test_batch_left_by_an_exception_writes_nothing(store_url: str) -> None:
    """A batch whose with-block raises leaves the session as it was."""
    with open_store(store_url) as store:
        store.append("s", [MemoryItem(step=1)])

        def stage_then_fail() -> None:
            with store.batch("s") as batch:
                batch.clear()
                batch.append([MemoryItem(step=9)])
                raise RuntimeError("stop")

        with pytest.raises(RuntimeError, match="stop"):
            stage_then_fail()
        assert steps_of(store.read("s")) == [1]
