"""Tests for agents.agent: BasicAgent, step callbacks and replay."""

from __future__ import annotations

import importlib.util
import io
import sys
from typing import Any

import attrs
import pytest

import agents.agent
from agents.agent import BasicAgent, drop_old_images, format_replay, replay
from agents.memory import MemoryItem, field
from agents.memory.blackboard import Blackboard
from agents.memory.exceptions import (
    CallbackError,
    FieldValidationError,
    MissingDependencyError,
    UnmatchedKeyWarning,
)
from agents.memory.memory import Memory
from agents.memory.prompt import Window

HAS_RICH = importlib.util.find_spec("rich") is not None


class Step(MemoryItem):
    """A typed step used by the tests."""

    step: int
    action: str
    cost: float = field(default=0.0, validator=attrs.validators.ge(0))


def test_public_names_match_all() -> None:
    """agents.agent.__all__ lists exactly the package's public names."""
    public = {name for name in vars(agents.agent) if not name.startswith("_")}
    assert set(agents.agent.__all__) == public - {"basic"}


def test_record_step_numbers_steps() -> None:
    """record_step() gives each step the counter value and moves the counter on."""
    agent = BasicAgent("app")
    agent.record_step(action="open")
    agent.record_step(action="save")
    assert agent.memory.list_content == [
        {"step": 0, "action": "open"},
        {"step": 1, "action": "save"},
    ]
    assert agent.step == 2


def test_record_step_keeps_given_step() -> None:
    """A step field given by the caller is kept."""
    agent = BasicAgent("app")
    assert agent.record_step(step=10, action="x")["step"] == 10


def test_record_step_with_typed_class_validates() -> None:
    """With step_class, record_step() builds typed items and refuses invalid fields."""
    agent = BasicAgent("app", step_class=Step)
    item = agent.record_step(action="open", cost=0.25)
    assert isinstance(item, Step)
    with pytest.raises(FieldValidationError, match="cost"):
        agent.record_step(action="bad", cost=-1.0)


def test_record_step_with_item() -> None:
    """record_step(item, **fields) adds the fields and a step number to the given item."""
    agent = BasicAgent("app")
    item = agent.record_step(MemoryItem(action="open"), note="n")
    assert item.to_dict() == {"action": "open", "note": "n", "step": 0}


def test_refuses_non_item_step_class() -> None:
    """step_class must be a MemoryItem subclass."""
    with pytest.raises(TypeError, match="step_class must be a MemoryItem subclass"):
        BasicAgent("x", step_class=dict)  # type: ignore[arg-type]  # the wrong type is the point


def test_step_counter_setter_validates() -> None:
    """Setting a negative step is refused with the value in the message."""
    agent = BasicAgent("app")
    with pytest.raises(ValueError, match="got -1"):
        agent.step = -1


def test_add_delete_clear_memory() -> None:
    """add_memory, delete_memory and clear_memory change the agent's memory."""
    agent = BasicAgent("app")
    agent.add_memory(MemoryItem(step=1))
    agent.add_memory(MemoryItem(step=2))
    assert agent.delete_memory(1) == 1
    assert agent.memory.list_content == [{"step": 2}]
    agent.clear_memory()
    assert agent.memory.is_empty()


def test_set_memory_from_list_of_dicts_moves_counter() -> None:
    """set_memory_from_list_of_dicts() replaces memory and continues numbering after it."""
    agent = BasicAgent("app")
    agent.set_memory_from_list_of_dicts([{"step": 0}, {"step": 4}, {"note": "x"}])
    assert len(agent.memory) == 3
    assert agent.record_step(action="next")["step"] == 5


def test_set_memory_from_list_of_dicts_is_all_or_nothing() -> None:
    """A bad element leaves the memory as it was."""
    agent = BasicAgent("app")
    agent.record_step(action="keep")
    with pytest.raises(TypeError, match="Element 1"):
        agent.set_memory_from_list_of_dicts([{"step": 0}, "bad"])  # type: ignore[list-item]  # the wrong type is the point
    assert agent.memory.list_content == [{"step": 0, "action": "keep"}]


def test_blackboard_falls_back_to_host() -> None:
    """An agent without its own blackboard uses its host's."""
    host = BasicAgent("host")
    app = BasicAgent("app", host=host)
    assert app.blackboard is host.blackboard


def test_explicit_blackboard_wins() -> None:
    """A blackboard given to the agent is used instead of the host's."""
    board = Blackboard()
    app = BasicAgent("app", host=BasicAgent("host"), blackboard=board)
    assert app.blackboard is board


def test_own_blackboard_is_made_once() -> None:
    """An agent with neither makes its own blackboard once and keeps it."""
    agent = BasicAgent("solo")
    assert agent.blackboard is agent.blackboard


def test_step_callback_runs_with_item_and_agent() -> None:
    """Step callbacks run after each step with the item and the agent."""
    seen: list[tuple[Any, str]] = []
    agent = BasicAgent("app", step_callbacks=[lambda item, a: seen.append((item["step"], a.name))])
    agent.record_step(action="x")
    agent.record_step(action="y")
    assert seen == [(0, "app"), (1, "app")]


def test_step_callback_may_change_memory() -> None:
    """A callback can edit the memory, here by annotating the step it was given."""
    agent = BasicAgent("app")
    agent.add_step_callback(lambda item, a: item.set_value("checked", True))
    agent.record_step(action="x")
    assert agent.memory[0]["checked"] is True


def test_step_callback_error_names_callback_and_step() -> None:
    """A failing callback raises CallbackError naming it and the step; the step stays."""

    def broken(item: MemoryItem, agent: BasicAgent) -> None:
        raise RuntimeError("boom")

    agent = BasicAgent("app", step_callbacks=[broken])
    with pytest.raises(
        CallbackError, match=r"broken of agent 'app' raised RuntimeError: boom \(after step 0\)"
    ):
        agent.record_step(action="x")
    assert len(agent.memory) == 1


def test_drop_old_images_keeps_newest_two_steps() -> None:
    """drop_old_images(2) strips images from steps older than the newest two."""
    agent = BasicAgent("app", step_callbacks=[drop_old_images(2)])
    for n in range(4):
        agent.record_step(action=f"a{n}", screenshot=f"s{n}.png")
    assert [item.get_value("screenshot") for item in agent.memory] == [
        None,
        None,
        "s2.png",
        "s3.png",
    ]
    assert [item.get_value("image_dropped") for item in agent.memory] == [True, True, None, None]


def test_drop_old_images_reads_only_new_items() -> None:
    """After the first call, each call stops at the items an earlier call handled."""
    reads: list[int] = []

    class Spy(Memory):
        def iter_newest(self) -> Any:
            for item in super().iter_newest():
                reads.append(item["step"])
                yield item

    agent = BasicAgent("app", memory=Spy(), step_callbacks=[drop_old_images(1)])
    for n in range(50):
        agent.record_step(action=f"a{n}")
    reads.clear()
    agent.record_step(action="last")
    assert reads == [50, 49, 48]


def test_drop_old_images_refuses_negative_keep() -> None:
    """keep must be >= 0."""
    with pytest.raises(ValueError, match="keep must be an int >= 0, got -1"):
        drop_old_images(-1)


def test_inject_context_adds_plain_items() -> None:
    """inject_context() adds items with common fields, no step number, counter unchanged."""
    agent = BasicAgent("app")
    agent.inject_context(
        [{"task": "earlier task"}, MemoryItem(observation="old")], source="history"
    )
    assert agent.memory.list_content == [
        {"task": "earlier task", "source": "history"},
        {"observation": "old", "source": "history"},
    ]
    assert agent.step == 0


def test_inject_context_is_all_or_nothing() -> None:
    """A bad context element adds nothing."""
    agent = BasicAgent("app")
    with pytest.raises(TypeError, match="Context element 1 is a int"):
        agent.inject_context([{"a": 1}, 3])  # type: ignore[list-item]  # the wrong type is the point
    assert agent.memory.is_empty()


def test_build_history_under_budget() -> None:
    """build_history() returns chosen keys of the newest steps that fit, in order."""
    agent = BasicAgent("app")
    for n in range(20):
        agent.record_step(action=f"act {n}", thought="t" * 30)
    history = agent.build_history(["step", "action"], budget=Window(max_items=3))
    assert history == [
        {"step": 17, "action": "act 17"},
        {"step": 18, "action": "act 18"},
        {"step": 19, "action": "act 19"},
    ]


def test_build_history_warns_about_unmatched_key() -> None:
    """build_history() reports a key no step holds."""
    agent = BasicAgent("app")
    agent.record_step(action="x")
    with pytest.warns(UnmatchedKeyWarning, match="'Action'"):
        agent.build_history(["Action"])


def test_history_window_reports_cost() -> None:
    """history_window() returns the window with its token cost."""
    agent = BasicAgent("app")
    agent.record_step(action="x")
    result = agent.history_window(Window(max_tokens=100), ["action"])
    assert (result.records, result.tokens > 0) == (({"action": "x"},), True)


def session() -> Memory:
    """Return a small session with an error, costs and an image."""
    return Memory(
        [
            MemoryItem(task="book a flight"),
            MemoryItem(step=0, action="open", cost=0.25, screenshot="s0.png"),
            MemoryItem(step=1, action="pay", error="card declined", cost=0.5),
        ],
        session_id="demo",
    )


def test_format_replay_exact_text() -> None:
    """format_replay() prints blocks per item with errors, costs, images and the total."""
    assert format_replay(session()) == (
        "Session demo: 3 items\n"
        "── item 0 (no step) ──\n"
        "  task: book a flight\n"
        "── step 0 ──\n"
        "  action: open\n"
        "  cost: 0.25\n"
        "  images attached: s0.png\n"
        "── step 1 · error ──\n"
        "  action: pay\n"
        "! error: card declined\n"
        "  cost: 0.5\n"
        "total cost: 0.75"
    )


def test_format_replay_puts_agent_and_typed_class_in_header() -> None:
    """The 'agent' field and a typed item's class go into the block header."""
    memory = Memory([Step(step=3, action="open", agent="AppAgent", note="")])
    assert format_replay(memory, title="T") == (
        'T\n── step 3 · AppAgent · Step ──\n  action: open\n  cost: 0.0\n  note: ""\ntotal cost: 0.0'
    )


def test_replay_plain_to_file() -> None:
    """replay(color=False) writes the plain text with a final newline."""
    out = io.StringIO()
    replay(session(), file=out, color=False)
    assert out.getvalue() == format_replay(session()) + "\n"


def test_replay_not_a_tty_is_plain() -> None:
    """replay() without color= writes plain text to a non-terminal."""
    out = io.StringIO()
    replay(session(), file=out)
    assert "\x1b[" not in out.getvalue()


@pytest.mark.skipif(not HAS_RICH, reason="rich not installed")
def test_replay_color_uses_ansi_styles() -> None:
    """replay(color=True) with rich writes ANSI colour codes around the same text."""
    out = io.StringIO()
    replay(session(), file=out, color=True)
    text = out.getvalue()
    assert "\x1b[1;31m! error: card declined" in text
    assert "\x1b[1;36m── step 1 · error ──" in text


def test_replay_color_without_rich_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """replay(color=True) without rich names the extra to install."""
    # A None entry in sys.modules makes `import rich` fail, as if it were not installed.
    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(MissingDependencyError, match=r"kvmemory\[rich\]"):
        replay(session(), file=io.StringIO(), color=True)


def test_agent_replay_titles_with_name() -> None:
    """BasicAgent.replay() prints the agent's name and steps."""
    agent = BasicAgent("app")
    agent.record_step(action="open")
    out = io.StringIO()
    agent.replay(file=out, color=False)
    assert out.getvalue() == "Agent app: 1 item\n── step 0 ──\n  action: open\n"


def test_replay_shows_dates_and_paths_as_text() -> None:
    """Dates, paths and UUIDs read as text in a replay, not as JSON type tags."""
    import datetime as dt
    import pathlib
    import uuid

    from agents.memory import MemoryItem

    item = MemoryItem(
        step=1,
        at=dt.datetime(2024, 5, 1, 9, 0, 7, tzinfo=dt.timezone.utc),
        shot=pathlib.Path("/runs/1.png"),
        run=uuid.UUID("12345678-1234-5678-1234-567812345678"),
    )
    text = format_replay([item], title="t")
    assert "  at: 2024-05-01 09:00:07+00:00\n" in text
    assert "  shot: /runs/1.png\n" in text
    assert "  run: 12345678-1234-5678-1234-567812345678" in text
