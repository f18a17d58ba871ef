"""A real smolagents ToolCallingAgent with a scripted model that answers offline.

Imported by tests/test_smolagents.py, and run as a script by it to play the
parts of two processes:

    python smolagents_agent.py first STORE_URL SESSION
        runs the first task (two steps: a tool call, then the final answer)
        with a SmolagentsRecorder, then kills its own process (SIGKILL).
    python smolagents_agent.py restore STORE_URL SESSION OUT_JSON
        builds a new agent, restores its memory from the session, runs the
        next task with reset=False (one step), writes the model's input
        messages of that step to OUT_JSON and prints agent.replay().
    python smolagents_agent.py browse-first STORE_URL SESSION [list|attach]
        runs BROWSE_TASK (five steps) with step_callbacks=[recorder,
        take_screenshot] (or [take_screenshot] and recorder.attach): the
        screenshot callback attaches an image to each step and clears the
        images of steps two or more behind (as smolagents' web-browser
        example does); then SIGKILL.
    python smolagents_agent.py browse-restore STORE_URL SESSION OUT_JSON
        restores, runs NEXT_TASK with reset=False and writes the model's
        input messages of that step to OUT_JSON.
    python smolagents_agent.py code-first STORE_URL SESSION
        a CodeAgent runs CODE_FIRST (sets variables, some that cannot be
        saved), then SIGKILL.
    python smolagents_agent.py code-restore STORE_URL SESSION OUT_JSON
        restores into a new CodeAgent and runs CODE_NEXT, whose code uses the
        variables set before the kill; writes the answer, the warnings and
        the model's input messages to OUT_JSON.
    python smolagents_agent.py loop-first STORE_URL SESSION
        a CodeAgent made with step_callbacks=[recorder] runs CODE_FIRST one
        step at a time, as smolagents' examples print the loop; SIGKILL
        after the first step is appended to agent.memory.steps.
    python smolagents_agent.py loop-restore STORE_URL SESSION OUT_JSON
        restores into a new CodeAgent and goes on with the loop; writes the
        answer, the model's input messages of each step and what the session
        holds then to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from PIL import Image
from smolagents import ActionStep, ChatMessage, CodeAgent, Model, TaskStep, ToolCallingAgent, tool
from smolagents.models import ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole
from smolagents.monitoring import LogLevel, Timing, TokenUsage

FIRST_TASK = "Add 2 and 3."
NEXT_TASK = "Say that you are done."
BROWSE_TASK = "Browse: add 1 four times."
CODE_FIRST = "Compute a and keep some values."
CODE_NEXT = "Use a again."


@tool
def add(a: int, b: int) -> int:
    """Return the sum of two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


@tool
def broken(text: str) -> str:
    """Fail, always (to record a tool error).

    Args:
        text: Anything.
    """
    raise ValueError(f"cannot handle {text!r}")


class ScriptedModel(Model):
    """Answers from the conversation alone: add for an addition task, then the final answer."""

    def __init__(self) -> None:
        super().__init__(model_id="scripted")
        self.inputs: list[list[ChatMessage]] = []

    def generate(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> ChatMessage:
        self.inputs.append(list(messages))
        last = messages[-1]
        text = last.content[0]["text"] if isinstance(last.content, list) else str(last.content)
        browsing = any(
            isinstance(m.content, list)
            and any(p.get("type") == "text" and "Browse:" in p.get("text", "") for p in m.content)
            for m in messages[:2]
        )
        answers = sum(m.role == MessageRole.TOOL_RESPONSE for m in messages)
        if browsing and last.role == MessageRole.TOOL_RESPONSE and answers < 4:
            name, arguments, say = "add", {"a": answers, "b": 1}, f"Adding, round {answers + 1}."
        elif last.role == MessageRole.TOOL_RESPONSE:
            name, arguments, say = (
                "final_answer",
                {"answer": text.split("\n")[-1]},
                "I have the sum.",
            )
        elif "Use the broken tool" in text:
            name, arguments, say = "broken", {"text": "x"}, "Trying the broken tool."
        elif "Browse:" in text:
            name, arguments, say = "add", {"a": 0, "b": 1}, "Adding, round 1."
        elif "Add 2 and 3" in text:
            name, arguments, say = "add", {"a": 2, "b": 3}, "I will add the numbers."
        else:
            name, arguments, say = "final_answer", {"answer": "done"}, "Finishing."
        call = ChatMessageToolCall(
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
            id=f"call_{len(messages)}",
            type="function",
        )
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=say,
            tool_calls=[call],
            token_usage=TokenUsage(input_tokens=10 * len(messages), output_tokens=7),
        )


def make_agent(
    step_callbacks: list[Any] | None = None, verbosity: LogLevel = LogLevel.OFF
) -> tuple[ToolCallingAgent, ScriptedModel]:
    model = ScriptedModel()
    agent = ToolCallingAgent(
        tools=[add, broken],
        model=model,
        step_callbacks=step_callbacks or [],
        verbosity_level=verbosity,
    )
    return agent, model


def take_screenshot(memory_step: ActionStep, agent: Any) -> None:
    """Attach this step's "screenshot" and clear those of steps two or more behind, as smolagents' web-browser example does."""
    current = memory_step.step_number
    for previous in agent.memory.steps:
        if isinstance(previous, ActionStep) and previous.step_number <= current - 2:
            previous.observations_images = None
    memory_step.observations_images = [Image.new("RGB", (4, 3), (current * 40, 7, 9))]


class CodeScript(Model):
    """A code-writing model that answers with the next of the given code snippets."""

    def __init__(self, snippets: list[str]) -> None:
        super().__init__(model_id="code-script")
        self.snippets = list(snippets)
        self.inputs: list[list[ChatMessage]] = []

    def generate(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> ChatMessage:
        self.inputs.append(list(messages))
        code = self.snippets.pop(0)
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Thought: go on.\n<code>\n{code}\n</code>"
        )


# The first run: `a` and `items` can be saved, `r`, `Point` and `p` cannot (and
# neither can the step's action output, range(3)); the second step changes
# `items` in place.
CODE_FIRST_SNIPPETS = [
    "a = 40\nitems = [1, 2]\nclass Point:\n    pass\np = Point()\nr = range(3)\nr",
    "items.append(3)\nprint(a, items)",
    "final_answer(a)",
]
CODE_NEXT_SNIPPETS = ["final_answer(a + len(items) - 1)"]


def make_code_agent(
    snippets: list[str], step_callbacks: list[Any] | None = None
) -> tuple[CodeAgent, CodeScript]:
    model = CodeScript(snippets)
    agent = CodeAgent(
        tools=[add], model=model, step_callbacks=step_callbacks or [], verbosity_level=LogLevel.OFF
    )
    return agent, model


class ToolScript(Model):
    """A tool-calling model that answers with the next of the given replies.

    A reply is a text (a plan) or ``(tool name, arguments, text)``.
    """

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(model_id="tool-script")
        self.replies = list(replies)
        self.inputs: list[list[ChatMessage]] = []

    def generate(
        self,
        messages: list[Any],
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> ChatMessage:
        self.inputs.append(list(messages))
        reply = self.replies.pop(0)
        if isinstance(reply, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=reply)
        name, arguments, text = reply
        call = ChatMessageToolCall(
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
            id=f"call_{len(messages)}",
            type="function",
        )
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=text,
            tool_calls=[call],
            token_usage=TokenUsage(input_tokens=len(messages), output_tokens=3),
        )


def run_step_by_step(agent: Any, task: str, *, first_step: int = 1, stop_after: int = 0) -> Any:
    """Run ``agent`` one step at a time, as smolagents' memory guide prints the loop.

    Two lines differ from the guide, for smolagents 1.26: ``ActionStep``
    needs ``timing``, and ``agent.step()`` returns an ``ActionOutput``
    (the guide's smolagents returned the answer, or None). With
    ``first_step`` above 1 the task is not appended again (a restored run
    goes on); with ``stop_after``, the process is SIGKILLed after that step
    is appended.
    """
    if first_step == 1:
        agent.memory.steps.append(TaskStep(task=task, task_images=[]))

    final_answer = None
    step_number = first_step
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
        if step_number == stop_after:
            os.kill(os.getpid(), signal.SIGKILL)
        step_number += 1
    return final_answer


def image_state(image: Image.Image) -> dict[str, Any]:
    """What an image is, for exact comparison: mode, size, pixels, palette and info."""
    return {
        "mode": image.mode,
        "size": image.size,
        "pixels": image.tobytes(),
        "palette": image.getpalette(image.palette.mode) if image.palette is not None else None,
        "info": dict(image.info),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Image.Image):
        return {"image": value.mode, "size": list(value.size), "pixels": value.tobytes().hex()}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as plain JSON data (images as their pixels), to compare across processes."""
    return json.loads(json.dumps(_plain([message.dict() for message in messages]), default=str))


def _main(argv: list[str]) -> None:
    from agents.integrations.smolagents import SmolagentsRecorder
    from agents.memory.stores import open_memory

    mode, url, session = argv[:3]
    memory = open_memory(url, session)
    recorder = SmolagentsRecorder(memory)
    if mode.startswith("code-"):
        _code(mode, recorder, argv)
        return
    if mode.startswith("loop-"):
        _loop(mode, recorder, argv)
        return
    if mode == "browse-first":
        if argv[3:] == ["attach"]:
            agent, _ = make_agent([take_screenshot])
            recorder.attach(agent)
        else:
            agent, _ = make_agent([recorder, take_screenshot])
        agent.run(BROWSE_TASK)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "browse-restore":
        agent, model = make_agent([recorder, take_screenshot])
        recorder.restore(agent)
        agent.run(NEXT_TASK, reset=False)
        with open(argv[3], "w", encoding="utf-8") as out:
            json.dump(message_dicts(model.inputs[-1]), out)
        memory.close()
        return
    if mode == "first":
        agent, _ = make_agent([recorder])
        agent.run(FIRST_TASK)
        # Killed at once: no close, no cleanup; what is stored is what was written per step.
        os.kill(os.getpid(), signal.SIGKILL)
    agent, model = make_agent(verbosity=LogLevel.ERROR)
    recorder.restore(agent)
    agent.run(NEXT_TASK, reset=False)
    with open(argv[3], "w", encoding="utf-8") as out:
        json.dump(message_dicts(model.inputs[-1]), out)
    agent.replay()
    memory.close()


def _code(mode: str, recorder: Any, argv: list[str]) -> None:
    import warnings

    if mode == "code-first":
        agent, _ = make_code_agent(CODE_FIRST_SNIPPETS, [recorder])
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # the values that cannot be saved are named; checked in-process
            agent.run(CODE_FIRST)
        os.kill(os.getpid(), signal.SIGKILL)
    agent, model = make_code_agent(CODE_NEXT_SNIPPETS, [recorder])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recorder.restore(agent)
    answer = agent.run(CODE_NEXT, reset=False)
    with open(argv[3], "w", encoding="utf-8") as out:
        json.dump(
            {
                "answer": answer,
                "warnings": [str(w.message) for w in caught],
                "task": agent.task,
                "inputs": message_dicts(model.inputs[-1]),
            },
            out,
        )
    recorder.memory.close()


def _loop(mode: str, recorder: Any, argv: list[str]) -> None:
    import warnings

    warnings.simplefilter("ignore")  # the values that cannot be saved are named; checked in-process
    if mode == "loop-first":
        agent, _ = make_code_agent(CODE_FIRST_SNIPPETS, [recorder])
        agent.python_executor.send_tools({**agent.tools})
        run_step_by_step(agent, CODE_FIRST, stop_after=1)
    agent, model = make_code_agent(CODE_FIRST_SNIPPETS[1:], [recorder])
    agent.python_executor.send_tools({**agent.tools})
    recorder.restore(agent)
    done = sum(isinstance(step, ActionStep) for step in agent.memory.steps)
    answer = run_step_by_step(agent, CODE_FIRST, first_step=done + 1)
    with open(argv[3], "w", encoding="utf-8") as out:
        json.dump(
            {
                "answer": answer,
                "inputs": [message_dicts(inputs) for inputs in model.inputs],
                "recorded": [(item["kind"], item["run"]) for item in recorder.memory],
                "steps": recorder.memory.steps(),
            },
            out,
        )
    recorder.memory.close()


if __name__ == "__main__":
    _main(sys.argv[1:])
