"""smolagents recorder benchmark: the cost of one step as the run grows.

Drives a real smolagents ``ToolCallingAgent``'s callback registry the way
``agent.run`` does (the step's callbacks, then the step joins
``agent.memory.steps``) with a ``SmolagentsRecorder`` and a screenshot
callback listed after it, for runs of 100, 1,000 and 3,000 steps. Times the
last 100 steps of each run one by one and prints the median cost of a step,
best of several runs, and its ratio to the 100-step run. The recorder should
cost the same per step however long the run: the target ratio is below 1.5
(a recorder that walks every step at each step is about 10 at 1,000 steps
and 30 at 3,000). Model inputs are kept at a fixed size so that only the
recorder's own cost grows with the run. With ``--growing-inputs`` each step's
model input is the whole history so far, as smolagents keeps it: writing it
then costs in proportion to the history, unless the recorder is told to
leave model inputs out (``--no-model-inputs``: ``keep_model_inputs=False``).

Run: .venv/bin/python benchmarks/bench_smolagents.py [--sizes 100,1000,3000] [--repeat R] [--store sqlite]
     [--growing-inputs [--no-model-inputs]]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from agents.integrations.smolagents import SmolagentsRecorder
from agents.memory import Memory
from agents.memory.stores import open_memory

TARGET = 1.5
TIMED = 100


def _agent() -> Any:
    from smolagents import ChatMessage, Model, ToolCallingAgent
    from smolagents.monitoring import LogLevel

    class Silent(Model):
        def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
            raise AssertionError("the benchmark drives the callbacks, not the model")

    return ToolCallingAgent(tools=[], model=Silent(), verbosity_level=LogLevel.OFF)


def _step(number: int, history: list[Any] | None = None) -> Any:
    """Return an action step; with ``history``, its model input is the history so far (which then grows by two messages)."""
    from smolagents.memory import ActionStep, ToolCall
    from smolagents.models import ChatMessage, MessageRole
    from smolagents.monitoring import Timing, TokenUsage

    text = f"Step {number}: the dialog is open, so I press OK."
    inputs = [
        ChatMessage(role=MessageRole.SYSTEM, content=[{"type": "text", "text": "You act."}]),
        ChatMessage(role=MessageRole.USER, content=[{"type": "text", "text": "Close it."}]),
    ]
    if history is not None:
        inputs = [*inputs, *history]
        history.append(
            ChatMessage(role=MessageRole.ASSISTANT, content=[{"type": "text", "text": text}])
        )
        history.append(
            ChatMessage(
                role=MessageRole.TOOL_RESPONSE,
                content=[{"type": "text", "text": f"Observation: {number}"}],
            )
        )
    return ActionStep(
        step_number=number,
        timing=Timing(start_time=float(number), end_time=number + 0.5),
        model_input_messages=inputs,
        tool_calls=[
            ToolCall(name="click", arguments={"x": number % 800, "y": 40}, id=f"c{number}")
        ],
        model_output_message=ChatMessage(role=MessageRole.ASSISTANT, content=text),
        model_output=text,
        observations=f"window 'Report {number % 97}.docx' is focused",
        token_usage=TokenUsage(input_tokens=800, output_tokens=20),
    )


def _screenshot(memory_step: Any, agent: Any) -> None:
    """Mark this step and clear the mark two steps back, as smolagents' web-browser example does with images."""
    steps = agent.memory.steps
    if len(steps) >= 2:
        steps[-2].observations = None
    memory_step.observations = f"{memory_step.observations} (seen)"


def per_step(size: int, memory: Memory, *, growing: bool = False, keep: bool = True) -> float:
    """Return the median seconds of one step among the last ``TIMED`` of a ``size``-step run."""
    from smolagents.memory import TaskStep

    recorder = SmolagentsRecorder(memory, keep_model_inputs=keep)
    history: list[Any] | None = [] if growing else None
    agent = _agent()
    agent.step_callbacks.register(type(_step(0)), recorder)
    agent.step_callbacks.register(type(_step(0)), _screenshot)
    agent.memory.steps.append(TaskStep(task="Close every dialog."))
    times: list[float] = []
    gc.collect()
    for number in range(1, size + 1):
        step = _step(number, history)
        timed = number > size - TIMED
        start = time.perf_counter()
        agent.step_callbacks.callback(step, agent=agent)
        agent.memory.steps.append(step)
        if timed:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Run each size and print the per-step cost and its ratio to the smallest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,3000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument(
        "--growing-inputs",
        action="store_true",
        help="give each step the whole history as its model input, as smolagents does",
    )
    parser.add_argument(
        "--no-model-inputs",
        action="store_true",
        help="record with keep_model_inputs=False",
    )
    args = parser.parse_args()
    warnings.simplefilter("error")
    sizes = [int(size) for size in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as folder:

        def cost(size: int, attempt: int) -> float:
            options = {"growing": args.growing_inputs, "keep": not args.no_model_inputs}
            if args.store == "memory":
                return per_step(size, Memory(), **options)
            url = f"sqlite:///{Path(folder) / f'run-{size}-{attempt}.db'}"
            with open_memory(url, "bench") as memory:
                return per_step(size, memory, **options)

        best = {size: min(cost(size, attempt) for attempt in range(args.repeat)) for size in sizes}
    base = best[sizes[0]]
    where = "an in-memory Memory" if args.store == "memory" else "a SQLite store"
    if args.growing_inputs:
        where += ", model inputs growing with the run"
    if args.no_model_inputs:
        where += ", keep_model_inputs=False"
    print(
        f"smolagents recorder into {where}, median of the last {TIMED} steps, best of {args.repeat}:"
    )
    for size in sizes:
        ratio = best[size] / base
        verdict = "ok" if ratio < TARGET else "OVER TARGET"
        print(
            f"  {size:>6} steps: {best[size] * 1e6:8.1f} us/step  "
            f"ratio to {sizes[0]} steps {ratio:5.2f}  (target < {TARGET}) {verdict}"
        )


if __name__ == "__main__":
    main()
