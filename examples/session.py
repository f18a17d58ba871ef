"""An offline agent session: record steps, build prompt history from chosen keys, export JSON.

A scripted stand-in for the model plays a desktop agent that saves a report
as PDF. Every step is recorded as a typed ``MemoryItem``; before each step the
agent builds its prompt history from only the keys the model needs, and at the
end the session is exported as a versioned JSON document.

Run: scripts/run            (or: .venv/bin/python examples/session.py --out DIR)
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import attrs

from agents.memory import Memory, MemoryItem, field

SCRIPT = [
    ("The report is open in Word; the File menu holds Export.", "click", "File menu"),
    ("Export offers PDF; choose it.", "click", "Export > Create PDF"),
    ("A file dialog asks for a name.", "type", "report-q3.pdf"),
    ("Confirm the dialog to write the file.", "click", "Publish"),
]
HISTORY_KEYS = ["step", "action", "target", "observation"]


class AgentStep(MemoryItem):
    """One step of the example agent: declared fields first, extras allowed."""

    step: int
    thought: str = ""
    action: str = ""
    target: str = ""
    cost: float = field(default=0.0, validator=attrs.validators.ge(0))


def scripted_model(step: int, history: list[dict[str, object]]) -> tuple[str, str, str]:
    """Stand in for the LLM: answer from the script, seeing only the prompt history."""
    assert len(history) == step - 1, "the prompt carries every earlier step"
    return SCRIPT[step - 1]


def run(out_dir: Path) -> Path:
    """Play the session and export it; return the path of the exported file."""
    memory = Memory(session_id="save-report-as-pdf", metadata={"task": "Save the Q3 report as PDF"})
    clock = dt.datetime(2024, 5, 1, 9, 0, tzinfo=dt.timezone.utc)
    for step in range(1, len(SCRIPT) + 1):
        history = memory.filter_memory_from_keys(HISTORY_KEYS)
        thought, action, target = scripted_model(step, history)
        memory.add_memory_item(
            AgentStep(
                step=step,
                thought=thought,
                action=action,
                target=target,
                cost=0.0004 * step,
                observation=f"after {action} on {target!r} the screen changed",
                at=clock + dt.timedelta(seconds=7 * step),
            )
        )
        print(f"step {step}: {action} {target!r}  (prompt history: {len(history)} items)")

    print("\nprompt history for the next step, keys", HISTORY_KEYS)
    for row in memory.filter_memory_from_keys(HISTORY_KEYS):
        print(" ", row)
    total = sum(item["cost"] for item in memory)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "session.json"
    memory.save(path)
    again = Memory.from_file(path)
    assert again == memory, "the export reads back as the same session"
    print(f"\n{len(memory)} steps, cost ${total:.4f}; exported to {path} and read back intact")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "out",
        help="folder for the exported session (default: examples/out)",
    )
    args = parser.parse_args()
    run(args.out)


if __name__ == "__main__":
    main()
