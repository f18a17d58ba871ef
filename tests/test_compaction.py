"""Compaction: what a window leaves out becomes one stored summary, extended, never rebuilt."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory import CorruptSessionError, Memory, MemoryItem
from agents.memory.exceptions import ArgumentTypeError, BudgetExceededError, InvalidArgumentError
from agents.memory.prompt import (
    Compaction,
    EstimateCounter,
    Key,
    TallySummarizer,
    Window,
    project,
    read_summary,
    select_window,
)
from agents.memory.stores import open_memory

ROOT = pathlib.Path(__file__).resolve().parent.parent
KEYS = ["task", "step", "action", "note"]


class Recorder:
    """A summariser that records each call; its text says how many steps it holds and the last one."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, list[Any]]] = []
        self.returned: list[str] = []

    def __call__(self, previous: str | None, records: Sequence[Mapping[str, Any]]) -> str:
        steps = [r["step"] for r in records]
        self.calls.append((previous, steps))
        held = int(previous.split()[0]) if previous else 0
        text = f"{held + len(steps)} steps through step {steps[-1]}"
        self.returned.append(text)
        return text


def step(i: int) -> MemoryItem:
    """Return step ``i`` with about 15 tokens of text."""
    return MemoryItem(step=i, action=f"click button {i}", note="the dialog is still open")


def window(summarizer: Any, budget: int = 120, **options: Any) -> Window:
    """Return a compacting window over text tokens with the first item pinned."""
    return Window(max_text_tokens=budget, pin_first=1, compaction=Compaction(summarizer, **options))


def play(memory: Memory, start: int, stop: int, win: Window) -> list[Any]:
    """Choose a window before each new step from ``start`` to ``stop``; return the results."""
    results = []
    for i in range(start, stop):
        results.append(select_window(memory, win, keys=KEYS))
        memory.add_memory_item(step(i))
    return results


def covered_or_shown(result: Any, upto: int) -> list[int]:
    """Return the steps below ``upto`` that are neither in the prompt nor in the summary."""
    shown = {r["step"] for r in result.records if "step" in r}
    covered = set(result.summary.steps) if result.summary else set()
    return [s for s in range(upto) if s not in shown and s not in covered]


def test_left_out_items_are_folded_once_each_in_order() -> None:
    """Every step that falls out reaches the summariser exactly once, oldest first, with the summary so far."""
    summarizer = Recorder()
    memory = Memory([MemoryItem(task="book a flight")])
    results = play(memory, 0, 60, window(summarizer))
    seen = [s for _, steps in summarizer.calls for s in steps]
    assert seen == sorted(set(seen))
    assert seen == list(range(len(seen)))
    previous_texts = [previous for previous, _ in summarizer.calls]
    assert previous_texts == [None, *summarizer.returned[:-1]]
    assert summarizer.returned[-1] == f"{len(seen)} steps through step {seen[-1]}"
    assert all(covered_or_shown(r, i) == [] for i, r in enumerate(results))
    assert all(r.dropped == 0 for r in results)


def test_summary_is_pinned_after_the_task_and_before_the_newest_steps() -> None:
    """The prompt holds the task, then the summary record, then the newest steps in order."""
    memory = Memory([MemoryItem(task="book a flight")])
    play(memory, 0, 30, window(Recorder()))
    result = select_window(memory, window(Recorder()), keys=KEYS)
    assert result.records[0] == {"task": "book a flight"}
    assert set(result.records[1]) == {"summary"}
    steps = [r["step"] for r in result.records[2:]]
    assert steps == list(range(steps[0], 30))
    assert result.summary is not None
    assert result.summary.steps == tuple(range(steps[0]))


def test_compaction_folds_down_to_keep_so_it_runs_every_few_steps() -> None:
    """With keep=0.5 a compaction leaves half the budget, so the summariser is not called at every step."""
    summarizer = Recorder()
    memory = Memory([MemoryItem(task="t")])
    play(memory, 0, 100, window(summarizer, keep=0.5))
    assert 1 < len(summarizer.calls) < 40
    assert all(len(steps) >= 2 for _, steps in summarizer.calls[1:])


def test_summary_cost_is_charged_to_the_window() -> None:
    """The summary's text counts against the text budget, and the window never exceeds it."""
    memory = Memory([MemoryItem(task="t")])
    results = play(memory, 0, 80, window(TallySummarizer(), budget=150))
    assert all(r.text_tokens <= 150 for r in results)
    last = results[-1]
    counter = EstimateCounter()
    assert last.summary is not None
    assert last.text_tokens >= counter.count(last.summary.text)


def test_window_without_items_left_out_stores_no_summary() -> None:
    """A window that holds everything calls no summariser and leaves the metadata alone."""
    summarizer = Recorder()
    memory = Memory([MemoryItem(task="t"), step(0), step(1)])
    result = select_window(memory, window(summarizer, budget=10_000), keys=KEYS)
    assert (result.summary, summarizer.calls, memory.metadata) == (None, [], {})


def test_summary_round_trips_through_a_session_file(tmp_path: pathlib.Path) -> None:
    """The summary lives in the session metadata, so saving and loading the memory keeps it."""
    summarizer = Recorder()
    memory = Memory([MemoryItem(task="t")])
    play(memory, 0, 40, window(summarizer))
    memory.save(tmp_path / "s.json")
    again = Memory.from_file(tmp_path / "s.json")
    assert read_summary(again) == read_summary(memory)
    assert read_summary(again) is not None


def test_summary_is_durable_in_a_reopened_sqlite_store(tmp_path: pathlib.Path) -> None:
    """Closed and reopened, a SQLite session continues its summary with only the new items."""
    url = f"sqlite://{tmp_path / 'run.db'}"
    first = Recorder()
    with open_memory(url, "run") as memory:
        memory.add_memory_item(MemoryItem(task="t"))
        play(memory, 0, 40, window(first))
        stored = read_summary(memory)
    assert stored is not None
    second = Recorder()
    with open_memory(url, "run") as memory:
        assert read_summary(memory) == stored
        results = play(memory, 40, 80, window(second))
    assert second.calls
    assert second.calls[0][0] == stored.text
    assert min(s for _, steps in second.calls for s in steps) == stored.steps[-1] + 1
    assert covered_or_shown(results[-1], 79) == []


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
def test_summary_is_durable_in_every_store(kind: str, durable_url: Any) -> None:
    """Each durable store returns the stored summary, with the steps it covers, to a new handle."""
    if kind == "postgres":
        pytest.importorskip("psycopg")
    url = durable_url(kind)
    with open_memory(url, "run") as memory:
        memory.add_memory_item(MemoryItem(task="t"))
        play(memory, 0, 40, window(Recorder()))
        stored = read_summary(memory)
    assert stored is not None
    assert stored.items == len(stored.steps) > 0
    with open_memory(url, "run") as memory:
        assert read_summary(memory) == stored
        result = select_window(memory, window(Recorder()), keys=KEYS)
    assert result.summary is not None
    assert result.summary.steps[: len(stored.steps)] == stored.steps  # extended, not rebuilt
    assert result.summary.items == stored.items + result.summarized


CONTINUE = textwrap.dedent(
    """
    import sys
    from agents.memory import MemoryItem
    from agents.memory.prompt import Compaction, Window, read_summary, select_window
    from agents.memory.stores import open_memory

    calls = []

    def summarizer(previous, records):
        calls.append((previous, [r["step"] for r in records]))
        held = int(previous.split()[0]) if previous else 0
        return f"{held + len(records)} steps through step {records[-1]['step']}"

    window = Window(max_text_tokens=120, pin_first=1, compaction=Compaction(summarizer))
    with open_memory(sys.argv[1], "run") as memory:
        before = read_summary(memory)
        for i in range(40, 80):
            select_window(memory, window, keys=["task", "step", "action", "note"])
            memory.add_memory_item(
                MemoryItem(step=i, action=f"click button {i}", note="the dialog is still open")
            )
    first_previous, first_steps = calls[0]
    assert first_previous == before.text, (first_previous, before.text)
    assert first_steps[0] == before.steps[-1] + 1, (first_steps, before.steps)
    print("ok", len(calls))
    """
)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_summary_continues_in_a_second_process(
    kind: str, durable_url: Any, tmp_path: pathlib.Path
) -> None:
    """Another process opening the session extends the stored summary from where it stopped."""
    if kind == "postgres":
        pytest.importorskip("psycopg")
    url = durable_url(kind)
    with open_memory(url, "run") as memory:
        memory.add_memory_item(MemoryItem(task="t"))
        play(memory, 0, 40, window(Recorder()))
    script = tmp_path / "continue.py"
    script.write_text(CONTINUE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "error"}
    done = subprocess.run(
        [sys.executable, str(script), url], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
    with open_memory(url, "run") as memory:
        summary = read_summary(memory)
        result = select_window(memory, window(Recorder()), keys=KEYS)
    assert summary is not None
    assert list(summary.steps) == list(range(len(summary.steps)))
    assert covered_or_shown(result, 80) == []


def test_compaction_needs_a_memory() -> None:
    """A compacting window over a plain list is refused, naming the fix."""
    with pytest.raises(ArgumentTypeError, match="must be a Memory"):
        select_window([step(0), step(1)], window(Recorder(), budget=10))


def test_summarizer_returning_no_string_is_refused_and_stores_nothing() -> None:
    """A summariser that returns a non-string raises, and the metadata stays as it was."""
    memory = Memory([MemoryItem(task="t"), *(step(i) for i in range(30))])
    with pytest.raises(ArgumentTypeError, match="not a str"):
        select_window(memory, window(lambda previous, records: None), keys=KEYS)
    assert memory.metadata == {}


def test_damaged_stored_summary_is_named() -> None:
    """Metadata under the summary key that is not a summary raises CorruptSessionError naming the key."""
    memory = Memory([MemoryItem(task="t"), step(0)], metadata={"kvmemory.summary": [1, 2]})
    with pytest.raises(CorruptSessionError, match=r"'kvmemory\.summary'"):
        select_window(memory, window(Recorder()), keys=KEYS)


def test_summary_too_large_for_the_window_is_named() -> None:
    """A summary that alone breaks the budget raises BudgetExceededError mentioning the summary."""
    memory = Memory([MemoryItem(task="t"), *(step(i) for i in range(30))])
    with pytest.raises(BudgetExceededError, match="summary"):
        select_window(memory, window(lambda p, r: "x" * 2000), keys=KEYS)


def test_compaction_options_are_validated() -> None:
    """A summariser that is not callable, or keep outside 0..1, is refused."""
    with pytest.raises(ArgumentTypeError, match="callable"):
        Compaction("summarise")  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(InvalidArgumentError, match="keep"):
        Compaction(Recorder(), keep=1.5)


def test_project_with_a_compacting_window_returns_the_summary_record() -> None:
    """project(budget=window) compacts too, and returns the summary among the records."""
    memory = Memory([MemoryItem(task="t"), *(step(i) for i in range(30))])
    records = project(memory, KEYS, budget=window(TallySummarizer()))
    assert any("summary" in r for r in records)


def test_tally_summarizer_extends_its_own_text() -> None:
    """TallySummarizer counts across calls by reading its previous text, and names recent errors."""
    tally = TallySummarizer(recent=2)
    text = tally(
        None, [{"step": 1, "action": "click"}, {"step": 2, "action": "type", "error": "x"}]
    )
    text = tally(text, [{"step": 3, "action": "click", "error": "not found, scrolled"}])
    assert text.splitlines() == [
        "Earlier: 3 items, steps 1 to 3.",
        "- action: click x2, type x1",
        "- notable: step 2 error: x, step 3 error: not found; scrolled",
    ]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=60),
    budget=st.integers(60, 300),
    keep=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
)
def test_property_every_step_is_shown_or_summarised(
    sizes: list[int], budget: int, keep: float
) -> None:
    """Whatever the item sizes, budget and keep, each earlier step is in the prompt or the summary, once."""
    summarizer = Recorder()
    memory = Memory([MemoryItem(task="t")])
    win = window(summarizer, budget=budget, keep=keep)
    for i, size in enumerate(sizes):
        try:
            result = select_window(memory, win, keys=KEYS)
        except BudgetExceededError:
            return  # the summary grew past the budget: named, not silently wrong
        assert covered_or_shown(result, i) == []
        assert result.text_tokens <= budget
        memory.add_memory_item(MemoryItem(step=i, action="a" * size, note=""))
    seen = [s for _, steps in summarizer.calls for s in steps]
    assert len(seen) == len(set(seen))


class Collector:
    """A summariser that records the 'text' field of every record it folds."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, previous: str | None, records: Sequence[Mapping[str, Any]]) -> str:
        self.seen.extend(r["text"] for r in records)
        return f"{len(self.seen)} folded"


@settings(max_examples=60, deadline=None)
@given(
    stepped=st.lists(st.sampled_from(["int", "none", "null", "list"]), min_size=1, max_size=50),
    budget=st.integers(40, 200),
    keep=st.sampled_from([0.0, 0.5]),
)
def test_property_items_with_and_without_steps_fold_once(
    stepped: list[str], budget: int, keep: float
) -> None:
    """Items with a step, without one, or mixed, each reach the summariser at most once, oldest first."""
    summarizer = Collector()
    memory = Memory([MemoryItem(task="t")])
    win = window(summarizer, budget=budget, keep=keep)
    for i, kind in enumerate(stepped):
        result = select_window(memory, win, keys=["task", Key("step", optional=True), "text"])
        shown = [r["text"] for r in result.records if "text" in r]
        assert summarizer.seen + shown == [f"m{k}" for k in range(i)]
        fields: dict[str, Any] = {"text": f"m{i}"}
        if kind != "none":
            # A step that can be looked up, or one that cannot (None, a list).
            fields["step"] = {"int": i, "null": None, "list": [i]}[kind]
        memory.add_memory_item(MemoryItem(**fields))


def test_deleting_summarised_items_keeps_the_rest_covered() -> None:
    """Old items deleted after they were folded (keep_last, max_items) do not make others count as covered."""
    summarizer = Recorder()
    memory = Memory([MemoryItem(task="t")])
    play(memory, 0, 40, window(summarizer))
    summary = read_summary(memory)
    assert summary is not None
    memory.delete_items([memory[i] for i in range(1, 11)])  # the oldest ten steps
    results = play(memory, 40, 60, window(summarizer))
    seen = [s for _, steps in summarizer.calls for s in steps]
    assert seen == list(range(len(seen)))
    assert covered_or_shown(results[-1], 59) == []


def _bench_module() -> Any:
    path = ROOT / "benchmarks" / "bench_compaction.py"
    spec = importlib.util.spec_from_file_location("bench_compaction", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_benchmark_session_keeps_its_promises(tmp_path: pathlib.Path) -> None:
    """The 200-step benchmark session: last 5 steps complete, the rest summarised, 25x fewer tokens."""
    bench = _bench_module()
    out = bench.run_session(200, tmp_path, EstimateCounter(), 2000)  # checks every prompt itself
    windowed = sum(c.tokens for c in out["windowed"])
    full = sum(c.tokens for c in out["full"])
    assert full >= 25 * windowed
    summary = read_summary(out["memory"])
    assert summary is not None
    assert sum(out["calls"]) == summary.items


def test_agent_history_window_compacts_from_the_first_prompt() -> None:
    """BasicAgent.history_window with a compacting window: no warning on the first prompt, then a summary."""
    import warnings

    from agents.agent import BasicAgent

    agent = BasicAgent("app")
    agent.inject_context([{"task": "save the report"}])
    win = Window(max_text_tokens=120, max_images=2, pin_first=1, compaction=Compaction(Recorder()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = agent.history_window(win, KEYS)
        for i in range(30):
            agent.record_step(action=f"click button {i}", note="the dialog is still open")
            last = agent.history_window(win, KEYS)
    assert first.records == ({"task": "save the report"},)
    assert last.summary is not None
    assert last.records[0] == {"task": "save the report"}
    assert covered_or_shown(last, 30) == []
