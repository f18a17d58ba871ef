"""smolagents in and out, against the real smolagents package."""

from __future__ import annotations

import copy
import io
import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("smolagents")

from PIL import Image  # smolagents brings Pillow; both are checked for above
from smolagents import ChatMessage, CodeAgent, Model, ToolCallingAgent
from smolagents.memory import ActionStep, AgentMemory, TaskStep
from smolagents.models import MessageRole
from smolagents.monitoring import LogLevel, Timing
from smolagents.utils import AgentToolExecutionError
from smolagents_agent import (
    BROWSE_TASK,
    CODE_FIRST,
    CODE_FIRST_SNIPPETS,
    CODE_NEXT,
    CODE_NEXT_SNIPPETS,
    FIRST_TASK,
    NEXT_TASK,
    ToolScript,
    add,
    broken,
    image_state,
    make_agent,
    make_code_agent,
    message_dicts,
    run_step_by_step,
    take_screenshot,
)

from agents.integrations.smolagents import (
    SmolagentsRecorder,
    UnsavedValueWarning,
    full_steps,
    get_full_steps,
    get_succinct_steps,
    import_smolagents_dump,
    read_smolagents_dump,
    restore_python_state,
    restore_steps,
    succinct_steps,
)
from agents.memory import (
    CorruptSessionError,
    InvalidArgumentError,
    Memory,
    MemoryItem,
    MissingDependencyError,
    StoreError,
)
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


def test_deprecated_views_still_read_any_session() -> None:
    """full_steps and succinct_steps still give the items of any session, with a DeprecationWarning naming their successors."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    with pytest.warns(DeprecationWarning, match=r"full_steps\(\) is deprecated.*get_full_steps"):
        full = full_steps(memory)
    assert [step["kind"] for step in full] == ["task", "action", "action"]
    assert "model_input_messages" in full[1]
    with pytest.warns(DeprecationWarning, match=r"Use get_succinct_steps"):
        succinct = succinct_steps(memory)
    assert all("model_input_messages" not in step for step in succinct)
    with pytest.warns(DeprecationWarning, match=r"succinct_steps\(\) is deprecated"):
        any_items = succinct_steps([MemoryItem(step=1, action="click")])
    assert any_items == [{"step": 1, "action": "click"}]


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


# -- steps changed after they were recorded, callback order ------------------------


def _images(steps: list[Any]) -> list[list[bytes] | None]:
    """Each step's observation images as pixels (None where it has none)."""
    return [
        [image.tobytes() for image in step.observations_images]
        if getattr(step, "observations_images", None)
        else None
        for step in steps
    ]


@pytest.mark.parametrize("form", ["list", "attach"])
def test_later_changes_and_later_callbacks_survive_a_restart(tmp_path: Path, form: str) -> None:
    """With step_callbacks=[recorder, take_screenshot] or attach(), killed and restored, the next model input is the uninterrupted one."""
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    script = str(HERE / "smolagents_agent.py")
    first = subprocess.run([sys.executable, script, "browse-first", url, "b", form], cwd=HERE)
    assert first.returncode == -signal.SIGKILL
    out = tmp_path / "next.json"
    subprocess.run(
        [sys.executable, script, "browse-restore", url, "b", str(out)], check=True, cwd=HERE
    )

    agent, model = make_agent([take_screenshot])
    agent.run(BROWSE_TASK)
    assert _images(agent.memory.steps)[1:] == [None, None, None, ANY_IMAGES, ANY_IMAGES]
    agent.run(NEXT_TASK, reset=False)
    assert json.loads(out.read_text(encoding="utf-8")) == message_dicts(model.inputs[-1])


class _AnyImages:
    """Equal to any non-empty list of images (the screenshots of the last two steps)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, list) and len(other) > 0

    __hash__ = None  # type: ignore[assignment]  # only compared, never hashed


ANY_IMAGES: Any = _AnyImages()


def test_list_form_records_what_later_callbacks_attach() -> None:
    """Listed before take_screenshot, the recorder still writes each step with its screenshot."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory), take_screenshot])
    agent.run(BROWSE_TASK)
    _, steps = restore_steps(memory)
    assert _images(steps) == _images(agent.memory.steps)
    assert _images(steps)[-1] is not None


def test_images_cleared_by_an_earlier_callback_stay_cleared() -> None:
    """attach() after take_screenshot: images the callback clears on older steps are cleared in the record."""
    memory = Memory()
    agent, _ = make_agent([take_screenshot])
    SmolagentsRecorder(memory).attach(agent)
    agent.run(BROWSE_TASK)
    _, steps = restore_steps(memory)
    assert _images(steps) == _images(agent.memory.steps)
    assert [image is None for image in _images(steps)] == [True, True, True, True, False, False]


def test_without_recheck_changes_are_written_at_the_end_of_the_run() -> None:
    """recheck_last=0 compares nothing per step, but the end of agent.run writes what earlier steps became."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory, recheck_last=0), take_screenshot])
    agent.run(BROWSE_TASK)
    _, steps = restore_steps(memory)
    assert _images(steps) == _images(agent.memory.steps)


@pytest.mark.parametrize("ending", ["final answer", "max steps"])
def test_the_last_action_step_ends_the_run_for_the_recorder(ending: str) -> None:
    """Without a FinalAnswerStep callback (smolagents before late 2025), the final or max-steps action step still makes the recorder compare the run's steps."""
    from smolagents.utils import AgentMaxStepsError

    memory = Memory()
    recorder = SmolagentsRecorder(memory, recheck_last=0)
    agent, _ = make_agent([recorder])
    agent.memory.steps.append(TaskStep(task="t"))
    for number in range(1, 4):
        step = ActionStep(step_number=number, timing=Timing(0.0, 1.0), observations=str(number))
        if number == 2:
            agent.memory.steps[1].observations = "changed later"
        if number == 3 and ending == "final answer":
            step.is_final_answer = True
        if number == 3 and ending == "max steps":
            step.error = AgentMaxStepsError("Reached max steps.", agent.logger)
        agent.step_callbacks.callback(step, agent=agent)
        agent.memory.steps.append(step)
    assert memory[2]["observations"] == "changed later"


_EDITS = st.lists(
    st.tuples(
        st.integers(0, 6),  # how many steps back
        st.sampled_from(["text", "clear", "set", "append", "replace"]),
        st.integers(0, 255),
    ),
    max_size=3,
)


@settings(max_examples=30, deadline=None)
@given(st.lists(_EDITS, min_size=1, max_size=10), st.integers(0, 3))
def test_any_later_edits_are_in_the_record_when_the_run_ends(
    edits: list[list[tuple[int, str, int]]], recheck_last: int
) -> None:
    """A callback listed after the recorder edits earlier steps at will: when the run ends, every restored step equals the live one."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory, recheck_last=recheck_last)
    todo: list[list[tuple[int, str, int]]] = list(edits)

    def edit(memory_step: ActionStep, agent: Any) -> None:
        actions = [s for s in agent.memory.steps if isinstance(s, ActionStep)] + [memory_step]
        for back, how, shade in todo.pop(0):
            step = actions[max(len(actions) - 1 - back, 0)]
            image = Image.new("L", (2, 1), shade)
            if how == "text":
                step.observations = f"edited {shade}"
            elif how == "clear":
                step.observations_images = None
            elif how == "set":
                step.observations_images = [image]
            elif step.observations_images and how == "replace":
                step.observations_images[0] = image
            elif step.observations_images:
                step.observations_images.append(image)

    agent, _ = make_agent([recorder, edit])
    agent.memory.steps.append(TaskStep(task="t"))
    for number in range(1, len(edits) + 1):
        step = ActionStep(step_number=number, timing=Timing(0.0, 1.0), observations=str(number))
        step.is_final_answer = number == len(edits)
        agent.step_callbacks.callback(step, agent=agent)
        agent.memory.steps.append(step)
    _, steps = restore_steps(memory)
    assert _images(steps) == _images(agent.memory.steps)
    assert [getattr(s, "observations", None) for s in steps] == [
        getattr(s, "observations", None) for s in agent.memory.steps
    ]


def test_sync_writes_changes_made_between_runs() -> None:
    """A change to an old step between two runs is written by sync()."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory, recheck_last=1)
    agent, _ = make_agent([recorder, take_screenshot])
    agent.run(BROWSE_TASK)
    agent.memory.steps[4].observations_images = None
    agent.memory.steps[1].observations = "edited"
    recorder.sync(agent)
    _, steps = restore_steps(memory)
    assert _images(steps) == _images(agent.memory.steps)
    assert steps[1].observations == "edited"


def test_steps_taken_out_of_the_agent_memory_leave_the_record() -> None:
    """Deleting a step from agent.memory.steps deletes its item at the next callback."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    del agent.memory.steps[1]
    agent.run(NEXT_TASK, reset=False)
    _, steps = restore_steps(memory)
    assert [step.dict() for step in steps] == [step.dict() for step in agent.memory.steps]


class _CountingList(list[Any]):
    """A steps list that counts how many entries its readers go through."""

    visited = 0

    def __iter__(self) -> Any:
        _CountingList.visited += len(self)
        return super().__iter__()

    def __getitem__(self, index: Any) -> Any:
        got = super().__getitem__(index)
        _CountingList.visited += len(got) if isinstance(index, slice) else 1
        return got


def test_each_step_reads_a_bounded_number_of_steps() -> None:
    """Over 400 steps the recorder goes through a few entries of agent.memory.steps per step, not all of them."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_agent([recorder, take_screenshot])
    agent.memory.steps = _CountingList([TaskStep(task=BROWSE_TASK)])
    steps = agent.memory.steps  # the recorder watches a copy, of a subclass of _CountingList
    assert isinstance(steps, _CountingList)
    _CountingList.visited = 0
    for number in range(1, 401):
        step = ActionStep(step_number=number, timing=Timing(0.0, 1.0), observations=str(number))
        reads_before = _CountingList.visited
        agent.step_callbacks.callback(step, agent=agent)
        take_screenshot_reads = len(
            steps
        )  # the screenshot callback walks every step, as the example does
        assert _CountingList.visited - reads_before - take_screenshot_reads <= 3
        reads_before = _CountingList.visited
        steps.append(step)  # the watched list writes the step again: no more reads
        assert _CountingList.visited - reads_before <= 3
    assert len(memory) == 402  # the system prompt, the task and 400 actions
    _, restored = restore_steps(memory)
    assert _images(restored) == _images(steps)


def test_a_refused_write_is_written_at_the_next_step(tmp_path: Path) -> None:
    """A store error at a step is raised, and the next step writes what it did not (system prompt and task included)."""
    path = tmp_path / "locked.db"
    with open_memory(f"sqlite:///{path}?timeout=0.05", "s") as memory:
        agent, _ = make_agent([SmolagentsRecorder(memory)])
        lock = sqlite3.connect(path)
        lock.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError):
            agent.memory.steps.append(TaskStep(task="t"))  # written at once, refused
        assert len(agent.memory.steps) == 1
        first = ActionStep(step_number=1, timing=Timing(0.0, 1.0), observations="1")
        with pytest.raises(StoreError):
            agent.step_callbacks.callback(first, agent=agent)
        lock.rollback()
        lock.close()
        assert len(memory) == 0
        second = ActionStep(step_number=2, timing=Timing(0.0, 1.0), observations="2")
        agent.step_callbacks.callback(second, agent=agent)
        agent.memory.steps.append(second)
        assert [item["kind"] for item in memory] == ["system_prompt", "task", "action"]
        assert memory[2]["observations"] == "2"


def test_without_model_inputs_the_next_model_input_is_the_same() -> None:
    """keep_model_inputs=False writes no model_input_messages, and a restored agent still sends the model what the live one sends."""
    memory = Memory()
    agent, model = make_agent([SmolagentsRecorder(memory, keep_model_inputs=False)])
    agent.run(FIRST_TASK)
    assert all("model_input_messages" not in item for item in memory)
    fresh, fresh_model = make_agent()
    SmolagentsRecorder(memory).restore(fresh)
    assert all(getattr(step, "model_input_messages", None) is None for step in fresh.memory.steps)
    agent.run(NEXT_TASK, reset=False)
    fresh.run(NEXT_TASK, reset=False)
    assert message_dicts(fresh_model.inputs[-1]) == message_dicts(model.inputs[-1])


def test_recheck_last_must_be_a_whole_number() -> None:
    """A negative or non-integer recheck_last is refused, naming the option."""
    with pytest.raises(InvalidArgumentError, match=r"recheck_last must be a whole number"):
        SmolagentsRecorder(Memory(), recheck_last=-1)
    with pytest.raises(InvalidArgumentError, match=r"got 1.5"):
        SmolagentsRecorder(Memory(), recheck_last=1.5)  # type: ignore[arg-type]  # the wrong type is the point
    with pytest.raises(
        InvalidArgumentError, match=r"keep_model_inputs must be True or False, got 'no'"
    ):
        SmolagentsRecorder(Memory(), keep_model_inputs="no")  # type: ignore[arg-type]  # the wrong type is the point


# -- a CodeAgent's Python variables and values that cannot be saved -----------------


def test_code_agent_variables_survive_a_restart(tmp_path: Path) -> None:
    """A step after SIGKILL and restore uses variables set before it; those not saved are named."""
    url = f"sqlite:///{tmp_path / 'code.db'}"
    script = str(HERE / "smolagents_agent.py")
    first = subprocess.run([sys.executable, script, "code-first", url, "c"], cwd=HERE)
    assert first.returncode == -signal.SIGKILL
    out = tmp_path / "next.json"
    subprocess.run(
        [sys.executable, script, "code-restore", url, "c", str(out)], check=True, cwd=HERE
    )
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["answer"] == 42  # a = 40 and items = [1, 2, 3], both set before the kill
    assert result["task"] == CODE_NEXT
    (warning,) = result["warnings"]
    assert "'Point' (type), 'p' (smolagents.local_python_executor.Point), 'r' (range)" in warning

    agent, model = make_code_agent(CODE_FIRST_SNIPPETS + CODE_NEXT_SNIPPETS)
    agent.run(CODE_FIRST)
    assert agent.run(CODE_NEXT, reset=False) == 42
    assert result["inputs"] == message_dicts(model.inputs[-1])


def test_unsaveable_values_never_stop_the_run(tmp_path: Path) -> None:
    """range(3) and instances of the code's own class are left out, named and warned about; the run finishes."""
    with open_memory(f"sqlite:///{tmp_path / 'a.db'}", "c") as memory:
        agent, _ = make_code_agent(CODE_FIRST_SNIPPETS, [SmolagentsRecorder(memory)])
        with pytest.warns(UnsavedValueWarning) as caught:
            assert agent.run(CODE_FIRST) == 40
        messages = [str(w.message) for w in caught]
        assert any("'action_output' (got range) of action step 1 of run 1" in m for m in messages)
        assert any("'p' (got smolagents.local_python_executor.Point)" in m for m in messages)
        first = memory[2]
        assert first["left_out"] == {"action_output": "range"}
        assert "action_output" not in first
        assert first["python_state"] == {"a": 40, "items": [1, 2]}
        assert set(first["python_state_left_out"]) == {"Point", "p", "r"}
        assert memory[3]["python_state"] == {"items": [1, 2, 3]}  # changed in place, recorded
    with open_memory(f"sqlite:///{tmp_path / 'a.db'}", "c") as memory:
        _, steps = restore_steps(memory)
        assert steps[1].action_output is None
        assert restore_python_state(memory)[0] == {"a": 40, "items": [1, 2, 3]}


def test_an_in_memory_record_stays_encodable() -> None:
    """A Memory the recorder writes to can always be saved, whatever the step held."""

    class Local:
        pass

    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_agent()
    step = ActionStep(step_number=1, timing=Timing(0.0, 1.0), action_output=Local())
    with pytest.warns(UnsavedValueWarning, match=r"'action_output' \(got .*Local\)"):
        recorder.write(agent, step)
    assert Memory.from_json(memory.to_json()).content == memory.content


class _Opaque:
    """A client's response object that the codec cannot write."""


def test_a_message_keeps_all_but_an_unsaveable_raw_response() -> None:
    """A model message whose raw API response cannot be saved is kept without it, and the raw is named."""
    memory = Memory()
    agent, model = make_agent([SmolagentsRecorder(memory)])
    generate = model.generate

    def with_raw(*args: Any, **kwargs: Any) -> ChatMessage:
        message = generate(*args, **kwargs)
        message.raw = _Opaque()
        return message

    model.generate = with_raw  # type: ignore[method-assign]  # the client hands back its own object
    with pytest.warns(UnsavedValueWarning, match=r"'model_output_message.raw' \(got .*_Opaque\)"):
        agent.run(FIRST_TASK)
    action = memory[2]
    assert action["left_out"] == {"model_output_message.raw": f"{__name__}._Opaque"}
    assert action["model_output_message"]["content"] == "I will add the numbers."
    assert action["model_output_message"]["raw"] is None
    _, steps = restore_steps(memory)
    assert (
        steps[1].model_output_message.tool_calls
        == agent.memory.steps[1].model_output_message.tool_calls
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["a", "b", "c", "d"]),
            st.one_of(
                st.integers(),
                st.text(max_size=5),
                st.lists(st.integers(), max_size=3),
                st.just(range(2)),
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_python_state_replays_to_the_last_state(states: list[dict[str, Any]]) -> None:
    """Whatever the variables did step by step, the replayed deltas give the last state's saveable values."""
    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_code_agent([])
    executor_state = agent.python_executor.state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsavedValueWarning)
        for number, state in enumerate(states, start=1):
            for name in "abcd":
                executor_state.pop(name, None)
            executor_state.update(state)
            step = ActionStep(step_number=number, timing=Timing(0.0, 1.0))
            agent.memory.steps.append(step)
            recorder.write(agent, step)
    variables, left_out = restore_python_state(memory)
    last = states[-1]
    assert variables == {k: v for k, v in last.items() if not isinstance(v, range)}
    assert left_out == {k: "range" for k, v in last.items() if isinstance(v, range)}


def test_damaged_python_state_is_named() -> None:
    """A python_state that is not a dict of variables raises CorruptSessionError naming the item; restore changes nothing."""
    memory = Memory(
        [
            MemoryItem(kind="task", run=1, task="t"),
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing={"start_time": 0.0, "end_time": 1.0},
                python_state=[1],
            ),
        ]
    )
    with pytest.raises(
        CorruptSessionError, match=r"Field 'python_state' of item 1 \(action step\) holds list"
    ):
        restore_python_state(memory)
    agent, _ = make_code_agent([])
    steps, variables = agent.memory.steps, dict(agent.python_executor.state)
    with pytest.raises(CorruptSessionError, match=r"python_state"):
        SmolagentsRecorder(memory).restore(agent)
    assert agent.memory.steps is steps
    assert agent.python_executor.state == variables


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.binary(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["python_state", "python_state_removed", "python_state_left_out"]),
        _JSONISH,
        min_size=1,
    )
)
def test_any_stored_python_state_restores_or_is_named(fields: dict[str, Any]) -> None:
    """Whatever a row's python_state fields hold, restore succeeds or raises CorruptSessionError and leaves the CodeAgent as it was."""
    memory = Memory(
        [
            MemoryItem(kind="task", run=1, task="t"),
            MemoryItem(
                kind="action", run=1, step=1, timing={"start_time": 0.0, "end_time": 1.0}, **fields
            ),
        ]
    )
    agent, _ = make_code_agent([])
    steps, variables = agent.memory.steps, dict(agent.python_executor.state)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnsavedValueWarning)
            SmolagentsRecorder(memory).restore(agent)
    except CorruptSessionError:
        assert agent.memory.steps is steps
        assert agent.python_executor.state == variables
    else:
        restored, _ = restore_python_state(memory)
        assert {k: v for k, v in agent.python_executor.state.items() if k in restored} == restored


@pytest.mark.parametrize("name", ["final_answer", "add", "print", "_print_outputs"])
def test_a_variable_named_like_a_tool_is_refused(name: str) -> None:
    """A stored variable that would hide a tool or an executor internal is refused, naming it; the agent is unchanged."""
    memory = Memory(
        [
            MemoryItem(kind="task", run=1, task="t"),
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing={"start_time": 0.0, "end_time": 1.0},
                python_state={name: 1, "a": 2},
            ),
        ]
    )
    agent, _ = make_code_agent([])
    steps, variables = agent.memory.steps, dict(agent.python_executor.state)
    with pytest.raises(CorruptSessionError, match=rf"variable\(s\) '{name}', named like a tool"):
        SmolagentsRecorder(memory).restore(agent)
    assert agent.memory.steps is steps
    assert agent.python_executor.state == variables


# -- restore sets the task; tool calls in smolagents' shape ---------------------------


def test_restore_sets_the_task() -> None:
    """The restored agent's task is the run's last task."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    agent.run(NEXT_TASK, reset=False)
    fresh, _ = make_agent()
    SmolagentsRecorder(memory).restore(fresh)
    assert fresh.task == NEXT_TASK == agent.task


def test_tool_calls_keep_smolagents_shape() -> None:
    """full_steps and succinct_steps show tool calls as smolagents' get_full_steps() does."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    ours = [step["tool_calls"] for step in get_succinct_steps(memory) if "step_number" in step]
    theirs = [
        step["tool_calls"] for step in agent.memory.get_succinct_steps() if "step_number" in step
    ]
    assert ours == theirs
    assert ours[0] == [
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "add", "arguments": {"a": 2, "b": 3}},
        }
    ]


def test_flat_tool_calls_of_older_sessions_still_restore() -> None:
    """A tool call stored as {id, name, arguments} is read back as smolagents' ToolCall."""
    memory = Memory(
        [
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing={"start_time": 0.0, "end_time": 1.0},
                tool_calls=[{"id": "c1", "name": "add", "arguments": {"a": 1}}],
            )
        ]
    )
    (step,) = restore_steps(memory)[1]
    assert step.tool_calls[0].dict() == {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": {"a": 1}},
    }


# -- steps that reach agent.memory without agent.run: step loops, injection, replacement ----


def _without_timing(memory: Memory) -> list[dict[str, Any]]:
    """The items' fields, timing left out (the clock differs from run to run)."""
    return [{k: v for k, v in item.to_dict().items() if k != "timing"} for item in memory]


CODE_LOOP_SNIPPETS = [
    "a = 40\nitems = [1, 2]\nprint(a)",
    "items.append(3)\nprint(a, items)",
    "final_answer(a + len(items) - 1)",
]


def test_the_examples_step_by_step_loop_is_recorded() -> None:
    """smolagents' step-by-step loop, with the recorder in step_callbacks, records every step as run() does, and restores."""
    memory = Memory()
    agent, _ = make_code_agent(CODE_LOOP_SNIPPETS, [SmolagentsRecorder(memory)])
    agent.python_executor.send_tools({**agent.tools})
    task = CODE_FIRST

    # The loop as smolagents' memory guide prints it, with two changes that smolagents
    # 1.26 needs: ActionStep takes timing, and agent.step() returns an ActionOutput.
    agent.memory.steps.append(TaskStep(task=task, task_images=[]))

    final_answer = None
    step_number = 1
    while final_answer is None and step_number <= 10:
        memory_step = ActionStep(
            step_number=step_number,
            timing=Timing(start_time=time.time()),
            observations_images=[],
        )
        # Run one step.
        output = agent.step(memory_step)
        final_answer = output.output if output.is_final_answer else None
        agent.memory.steps.append(memory_step)
        step_number += 1

    assert final_answer == 42
    assert [item["kind"] for item in memory] == [
        "system_prompt",
        "task",
        "action",
        "action",
        "action",
    ]
    assert memory.steps() == [1, 2, 3]
    assert memory[3]["python_state"] == {"items": [1, 2, 3]}
    _, steps = restore_steps(memory)
    assert [step.dict() for step in steps] == [step.dict() for step in agent.memory.steps]

    ran = Memory()
    by_run, _ = make_code_agent(CODE_LOOP_SNIPPETS, [SmolagentsRecorder(ran)])
    by_run.run(task, images=[])
    for item in ran:  # what the loop itself does otherwise than run() (the live steps differ too)
        if item["kind"] == "action":
            item["observations_images"] = []  # the loop passes [], run() its images
            item["is_final_answer"] = False  # only run() marks the final step
    assert _without_timing(memory) == _without_timing(ran)


def test_a_step_loop_killed_midway_goes_on_after_a_restore(tmp_path: Path) -> None:
    """A CodeAgent's step-by-step loop SIGKILLed after step 1 is restored in a new process; the next steps see what an unkilled loop sees."""
    url = f"sqlite:///{tmp_path / 'loop.db'}"
    script = str(HERE / "smolagents_agent.py")
    first = subprocess.run([sys.executable, script, "loop-first", url, "l"], cwd=HERE)
    assert first.returncode == -signal.SIGKILL
    out = tmp_path / "rest.json"
    subprocess.run(
        [sys.executable, script, "loop-restore", url, "l", str(out)], check=True, cwd=HERE
    )
    result = json.loads(out.read_text(encoding="utf-8"))

    agent, model = make_code_agent(CODE_FIRST_SNIPPETS)
    agent.python_executor.send_tools({**agent.tools})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsavedValueWarning)
        assert run_step_by_step(agent, CODE_FIRST) == 40
    assert result["answer"] == 40
    assert result["inputs"] == [message_dicts(inputs) for inputs in model.inputs[1:]]
    assert result["steps"] == [1, 2, 3]  # the restored loop goes on recording the same run
    assert result["recorded"] == [["system_prompt", 1], ["task", 1]] + [["action", 1]] * 3


def test_injected_steps_are_recorded_as_they_are_appended() -> None:
    """Steps appended to agent.memory.steps by hand are in the record at once, with no callback, and restore."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.memory.steps.append(TaskStep(task="Injected task."))
    assert [item["kind"] for item in memory] == ["system_prompt", "task"]
    agent.memory.steps.append(
        ActionStep(step_number=1, timing=Timing(0.0, 1.0), observations="seen", model_output="x")
    )
    assert memory.steps() == [1]
    _, steps = restore_steps(memory)
    assert [step.dict() for step in steps] == [step.dict() for step in agent.memory.steps]
    copied = copy.deepcopy(agent.memory)  # copies are of smolagents' own classes
    assert (type(copied), type(copied.steps)) == (AgentMemory, list)


def test_replaced_steps_are_recorded_as_a_new_run() -> None:
    """agent.memory.steps = another agent's steps is recorded at once as the next run, and restores to them."""
    memory = Memory()
    other, _ = make_agent()
    other.run(FIRST_TASK)
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.memory.steps = other.memory.steps
    assert {item["run"] for item in memory} == {1}
    assert [item["kind"] for item in memory] == ["system_prompt", "task", "action", "action"]
    fresh, _ = make_agent()
    SmolagentsRecorder(memory).restore(fresh)
    assert [s.dict() for s in fresh.memory.steps] == [s.dict() for s in other.memory.steps]


def test_a_step_replaced_in_place_replaces_its_item() -> None:
    """agent.memory.steps[-1] = new_step (the guide's way to update the latest step) is written at once."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK)
    agent.memory.steps[-1] = ActionStep(
        step_number=2, timing=Timing(0.0, 1.0), observations="edited by hand"
    )
    assert [item.get_value("observations") for item in memory if item["kind"] == "action"] == [
        "5",
        "edited by hand",
    ]
    _, steps = restore_steps(memory)
    assert [step.dict() for step in steps] == [step.dict() for step in agent.memory.steps]


def test_cleared_steps_restore_as_cleared() -> None:
    """agent.memory.steps.clear() and memory.reset() are followed at once: a restore gives no steps."""
    for clear in (lambda agent: agent.memory.steps.clear(), lambda agent: agent.memory.reset()):
        memory = Memory()
        agent, _ = make_agent([SmolagentsRecorder(memory)])
        agent.run(FIRST_TASK)
        clear(agent)
        fresh, _ = make_agent()
        fresh.memory.steps.append(TaskStep(task="left from before"))
        SmolagentsRecorder(memory).restore(fresh)
        assert fresh.memory.steps == []


# -- smolagents' own views, and reading them back ---------------------------------------


def _json_default(value: Any) -> Any:
    """Encode what json cannot: images by mode, size and pixels; bytes as hex."""
    if isinstance(value, Image.Image):
        return {"image": value.mode, "size": list(value.size), "pixels": value.tobytes().hex()}
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(type(value).__name__)


def as_json(steps: list[dict[str, Any]]) -> Any:
    """Steps as JSON data, with memory addresses masked.

    smolagents writes an image inside a message as its attributes, one of
    them a repr with the address of Pillow's pixel store, which differs from
    one call of get_full_steps() to the next even on the live agent.
    """
    text = json.dumps(steps, default=_json_default)
    return json.loads(re.sub(r" object at 0x[0-9a-f]+", " object", text))


def _tool_calling_run(callbacks: list[Any]) -> ToolCallingAgent:
    """A ToolCallingAgent run with two plans, a failed tool call, images and a final answer."""
    model = ToolScript(
        [
            "Plan: add, then answer.",
            ("broken", {"text": "x"}, "Trying the broken tool."),
            ("add", {"a": 2, "b": 3}, "Adding instead."),
            "Plan: answer now.",
            ("final_answer", {"answer": "5"}, "Done."),
        ]
    )
    agent = ToolCallingAgent(
        tools=[add, broken],
        model=model,
        step_callbacks=callbacks,
        planning_interval=2,
        verbosity_level=LogLevel.OFF,
    )
    images = [Image.new("RGB", (3, 2), (9, 99, 199)), Image.new("CMYK", (2, 2), (1, 2, 3, 4))]
    assert agent.run("Add 2 and 3.", images=images) == "5"
    return agent


def _code_run(callbacks: list[Any]) -> CodeAgent:
    """A CodeAgent run with two plans, a failed step, an image and a final answer."""
    snippets = [
        "Plan: compute.",
        "a = add(a=2, b=3)\nprint(a)",
        "b = undefined_name",
        "Plan: answer.",
        "final_answer(a)",
    ]
    agent, _ = make_code_agent(snippets, callbacks)
    agent.planning_interval = 2
    assert agent.run("Compute.", images=[Image.new("F", (2, 1), 1.5)]) == 5
    return agent


@pytest.mark.parametrize("make_run", [_tool_calling_run, _code_run], ids=["tool-calling", "code"])
def test_get_full_steps_equal_smolagents_own(tmp_path: Path, make_run: Any) -> None:
    """get_full_steps and get_succinct_steps of a recorded run, read from its store file, equal the live agent's own, as JSON."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_memory(url, "s") as memory:
        agent = make_run([SmolagentsRecorder(memory)])
    kinds = [type(step).__name__ for step in agent.memory.steps]
    assert kinds.count("PlanningStep") == 2
    assert any(getattr(step, "error", None) is not None for step in agent.memory.steps)
    with open_memory(url, "s") as memory:
        assert as_json(get_full_steps(memory)) == as_json(agent.memory.get_full_steps())
        assert as_json(get_succinct_steps(memory)) == as_json(agent.memory.get_succinct_steps())


def test_kvmemory_fields_stay_on_the_items() -> None:
    """kind, run and a CodeAgent's python_state are not in get_full_steps, and are on the items."""
    memory = Memory()
    _code_run([SmolagentsRecorder(memory)])
    assert all("kind" not in step and "python_state" not in step for step in get_full_steps(memory))
    assert [item["kind"] for item in memory][:3] == ["system_prompt", "task", "planning"]
    assert memory[3]["python_state"] == {"a": 5}


def _dump(steps: list[dict[str, Any]], path: Path) -> Path:
    """Save steps as smolagents' examples do: json.dump(agent.memory.get_full_steps(), f)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(steps, f)
    return path


def test_a_dump_reads_back_with_its_step_numbers_and_restores(tmp_path: Path) -> None:
    """A json.dump of get_full_steps() reads back as a run with its step numbers, gives the same dump, and a restored agent goes on as the live one."""
    agent, model = make_agent()
    agent.run("Use the broken tool.")
    path = _dump(agent.memory.get_full_steps(), tmp_path / "steps.json")
    memory = read_smolagents_dump(path)
    assert memory.steps() == [1, 2]
    assert [item["kind"] for item in memory] == ["task", "action", "action"]
    assert as_json(get_full_steps(memory)) == json.loads(path.read_text(encoding="utf-8"))

    fresh, fresh_model = make_agent()
    SmolagentsRecorder(memory).restore(fresh)
    agent.run(NEXT_TASK, reset=False)
    fresh.run(NEXT_TASK, reset=False)
    assert message_dicts(fresh_model.inputs[-1]) == message_dicts(model.inputs[-1])


def test_cli_imports_a_dump_into_a_store(tmp_path: Path) -> None:
    """kvmemory import smolagents-dump writes the steps as a session, with their step numbers, that restores."""
    from agents.cli import main

    agent, _ = make_agent()
    agent.run(FIRST_TASK)
    path = _dump(agent.memory.get_full_steps(), tmp_path / "steps.json")
    store = str(tmp_path / "runs.db")
    out = io.StringIO()
    argv = ["import", "smolagents-dump", str(path), "--store", store, "--session", "d"]
    assert main(argv, out=out) == 0
    assert out.getvalue() == f"imported 3 steps into session 'd' of {store}\n"
    missing = ["import", "smolagents-dump", str(tmp_path / "none.json"), "--store", store]
    assert main([*missing, "--session", "e"], out=io.StringIO()) == 2
    with open_memory(store, "d") as memory:
        assert memory.steps() == [1, 2]
        assert memory.metadata["source"] == "smolagents-dump"
        fresh, _ = make_agent()
        SmolagentsRecorder(memory).restore(fresh)
    assert [s.dict() for s in fresh.memory.steps] == [s.dict() for s in agent.memory.steps]


_BAD_DUMPS = {
    "not a list": ({"steps": []}, r"holds dict, not the list of step dicts"),
    "not a step": ([{"task": "t"}, 3], r"Step 1 of smolagents dump .* got int"),
    "unknown keys": ([{"task": "t"}, {"thought": "x"}], r"Step 1 .* got keys \['thought'\]"),
    "bad timing": (
        [{"task": "t"}, {"step_number": 1, "timing": {"start": 1}}],
        r"Field 'timing' of step 1 of smolagents dump '.*bad.json' cannot be read",
    ),
    "step number": (
        [{"task": "t"}, {"step_number": "one", "timing": {"start_time": 1.0}}],
        r"Field 'step_number' of step 1 of smolagents dump .*expected an int, got str 'one'",
    ),
    "task text": (
        [{"task": 7}],
        r"Field 'task' of step 0 of smolagents dump .*not a dump of smolagents' get_full_steps\(\)",
    ),
}


@pytest.mark.parametrize("bad", sorted(_BAD_DUMPS), ids=sorted(_BAD_DUMPS))
def test_a_bad_dump_is_named_and_writes_nothing(tmp_path: Path, bad: str) -> None:
    """A dump that is not smolagents' step dicts raises CorruptSessionError naming the step; the CLI writes nothing."""
    from agents.cli import main

    data, message = _BAD_DUMPS[bad]
    path = _dump(data, tmp_path / "bad.json")
    with pytest.raises(CorruptSessionError, match=message):
        read_smolagents_dump(path)
    store = str(tmp_path / "runs.db")
    with pytest.raises(CorruptSessionError, match=message):
        import_smolagents_dump(path, store, "d")
    argv = ["import", "smolagents-dump", str(path), "--store", store, "--session", "d"]
    assert main(argv, out=io.StringIO()) == 1
    with open_memory(store, "d") as memory:
        assert len(memory) == 0


def test_a_dump_that_is_not_json_is_named(tmp_path: Path) -> None:
    """A dump file that is not JSON raises CorruptSessionError naming the file."""
    path = tmp_path / "cut.json"
    path.write_text('[{"task": "t"}, {"step_num', encoding="utf-8")
    with pytest.raises(CorruptSessionError, match=r"dump '.*cut.json' is not valid JSON"):
        read_smolagents_dump(path)


def test_images_a_dump_cannot_hold_are_named(tmp_path: Path) -> None:
    """Images saved with json.dump(..., default=str) are left out of the read steps, named in left_out and warned about."""
    agent, _ = make_agent()
    agent.run(FIRST_TASK, images=[Image.new("RGB", (2, 2))])
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(agent.memory.get_full_steps(), default=str), encoding="utf-8")
    with pytest.warns(UnsavedValueWarning) as caught:
        memory = read_smolagents_dump(path)
    assert [str(w.message).split(" of smolagents dump")[0] for w in caught] == [
        "Field(s) 'task_images' of step 0",
        "Field(s) 'observations_images' of step 1",
        "Field(s) 'observations_images' of step 2",
    ]
    assert memory[0]["left_out"] == {"task_images": "list"}
    _, steps = restore_steps(memory)
    assert steps[0].task_images is None


def _image_parts(messages: list[Any]) -> list[dict[str, Any]]:
    """The images of the messages, as mode, size, pixels, palette and info."""
    return [
        image_state(part["image"])
        for message in messages
        if isinstance(message.content, list)
        for part in message.content
        if part.get("type") == "image"
    ]


def test_images_png_cannot_hold_survive_a_restart(tmp_path: Path) -> None:
    """CMYK, 32-bit float and palette task images, restored from a store file, give the model the uninterrupted run's message 1."""
    palette = Image.new("P", (3, 1))
    palette.putpalette(bytes(range(9)))
    palette.info["transparency"] = 2
    images = [
        Image.new("CMYK", (3, 2), (10, 20, 30, 40)),
        Image.new("F", (2, 2), 300.75),
        palette,
    ]
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_memory(url, "s") as memory:
        recorded, _ = make_agent([SmolagentsRecorder(memory)])
        recorded.run(FIRST_TASK, images=images)
    with open_memory(url, "s") as memory:
        fresh, fresh_model = make_agent()
        SmolagentsRecorder(memory).restore(fresh)
        fresh.run(NEXT_TASK, reset=False)
    agent, model = make_agent()
    agent.run(FIRST_TASK, images=images)
    agent.run(NEXT_TASK, reset=False)
    sent, resent = model.inputs[-1], fresh_model.inputs[-1]
    assert _image_parts([resent[1]]) == _image_parts([sent[1]])
    assert [image["mode"] for image in _image_parts([sent[1]])] == ["CMYK", "F", "P"]
    assert message_dicts(resent) == message_dicts(sent)


_EDITS_OF_STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "append",
                "append task",
                "insert",
                "set",
                "del",
                "pop",
                "clear",
                "assign",
                "extend",
                "reset",
            ]
        ),
        st.integers(0, 8),
    ),
    max_size=14,
)


@settings(max_examples=60, deadline=None)
@given(_EDITS_OF_STEPS)
def test_any_edits_of_the_steps_list_restore_to_it(edits: list[tuple[str, int]]) -> None:
    """Whatever is done to agent.memory.steps through the list (append, insert, set, delete, clear, assign, reset), a restore gives the list."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    made = iter(range(1, 1000))

    def new_step(kind: str = "action") -> Any:
        number = next(made)
        if kind == "task":
            return TaskStep(task=f"task {number}")
        return ActionStep(step_number=number, timing=Timing(0.0, 1.0), observations=f"{number}")

    for edit, at in edits:
        steps = agent.memory.steps
        where = at % (len(steps) + 1)
        if edit == "append":
            steps.append(new_step())
        elif edit == "append task":
            steps.append(new_step("task"))
        elif edit == "insert":
            steps.insert(where, new_step())
        elif edit == "extend":
            steps.extend([new_step(), new_step()])
        elif edit == "assign":
            agent.memory.steps = [new_step("task")] + [new_step() for _ in range(at % 3)]
        elif edit == "reset":
            agent.memory.reset()
        elif edit == "clear":
            steps.clear()
        elif steps and edit == "set":
            steps[where % len(steps)] = new_step()
        elif steps and edit == "del":
            del steps[where % len(steps)]
        elif steps and edit == "pop":
            steps.pop()
    _, restored = restore_steps(memory)
    assert [step.dict() for step in restored] == [step.dict() for step in agent.memory.steps]
