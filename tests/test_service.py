"""The session service (agents.service): what every door does with sessions, on every store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory import InvalidQueryError, MemoryItem
from agents.memory.stores import open_store
from agents.service import SessionService, agent_keys_of, cost_keys_of

ROOT = Path(__file__).resolve().parent.parent


def append_elsewhere(url: str, session: str, **fields: object) -> None:
    """Append one item from a separate Python process, as another agent would."""
    script = (
        "import sys, json\n"
        "from agents.memory import MemoryItem\n"
        "from agents.memory.stores import open_store\n"
        "with open_store(sys.argv[1]) as store:\n"
        "    store.append(sys.argv[2], [MemoryItem(**json.loads(sys.argv[3]))])\n"
    )
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", script, url, session, json.dumps(fields)], env=env, check=True
    )


def test_overview_counts_items_agents_cost_and_last_step(store_url: str) -> None:
    """A session's overview sums its cost, names its agents once each, and shows its last step."""
    with open_store(store_url) as store:
        store.append(
            "run-1",
            [
                MemoryItem(step=1, agent="planner", cost=0.25),
                MemoryItem(step=2, agent="coder", cost=0.5),
                MemoryItem(step=3, agent="planner", cost=True),  # a flag, not a cost
                MemoryItem(step="3b", agent="planner"),
            ],
        )
        row = SessionService(store).overview("run-1")
    assert (row.items, row.agents, row.cost, row.last_step) == (4, ("coder", "planner"), 0.75, "3b")
    assert (row.cost_keys, row.agent_keys, row.step_key) == (("cost",), ("agent",), "step")
    assert row.created is not None
    assert row.changed is None


def test_overview_reads_the_keys_the_importer_named(tmp_path: Path) -> None:
    """A session whose metadata names its cost and agent fields (a UFO 2 import) is read by those."""
    with open_store(f"sqlite://{tmp_path / 'ufo.db'}") as store:
        store.append(
            "ufo-1",
            [MemoryItem(Step=1, Agent="HostAgent", Cost=0.5), MemoryItem(Step=2, Agent="AppAgent")],
            step_key="Step",
        )
        store.set_metadata(
            "ufo-1", {"cost_keys": ["Cost"], "agent_keys": ["Agent"]}, step_key="Step"
        )
        row = SessionService(store).overview("ufo-1")
    assert (row.agents, row.cost, row.last_step) == (("AppAgent", "HostAgent"), 0.5, "2")


def test_overview_adds_appends_of_another_process(tmp_path: Path) -> None:
    """Another process's appends show in the next overview, marked as a change."""
    url = f"sqlite://{tmp_path / 'shared.db'}"
    with open_store(url) as store:
        store.append("run-1", [MemoryItem(step=1, cost=1.0, agent="a")])
    with open_store(url, read_only=True) as store:
        service = SessionService(store)
        assert service.overview("run-1").cost == 1.0
        append_elsewhere(url, "run-1", step=2, cost=2.0, agent="b")
        row = service.overview("run-1")
    assert (row.items, row.cost, row.agents, row.last_step) == (2, 3.0, ("a", "b"), "2")
    assert row.changed is not None


def test_overview_recounts_a_session_that_was_rewritten(tmp_path: Path) -> None:
    """A session cleared and refilled is counted afresh, not added to its old figures."""
    url = f"sqlite://{tmp_path / 'store.db'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1, cost=5.0)])
        service = SessionService(store)
        assert service.overview("s").cost == 5.0
        store.clear("s")
        store.append("s", [MemoryItem(step=1, cost=1.0), MemoryItem(step=2, cost=1.0)])
        assert service.overview("s").cost == 2.0


def test_sessions_keep_only_what_the_door_allows(store_url: str) -> None:
    """``allows`` and a prefix narrow the sessions a door lists and describes."""
    with open_store(store_url) as store:
        for name in ("agent-1", "agent-2", "other"):
            store.append(name, [MemoryItem(step=1)])
        service = SessionService(store, allows=lambda name: name != "agent-2")
        assert service.sessions() == ["agent-1", "other"]
        assert service.sessions("agent-") == ["agent-1"]
        assert [row.session_id for row in service.overviews()] == ["agent-1", "other"]


def test_tail_before_a_seq_pages_back_through_the_session(store_url: str) -> None:
    """tail(n, before=seq) gives the n items before that seq, and says whether earlier ones exist."""
    with open_store(store_url) as store:
        seqs = store.append("s", [MemoryItem(step=n) for n in range(1, 26)])
        service = SessionService(store)
        newest = service.tail("s", 10)
        middle = service.tail("s", 10, before=newest.records[0].seq)
        oldest = service.tail("s", 10, before=middle.records[0].seq)
    assert [r.seq for r in newest.records] == seqs[15:]
    assert [r.seq for r in middle.records] == seqs[5:15]
    assert [r.seq for r in oldest.records] == seqs[:5]
    assert (newest.earlier, middle.earlier, oldest.earlier) == (True, True, False)


def test_around_gives_a_seq_with_its_neighbours(store_url: str) -> None:
    """around(seq, n) gives the item at seq with n items each side, and whether more lie beyond."""
    with open_store(store_url) as store:
        seqs = store.append("s", [MemoryItem(step=n) for n in range(1, 26)])
        service = SessionService(store)
        middle = service.around("s", seqs[4], 3)
        start = service.around("s", seqs[1], 3)
        end = service.around("s", seqs[-2], 3)
    assert ([r.seq for r in middle.records], middle.earlier, middle.later) == (
        seqs[1:8],
        True,
        True,
    )
    assert ([r.seq for r in start.records], start.earlier, start.later) == (seqs[:5], False, True)
    assert ([r.seq for r in end.records], end.earlier, end.later) == (seqs[-5:], True, False)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 40),
    at=st.integers(-2, 42),
    n=st.integers(0, 12),
)
def test_around_is_the_slice_of_the_whole_session(size: int, at: int, n: int) -> None:
    """around(seq, n) equals the n items before seq and the n + 1 from it on, cut from the whole session."""
    with open_store("memory://around") as store:
        store.clear("s")
        seqs = store.append("s", [MemoryItem(step=i) for i in range(size)]) if size else []
        seq = seqs[at] if 0 <= at < size else (at if at < 0 else (seqs[-1] + 1 if seqs else 0))
        window = SessionService(store).around("s", seq, n)
    older = [s for s in seqs if s < seq]
    start = max(0, len(older) - n)
    expected = seqs[start : len(older) + n + 1]
    assert [r.seq for r in window.records] == expected
    assert (window.earlier, window.later) == (start > 0, len(older) + n + 1 < size)


def test_after_caps_what_it_returns_and_says_more_wait(store_url: str) -> None:
    """after(seq, limit) returns at most ``limit`` newer items and whether more are waiting."""
    with open_store(store_url) as store:
        seqs = store.append("s", [MemoryItem(step=n) for n in range(1, 8)])
        records, more = SessionService(store).after("s", seqs[1], 3)
    assert ([r.seq for r in records], more) == (seqs[2:5], True)


def test_stats_sum_every_cost_key(tmp_path: Path) -> None:
    """stats() sums the session's own cost keys, or those given."""
    with open_store(f"sqlite://{tmp_path / 's.db'}") as store:
        store.append(
            "s", [MemoryItem(step=1, llm_cost=0.5, cost=1.0), MemoryItem(step=2, cost=2.0)]
        )
        store.set_metadata("s", {"cost_keys": ["llm_cost", "cost"]})
        service = SessionService(store)
        own = service.stats("s")
        given = service.stats("s", ("cost",))
    assert (own.cost, own.cost_keys, own.summary.items) == (3.5, ("llm_cost", "cost"), 2)
    assert (given.cost, given.cost_keys) == (3.0, ("cost",))


def test_search_without_an_embedder_refuses_semantic_modes(tmp_path: Path) -> None:
    """Semantic and hybrid search on a service without an embedder, or an unknown mode, are query errors."""
    with open_store(f"sqlite://{tmp_path / 's.db'}") as store:
        store.append("s", [MemoryItem(step=1, text="open the invoice")])
        service = SessionService(store)
        assert [hit.seq for hit in service.search("s", "invoice", 5)] == [1]
        assert service.modes("s") == ["keyword"]
        with pytest.raises(InvalidQueryError, match="Semantic search needs an embedder"):
            service.search("s", "invoice", 5, mode="semantic")
        with pytest.raises(InvalidQueryError, match="Unknown search mode 'fuzzy'"):
            service.search("s", "invoice", 5, mode="fuzzy")


WORDS = ["invoice", "paid", "menu", "total"]


@pytest.fixture
def foreign_id(tmp_path: Path) -> Path:
    """A SQLite store of sessions agent-1 to agent-3 where another program renamed agent-2 to 'agent 2', an id kvmemory refuses."""
    import sqlite3

    path = tmp_path / "foreign.db"
    with open_store(f"sqlite://{path}") as store:
        for n, name in enumerate(["agent-1", "agent-2", "agent-3"]):
            items = [MemoryItem(step=i, note=" ".join(WORDS[(i + n) % 4 :])) for i in range(4)]
            store.append(name, items)
    with sqlite3.connect(path) as con:
        for table in ("kvmemory_sessions", "kvmemory_items", "kvmemory_search"):
            con.execute(f"UPDATE {table} SET session_id = 'agent 2' WHERE session_id = 'agent-2'")
    con.close()
    return path


def test_a_door_lists_the_sessions_beside_an_id_written_by_other_means(foreign_id: Path) -> None:
    """The sessions a door lists (the live view's list, MCP list_sessions) are the ones a store can name; a foreign id hides none."""
    with open_store(f"sqlite://{foreign_id}", read_only=True) as store:
        assert store.sessions() == ["agent 2", "agent-1", "agent-3"]
        for allows in (None, lambda name: name.startswith("agent")):
            service = SessionService(store, allows=allows)
            assert service.sessions() == ["agent-1", "agent-3"]
            assert [row.session_id for row in service.overviews()] == ["agent-1", "agent-3"]


@pytest.mark.parametrize("scoped", [False, True])
def test_a_search_across_sessions_leaves_out_an_id_written_by_other_means(
    foreign_id: Path, scoped: bool
) -> None:
    """A door's search across the sessions it may show (kvmemory search, the MCP server's) ranks the ones a store can name, as Store.search_sessions ranks them; a foreign id fails nothing."""
    path, words = foreign_id, WORDS

    with open_store(f"sqlite://{path}", read_only=True) as store:
        allows = (lambda name: name.startswith("agent")) if scoped else None
        service = SessionService(store, allows=allows)

        @settings(max_examples=30)
        @given(
            query=st.lists(st.sampled_from(words), min_size=1).map(" ".join),
            k=st.integers(1, 9),
            prefix=st.sampled_from([None, "agent", "agent-3", "zz"]),
        )
        def check(query: str, k: int, prefix: str | None) -> None:
            found = service.search_sessions(query, k, prefix=prefix)
            nameable = [name for name in ("agent-1", "agent-3") if name.startswith(prefix or "")]
            expected = store.search_sessions(query, k, sessions=nameable)
            assert [(h.session_id, h.seq, h.score) for h in found] == [
                (h.session_id, h.seq, h.score) for h in expected
            ]

        check()


names = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3)


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(names, st.none(), st.integers(), st.lists(st.integers()), st.just([])))
def test_key_lists_fall_back_unless_they_are_non_empty_names(value: object) -> None:
    """cost_keys_of and agent_keys_of take a non-empty list of non-empty strings, else the default."""
    metadata = {"cost_keys": value, "agent_keys": value}
    valid = isinstance(value, list) and bool(value) and all(type(v) is str and v for v in value)
    expected = tuple(value) if isinstance(value, list) and valid else None
    assert cost_keys_of(metadata, "c") == (expected or ("c",))
    assert agent_keys_of(metadata, "a") == (expected or ("a",))


def test_import_memory_refuses_a_session_that_holds_items_unless_appending(tmp_path: Path) -> None:
    """import_memory writes into an empty session, refuses a full one naming append=True, and merges metadata."""
    from agents.memory import InvalidSessionIdError, Memory
    from agents.service import import_memory

    url = f"sqlite://{tmp_path / 's.db'}"
    first = Memory([MemoryItem(Step=1)], step_key="Step", metadata={"source": "a"})
    assert import_memory(first, url, "run") == 1
    again = Memory([MemoryItem(Step=2)], step_key="Step", metadata={"more": True})
    with pytest.raises(InvalidSessionIdError, match=r"already holds 1 item;.*append=True"):
        import_memory(again, url, "run")
    seen: list[int] = []
    assert (
        import_memory(again, url, "run", append=True, before_append=lambda _, n: seen.append(n))
        == 1
    )
    with open_store(url) as store:
        assert [item["Step"] for item in store.read("run")] == [1, 2]
        info = store.session_info("run")
        assert info is not None
        assert (info.metadata, info.step_key) == ({"source": "a", "more": True}, "Step")
    assert seen == [1]
