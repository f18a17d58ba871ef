"""smolagents in and out, against the real smolagents package."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("smolagents")

from PIL import Image  # smolagents brings Pillow; both are checked for above
from smolagents import ChatMessage, CodeAgent, Model
from smolagents.memory import ActionStep, TaskStep
from smolagents.models import MessageRole
from smolagents.monitoring import LogLevel, Timing
from smolagents.utils import AgentToolExecutionError
from smolagents_agent import FIRST_TASK, NEXT_TASK, add, make_agent, message_dicts

from agents.integrations.smolagents import (
    SmolagentsRecorder,
    full_steps,
    restore_steps,
    succinct_steps,
)
from agents.memory import CorruptSessionError, Memory, MemoryItem, MissingDependencyError
from agents.memory.stores import open_memory

HERE = Path(__file__).resolve().parent


def test_run_continues_after_a_process_restart(tmp_path: Path) -> None:
    """Two steps in one process, restore in another, one more step: the model sees what an uninterrupted run shows it."""
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    script = str(HERE / "smolagents_agent.py")
    first = subprocess.run([sys.executable, script, "first", url, "run-1"], cwd=HERE)
    assert first.returncode == -signal.SIGKILL
    out = tmp_path / "third.json"
    replay = subprocess.run(
        [sys.executable, script, "restore", url, "run-1", str(out)],
        check=True,
        cwd=HERE,
        capture_output=True,
        text=True,
    )

    agent, model = make_agent()
    agent.run(FIRST_TASK)
    agent.run(NEXT_TASK, reset=False)
    assert len(model.inputs) == 3
    assert json.loads(out.read_text(encoding="utf-8")) == message_dicts(model.inputs[2])
    shown = [line.strip() for line in replay.stdout.splitlines()]
    for text in ["I will add the numbers.", "I have the sum.", "Finishing."]:
        assert text in shown  # agent.replay() shows the restored steps and the new one


def test_restored_steps_equal_the_originals() -> None:
    """Every step object comes back equal to the one the agent held (errors and timing included)."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_agent([recorder])
    agent.run(FIRST_TASK)
    agent.run(NEXT_TASK, reset=False)
    system, steps = restore_steps(memory)
    assert system == agent.memory.system_prompt.system_prompt
    assert [type(step) for step in steps] == [type(step) for step in agent.memory.steps]
    for restored, original in zip(steps, agent.memory.steps, strict=True):
        assert restored.dict() == original.dict()
        if isinstance(original, ActionStep):
            assert restored.model_input_messages == original.model_input_messages
            assert restored.model_output_message == original.model_output_message
            assert restored.timing == original.timing
            assert restored.token_usage == original.token_usage


def test_steps_are_items_with_kind_run_and_step() -> None:
    """Each step is one item: kind, run, and the action's step number under the step key."""
    memory = Memory(step_key="Step")
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    assert [(item["kind"], item["run"]) for item in memory] == [
        ("system_prompt", 1),
        ("task", 1),
        ("action", 1),
        ("action", 1),
    ]
    assert memory.steps() == [1, 2]
    assert memory[2]["tool_calls"] == [
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
    ]
    assert memory[2]["token_usage"] == {"input_tokens": 20, "output_tokens": 7}
    assert memory[3]["is_final_answer"] is True


def test_reset_starts_a_new_run() -> None:
    """agent.run with reset starts a new run; restore takes the newest unless told."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    agent.run(NEXT_TASK)
    assert sorted({item["run"] for item in memory}) == [1, 2]
    _, newest = restore_steps(memory)
    _, first = restore_steps(memory, run=1)
    assert newest[0].task == NEXT_TASK
    assert first[0].task == FIRST_TASK


def test_images_are_kept_as_png_bytes() -> None:
    """Task and observation images are stored as PNG bytes and come back pixel for pixel."""
    memory = Memory()
    image = Image.new("RGB", (3, 2), (10, 200, 30))
    agent, model = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK, images=[image])
    stored = memory[1]["task_images"][0]
    assert stored.startswith(b"\x89PNG")
    _, steps = restore_steps(memory)
    assert isinstance(steps[0], TaskStep)
    assert steps[0].task_images[0].tobytes() == image.tobytes()
    assert steps[1].observations_images[0].tobytes() == image.tobytes()
    again = steps[2].model_input_messages
    original = model.inputs[1]
    assert [m.role for m in again] == [m.role for m in original]
    image_parts = [
        p for m in again if isinstance(m.content, list) for p in m.content if p["type"] == "image"
    ]
    assert image_parts
    assert all(p["image"].tobytes() == image.tobytes() for p in image_parts)


def test_errors_keep_type_and_message() -> None:
    """A tool's failure is stored with its type and message and restored as that smolagents class."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run("Use the broken tool.")
    failed = agent.memory.steps[1]
    assert isinstance(failed.error, AgentToolExecutionError)
    assert memory[2]["error"] == {
        "type": "AgentToolExecutionError",
        "message": failed.error.message,
    }
    _, steps = restore_steps(memory)
    assert type(steps[1].error) is AgentToolExecutionError
    assert str(steps[1].error) == str(failed.error)
    assert steps[1].to_messages() == failed.to_messages()


def test_unknown_error_type_becomes_agent_error() -> None:
    """An error class smolagents does not define comes back as AgentError with the same message."""
    memory = Memory(
        [
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing={"start_time": 0.0, "end_time": None},
                error={"type": "MyError", "message": "m"},
            )
        ]
    )
    (step,) = restore_steps(memory)[1]
    assert type(step.error).__name__ == "AgentError"
    assert step.error.message == "m"


def test_views_of_any_session() -> None:
    """full_steps and succinct_steps read any session, like smolagents' views."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    full = full_steps(memory)
    assert [step["kind"] for step in full] == ["task", "action", "action"]
    assert "model_input_messages" in full[1]
    assert all("model_input_messages" not in step for step in succinct_steps(memory))
    assert succinct_steps([MemoryItem(step=1, action="click")]) == [{"step": 1, "action": "click"}]


def test_a_damaged_item_is_named() -> None:
    """An item that cannot be read back as a step raises CorruptSessionError naming it."""
    memory = Memory([MemoryItem(kind="action", run=1, step=1, timing={"start": 1})])
    with pytest.raises(CorruptSessionError, match=r"Field 'timing' of item 0 \(action step\)"):
        restore_steps(memory)
    memory = Memory([MemoryItem(kind="task", run=1)])
    with pytest.raises(CorruptSessionError, match=r"item 0 \(task step\) lacks fields"):
        restore_steps(memory)


def test_missing_smolagents_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without smolagents, restoring raises MissingDependencyError naming kvmemory[smolagents]."""
    monkeypatch.setitem(sys.modules, "smolagents", None)
    with pytest.raises(MissingDependencyError, match=r"kvmemory\[smolagents\]"):
        restore_steps(Memory())


def test_image_field_that_is_not_bytes_is_named() -> None:
    """An image list holding something other than bytes raises CorruptSessionError naming the field."""
    memory = Memory([MemoryItem(kind="task", run=1, task="t", task_images=["not bytes"])])
    with pytest.raises(
        CorruptSessionError, match=r"field 'task_images' holds str, not image bytes"
    ):
        restore_steps(memory)


def test_importing_the_adapters_loads_no_framework() -> None:
    """Importing agents.memory and the adapters does not import smolagents or Pillow."""
    code = (
        "import sys, agents.memory, agents.integrations.smolagents, agents.integrations.ufo; "
        "print(sorted(m for m in ('smolagents', 'PIL') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_recorder_needs_the_agent() -> None:
    """Called without the agent, the recorder says how to register it."""
    with pytest.raises(TypeError, match=r"register it as a step callback"):
        SmolagentsRecorder(Memory())(object())


def test_attach_records_planning_steps(tmp_path: Path) -> None:
    """attach registers the recorder for every step kind; planning steps are recorded and restored."""
    with open_memory(f"sqlite:///{tmp_path / 'a.db'}", "plan") as memory:
        recorder = SmolagentsRecorder(memory)
        agent, _ = make_agent()
        agent.planning_interval = 5
        recorder.attach(agent)
        recorder.attach(agent)
        agent.run(FIRST_TASK)
        kinds = [item["kind"] for item in memory]
    assert kinds == ["system_prompt", "task", "planning", "action"]
    with open_memory(f"sqlite:///{tmp_path / 'a.db'}", "plan") as memory:
        new, _ = make_agent()
        SmolagentsRecorder(memory).restore(new)
        assert [type(step).__name__ for step in new.memory.steps] == [
            "TaskStep",
            "PlanningStep",
            "ActionStep",
        ]
        assert new.memory.steps[1].plan == agent.memory.steps[1].plan


def test_restore_of_an_empty_session_leaves_the_agent_alone() -> None:
    """Restoring nothing keeps the agent's memory, and its first run is run 1."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_agent()
    recorder.restore(agent)
    agent.run(FIRST_TASK)
    assert {item["run"] for item in memory} == {1}


class _CodeModel(Model):
    """Writes code: call add and print, then return the printed sum as the final answer."""

    def generate(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> ChatMessage:
        if messages[-1].role == MessageRole.TOOL_RESPONSE:
            code = "final_answer(int(5))"
        else:
            code = "result = add(a=2, b=3)\nprint(result)"
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Thought: go on.\n<code>\n{code}\n</code>"
        )


def test_code_agent_steps_round_trip() -> None:
    """A CodeAgent's steps (code actions, execution logs, action output) come back equal."""
    memory = Memory()
    agent = CodeAgent(
        tools=[add],
        model=_CodeModel(),
        step_callbacks=[SmolagentsRecorder(memory)],
        verbosity_level=LogLevel.OFF,
    )
    assert agent.run(FIRST_TASK) == 5
    assert memory[3]["code_action"] == "final_answer(int(5))"
    assert memory[3]["action_output"] == 5
    _, steps = restore_steps(memory)
    assert [step.dict() for step in steps] == [step.dict() for step in agent.memory.steps]
    fresh = CodeAgent(tools=[add], model=_CodeModel(), verbosity_level=LogLevel.OFF)
    SmolagentsRecorder(memory).restore(fresh)
    assert fresh.write_memory_to_messages() == agent.write_memory_to_messages()


def test_image_action_output_is_stored_as_png() -> None:
    """A PIL image in another field (a code agent's action_output) is stored as PNG bytes."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_agent()
    step = ActionStep(
        step_number=1,
        timing=Timing(start_time=0.0, end_time=1.0),
        action_output=Image.new("L", (1, 1)),
    )
    recorder.write(agent, step)
    assert memory[-1]["action_output"].startswith(b"\x89PNG")
