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
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from smolagents import ChatMessage, Model, ToolCallingAgent, tool
from smolagents.models import ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole
from smolagents.monitoring import LogLevel, TokenUsage

FIRST_TASK = "Add 2 and 3."
NEXT_TASK = "Say that you are done."


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
        if last.role == MessageRole.TOOL_RESPONSE:
            name, arguments, say = (
                "final_answer",
                {"answer": text.split("\n")[-1]},
                "I have the sum.",
            )
        elif "Use the broken tool" in text:
            name, arguments, say = "broken", {"text": "x"}, "Trying the broken tool."
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


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as plain JSON data, to compare across processes."""
    return json.loads(json.dumps([message.dict() for message in messages], default=str))


def _main(argv: list[str]) -> None:
    from agents.integrations.smolagents import SmolagentsRecorder
    from agents.memory.stores import open_memory

    mode, url, session = argv[:3]
    memory = open_memory(url, session)
    recorder = SmolagentsRecorder(memory)
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


if __name__ == "__main__":
    _main(sys.argv[1:])
