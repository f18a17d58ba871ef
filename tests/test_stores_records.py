"""Keyed records against a plain dict model, on every store (hypothesis stateful tests).

The contract suite (``KeyedRecordContract`` in ``agents.memory.stores.testing``)
checks each record call by example; here random sequences of puts, replaces,
deletes, plain appends and reopens run against each store and a dict, and the
store must agree with the dict after every step.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agents.memory import MemoryItem
from agents.memory.stores import Store, open_store

KEYS = st.sampled_from(["a", "ab", "b", "lang", "ä", "a/1", "a b"])
VALUES = st.integers(min_value=0, max_value=9) | st.sampled_from(["giraffe", "penguin swims"])


class RecordMachine(RuleBasedStateMachine):
    """A store's records and a dict ``{key: value}``, changed alike; the order of last puts kept too."""

    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.store: Store = open_store(self.url)
        self.model: dict[str, Any] = {}  # key -> value, in the order of the last put
        self.plain = 0  # items appended with a "key" field, which are not records

    @rule(key=KEYS, value=VALUES)
    def put(self, key: str, value: Any) -> None:
        """Put (or replace) one record."""
        self.store.put_record("s", key, {"value": value})
        self.model.pop(key, None)
        self.model[key] = value

    @rule(records=st.dictionaries(KEYS, VALUES, max_size=3))
    def put_many(self, records: dict[str, Any]) -> None:
        """Put several records in one call."""
        self.store.put_records("s", {key: {"value": value} for key, value in records.items()})
        for key, value in records.items():
            self.model.pop(key, None)
            self.model[key] = value

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        """Delete one record (there or not)."""
        assert self.store.delete_record("s", key) is (key in self.model)
        self.model.pop(key, None)

    @rule(keys=st.lists(KEYS, max_size=3))
    def delete_many(self, keys: list[str]) -> None:
        """Delete several records in one call."""
        gone = {key for key in keys if key in self.model}
        assert self.store.delete_records("s", keys) == len(gone)
        for key in gone:
            del self.model[key]

    @rule(key=KEYS)
    def append_plain(self, key: str) -> None:
        """Append an item holding a "key" field: an item, not a record."""
        self.store.append("s", [MemoryItem(key=key, value="plain")])
        self.plain += 1

    @rule()
    def reopen(self) -> None:
        """Close the handle and open a new one."""
        self.store.close()
        self.store = open_store(self.url)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        """Read one record by key."""
        key = data.draw(st.sampled_from(sorted(self.model)))
        assert self.store.get_record("s", key) == MemoryItem(key=key, value=self.model[key])

    @invariant()
    def agrees_with_the_model(self) -> None:
        """Keys, items and the order of seqs are the model's; plain items stay apart."""
        store = self.store
        assert store.record_keys("s") == sorted(self.model)
        wanted = [*self.model, "missing"]
        assert store.get_records("s", wanted) == {
            key: MemoryItem(key=key, value=value) for key, value in self.model.items()
        }
        records = store.read_records("s")
        by_seq = sorted(records, key=lambda record: record.seq)
        assert [record.key for record in by_seq] == list(self.model)
        assert len(store.read("s")) == len(self.model) + self.plain

    def teardown(self) -> None:
        self.store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonl", "postgres"])
def test_records_agree_with_a_dict(
    kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """Any sequence of puts, replaces, deletes, appends and reopens leaves a store agreeing with a dict."""
    counter = iter(range(10**6))

    def fresh_url() -> str:
        n = next(counter)
        if kind == "memory":
            return f"memory://records-{id(request)}-{n}"
        if kind == "sqlite":
            return f"sqlite://{tmp_path / f'store-{n}.db'}"
        if kind == "jsonl":
            return f"jsonl://{tmp_path / f'logs-{n}'}"
        return ""

    if kind == "postgres":
        request.applymarker(pytest.mark.postgres)
        base = str(request.getfixturevalue("postgres_url"))

    class Machine(RecordMachine):
        def __init__(self) -> None:
            if kind == "postgres":
                with open_store(base) as store:  # a fresh start for every run
                    for sid in store.sessions():
                        store.delete_session(sid)
                type(self).url = base
            else:
                type(self).url = fresh_url()
            super().__init__()

    run_state_machine_as_test(
        Machine, settings=settings(max_examples=25, stateful_step_count=20, deadline=None)
    )


_PUT_IN_CHILD = """
import sys
from agents.memory.stores import open_store
with open_store(sys.argv[1]) as store:
    store.put_record("s", "lang", {"value": sys.argv[2]})
"""


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
def test_a_put_in_another_process_is_read_here(
    kind: str, durable_url: Any, request: pytest.FixtureRequest
) -> None:
    """A record put by another process is read by key through a handle opened before it."""
    import subprocess
    import sys

    if kind == "postgres":
        request.applymarker(pytest.mark.postgres)
    url = durable_url(kind)
    with open_store(url) as store:
        store.put_record("s", "lang", {"value": "fr"})
        for value in ("de", "it"):
            subprocess.run([sys.executable, "-c", _PUT_IN_CHILD, url, value], check=True)
            assert store.get_record("s", "lang") == MemoryItem(key="lang", value=value)
        assert len(store.read("s")) == 1
