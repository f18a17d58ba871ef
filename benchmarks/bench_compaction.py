"""Prompt economy benchmark: a compacting window against sending the full history.

Plays a 200-step UFO-like session (a pinned task, then one step per model
call with a thought, a control, an action, an observation, sometimes an
error, and a real 320x200 PNG screenshot). Before each step the prompt is
built the way an agent would: the task, the history through
``Window(max_text_tokens=2000, max_images=2, pin_first=1,
compaction=Compaction(TallySummarizer()))``, then the current screenshot,
rendered with ``render_parts`` and costed with ``prompt_cost``. The same
prompt with the whole history (every step and every screenshot) is costed
alongside. Prints, per token counter (the default flat 765 tokens an image,
OpenAI's tile formula, Anthropic's area formula), the total prompt tokens of
the 200 steps both ways and their ratio; the target is at least 25x fewer
tokens with the window, under the default counter. It also checks, at
every step, that the last 5 steps are complete in the prompt and that every
earlier step is covered by the summary, and counts the summariser's calls.

Token counts are deterministic. The one time printed is the median time to
choose a window (the summariser's calls included) with compaction, as a
ratio to the same window without it, in the same process.

Run: .venv/bin/python benchmarks/bench_compaction.py [--steps N] [--budget T]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import struct
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from agents.memory import Memory, MemoryItem
from agents.memory.prompt import (
    AreaImageCost,
    Compaction,
    EstimateCounter,
    Key,
    PromptCost,
    TallySummarizer,
    TileImageCost,
    TokenCounter,
    Window,
    prompt_cost,
    render_parts,
    select_window,
)

TARGET = 25.0
KEEP = 0.4  # after a compaction, the unsummarised steps fill 40% of the text budget (5 steps here)
KEYS = [
    "step",
    "observation",
    "thought",
    "control_text",
    "action",
    "arguments",
    "status",
    "plan",
    "comment",
    Key("error", optional=True),
    "screenshot",
]
TEXT_KEYS = [
    "step",
    "observation",
    "thought",
    "control_text",
    "action",
    "arguments",
    "status",
    "plan",
    "comment",
]
TASK = "Open the quarterly report in Word, add a one-line summary at the top, and save it as PDF."
ACTIONS = ["click_input", "set_edit_text", "wheel_mouse_input", "double_click", "type_keys"]
CONTROLS = ["File", "Open", "report.docx", "Document body", "Save As", "PDF (*.pdf)", "Save"]


def png(width: int, height: int, shade: int) -> bytes:
    """Return a real grayscale PNG of ``width`` x ``height`` pixels, all of one shade."""
    row = b"\x00" + bytes([shade % 256]) * width
    body = zlib.compress(row * height, 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def step_fields(i: int, screenshot: str) -> dict[str, Any]:
    """Return the fields a UFO-like app agent records at step ``i``."""
    control = CONTROLS[i % len(CONTROLS)]
    following = CONTROLS[(i + 1) % len(CONTROLS)]
    # The fields UFO's app agent asks its model for: observation, thought,
    # control, function and arguments, status, plan and comment.
    fields: dict[str, Any] = {
        "step": i,
        "observation": f"The window 'report.docx - Word' is focused; the ribbon shows Home, Insert and Layout, and {3 + i % 5} controls changed since step {i - 1}.",
        "thought": f"The {control} control is visible and enabled, so clicking it moves the task on; nothing else on screen needs attention.",
        "control_text": control,
        "action": ACTIONS[i % len(ACTIONS)],
        "arguments": {
            "button": "left",
            "double": i % 3 == 0,
            "text": "" if i % 4 else "Summary: revenue grew 12%.",
        },
        "status": "CONTINUE",
        "plan": [f"use {following}", "check the document body", "save the document as PDF"],
        "comment": f"Step {i} of the report task; no dialog is open.",
        "screenshot": screenshot,
    }
    if i % 17 == 5:
        fields["error"] = f"control {control!r} not found; the menu was scrolled"
    return fields


class CountingSummarizer:
    """Wrap a summariser and record how many records each call received."""

    def __init__(self) -> None:
        self.inner = TallySummarizer()
        self.calls: list[int] = []

    def __call__(self, previous: str | None, records: Sequence[Mapping[str, Any]]) -> str:
        self.calls.append(len(records))
        return self.inner(previous, records)


def make_window(
    counter: TokenCounter, summarizer: CountingSummarizer | None, budget: int
) -> Window:
    """Return the history window: a text budget, the last 2 screenshots, the task pinned, compaction."""
    return Window(
        max_text_tokens=budget,
        max_images=2,
        pin_first=1,
        counter=counter,
        compaction=None if summarizer is None else Compaction(summarizer, keep=KEEP),
    )


def check_prompt(step: int, result: Any, *, compacting: bool = True) -> None:
    """Raise AssertionError unless the last 5 steps are complete and earlier ones are summarised."""
    shown = {r["step"]: r for r in result.records if "step" in r}
    for earlier in range(max(0, step - 5), step):
        record = shown.get(earlier)
        assert record is not None, f"prompt {step}: step {earlier} is missing"
        assert all(k in record for k in TEXT_KEYS), f"prompt {step}: step {earlier} is incomplete"
    if not compacting:
        return
    covered = set(result.summary.steps) if result.summary is not None else set()
    missing = [s for s in range(step) if s not in shown and s not in covered]
    assert not missing, f"prompt {step}: steps {missing[:5]} are neither shown nor summarised"
    assert result.dropped == 0


def run_session(
    steps: int,
    folder: pathlib.Path,
    counter: TokenCounter,
    budget: int = 2000,
    *,
    compacting: bool = True,
) -> dict[str, Any]:
    """Play the session; return per-step costs both ways, the memory and the summariser's calls."""
    memory = Memory([MemoryItem(task=TASK)])
    summarizer = CountingSummarizer()
    window = make_window(counter, summarizer if compacting else None, budget)
    task_parts = render_parts([{"task": TASK}], header="[Task:]")
    history_cost = PromptCost(0, 0, 0)  # the full history so far, what render_parts() sends
    windowed: list[PromptCost] = []
    full: list[PromptCost] = []
    seconds: list[float] = []  # choosing each window (summariser calls included)
    for i in range(steps):
        shot = folder / f"step_{i}.png"
        shot.write_bytes(png(320, 200, i))
        current = render_parts([{"screenshot": str(shot)}], header="[Current screenshot:]")
        started = time.perf_counter()
        result = select_window(memory, window, keys=KEYS)
        seconds.append(time.perf_counter() - started)
        check_prompt(i, result, compacting=compacting)
        parts = task_parts + render_parts(result.records[1:], header="[Previous steps:]") + current
        windowed.append(prompt_cost(parts, counter))
        assert result.text_tokens <= budget, f"prompt {i}: text over budget"
        assert result.images <= 2, f"prompt {i}: more than 2 history images"
        base = prompt_cost(task_parts + current, counter)
        full.append(
            base
            + prompt_cost([{"type": "text", "text": "[Previous steps:]"}], counter)
            + history_cost
        )
        fields = step_fields(i, str(shot))
        memory.add_memory_item(MemoryItem(**fields))
        record = {k: fields[k] for k in KEYS if k in fields}
        history_cost = history_cost + prompt_cost(render_parts([record]), counter)
    step_tokens = history_cost.text_tokens / max(steps, 1)
    return {
        "windowed": windowed,
        "full": full,
        "calls": summarizer.calls,
        "memory": memory,
        "step_text_tokens": step_tokens,
        "seconds": seconds,
    }


COUNTERS: dict[str, TokenCounter] = {
    "default (flat 765/image)": EstimateCounter(),
    "OpenAI tiles (high)": EstimateCounter(image_cost=TileImageCost()),
    "Anthropic area": EstimateCounter(image_cost=AreaImageCost()),
}


def main() -> None:
    """Run the session under each counter and print the totals and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--budget", type=int, default=2000)
    args = parser.parse_args()
    print(
        f"{args.steps}-step session, 320x200 screenshot a step, text budget {args.budget}, last 2 screenshots"
    )
    failed = False
    medians: dict[bool, list[float]] = {False: [], True: []}
    for name, counter in COUNTERS.items():
        for compacting in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                out = run_session(
                    args.steps, pathlib.Path(tmp), counter, args.budget, compacting=compacting
                )
            windowed = sum(c.tokens for c in out["windowed"])
            full = sum(c.tokens for c in out["full"])
            ratio = full / windowed
            top = max(c.tokens for c in out["windowed"])
            calls = out["calls"]
            how = "window+summary" if compacting else "window alone  "
            note = (
                f"summariser called {len(calls)} times, {sum(calls)} records in all"
                if compacting
                else f"a step's text is {out['step_text_tokens']:.0f} tokens"
            )
            print(
                f"{name:26} full history {full:>10,}  {how} {windowed:>8,}  "
                f"ratio {ratio:5.1f}x  (largest prompt {top:,}; {note})"
            )
            medians[compacting].append(statistics.median(out["seconds"]))
            if compacting and name.startswith("default") and ratio < TARGET:
                failed = True
    plain, compact = statistics.median(medians[False]), statistics.median(medians[True])
    print(
        f"choosing a window: median {compact * 1e3:.3f} ms with compaction, {plain * 1e3:.3f} ms "
        f"without (ratio {compact / plain:.2f})"
    )
    print(
        f"target: at least {TARGET:.0f}x fewer tokens under the default counter: {'MISSED' if failed else 'met'}"
    )


if __name__ == "__main__":
    main()
