"""A UFO-like two-agent session, offline and deterministic.

A host agent reads the user's request from the shared blackboard and hands a
subtask to an app agent; the app agent works through the application step by
step, with a screenshot per step, and reports back on the blackboard. A
scripted stand-in for the model answers every prompt, so the session runs
without network access or API keys and prints the same thing every time.

What it shows:

* custom per-step fields, with a typed step class for the app agent;
* each prompt built from chosen keys under a token budget (a window that
  pins the subtask and caps images), plus the blackboard in UFO's prompt
  format under its own budget, and costed with ``prompt_cost``;
* a step callback that drops the images of old steps;
* earlier context injected as ordinary items;
* the session kept in a durable store (a SQLite file by default): every
  step is on disk when it is recorded, and running the example again
  continues the same session where the last run left off;
* the session exported as a kvmemory session file and a blackboard file,
  then this run replayed step by step.

Run it from the repository root::

    scripts/run                                   # or: python examples/ufo_two_agents.py
    python examples/ufo_two_agents.py OUTPUT.json --store postgresql://user:pw@host/db

The default output is ``examples/out/ufo_two_agents.json``; the default store
is the SQLite file ``kvmemory.db`` beside it.
"""

from __future__ import annotations

import argparse
import base64
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from agents.agent import BasicAgent, drop_old_images, replay
from agents.memory import Blackboard, Memory, MemoryChange, MemoryItem, field
from agents.memory.prompt import (
    EstimateCounter,
    Key,
    Window,
    latest_value,
    prompt_cost,
    render_parts,
)
from agents.memory.stores import open_memory

COUNTER = EstimateCounter()
HISTORY_BUDGET = 880  # tokens of step history per app-agent prompt (an image is 765)
BLACKBOARD_BUDGET = 1200  # tokens of blackboard in each prompt (screenshots included)
DEFAULT_OUTPUT = pathlib.Path(__file__).resolve().parent / "out" / "ufo_two_agents.json"
SESSION_ID = "ufo-two-agents-demo"

# A 1x1 PNG stands in for each screenshot.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

REQUEST = "Open the quarterly report in Word and add a one-line summary at the top."

# What the model says, in order, for each agent. A real agent would call a
# chat-completion API with the prompt parts instead.
SCRIPT: dict[str, list[dict[str, Any]]] = {
    "HostAgent": [
        {
            "observation": "The desktop shows Word and Excel.",
            "thought": "The request is about a Word document.",
            "subtask": "Open report.docx in Word and type the summary line at the top.",
            "application": "Word",
            "status": "ASSIGN",
            "cost": 0.0031,
        },
        {
            "observation": "The app agent reports the summary is in place.",
            "thought": "Nothing is left to do.",
            "subtask": "",
            "application": "",
            "status": "FINISH",
            "cost": 0.0024,
        },
    ],
    "AppAgent": [
        {
            "control_text": "File",
            "action": "click_input",
            "observation": "Word start screen.",
            "cost": 0.0042,
        },
        {
            "control_text": "Open",
            "action": "click_input",
            "observation": "The File menu is folded.",
            "error": "control 'Open' not found; the menu was scrolled",
            "cost": 0.0038,
        },
        {
            "control_text": "Open",
            "action": "click_input",
            "observation": "The Open dialog is shown.",
            "cost": 0.0040,
        },
        {
            "control_text": "report.docx",
            "action": "double_click",
            "observation": "The report is open.",
            "cost": 0.0044,
        },
        {
            "control_text": "Document body",
            "action": "type_keys",
            "args": {"text": "Summary: revenue grew 12% on the quarter."},
            "observation": "The summary line is at the top.",
            "status": "FINISH",
            "cost": 0.0047,
        },
    ],
}


class ScriptedModel:
    """An offline stand-in for a chat model: replies from SCRIPT, in order, per agent."""

    def __init__(self, script: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self._script = {name: list(replies) for name, replies in script.items()}
        self.calls = 0

    def complete(self, agent: str, parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Return the next scripted reply for ``agent``; ``parts`` is the prompt it would send."""
        if not any(p["type"] == "text" and "[Request History:]" in p["text"] for p in parts):
            msg = f"The prompt of {agent} has no request history; the blackboard was not included."
            raise RuntimeError(msg)
        self.calls += 1
        return dict(self._script[agent].pop(0))


class AppStep(MemoryItem):
    """One step of the app agent: typed fields, validated, plus any extra ones."""

    step: int
    control_text: str
    action: str
    status: str = "CONTINUE"
    cost: float = field(default=0.0, validator=attrs.validators.ge(0))


class HostAgent(BasicAgent):
    """Decides which application handles the request and what the subtask is."""

    def __init__(self, model: ScriptedModel) -> None:
        super().__init__("HostAgent", blackboard=Blackboard(counter=COUNTER))
        self.model = model
        # The earlier context (pinned: the first item) and the newest decisions.
        self.window = Window(max_tokens=160, pin_first=1, counter=COUNTER)

    def decide(self) -> MemoryItem:
        """Build the prompt, ask the model, and record the decision as a step."""
        parts: list[dict[str, Any]] = [
            {"type": "text", "text": "You are the host agent. Pick an application and a subtask."}
        ]
        parts += self.blackboard.blackboard_to_prompt(max_tokens=BLACKBOARD_BUDGET)
        if self.step:  # the first decision has no history yet
            history = self.build_history(["task", "step", "subtask", "status"], budget=self.window)
            parts += render_parts(history, header="[Your previous decisions:]")
        tokens = prompt_cost(parts, COUNTER).tokens
        reply = self.model.complete(self.name, parts)
        item = self.record_step(agent=self.name, prompt_tokens=tokens, **reply)
        print(
            f"[host step {item['step']}] prompt {tokens} tokens, {len(parts)} parts"
            f" -> {item['status']}: {item['subtask'] or '(done)'}"
        )
        return item


class AppAgent(BasicAgent):
    """Works inside one application, one control at a time."""

    # Old UFO logs say "Step", newer ones "step": the alias reads both.
    HISTORY_KEYS: ClassVar[dict[str, str | Key]] = {
        "subtask": "subtask",
        "step": Key("step", aliases=("Step",)),
        "control": "control_text",
        "action": "action",
        "observation": "observation",
        "error": Key("error", optional=True),  # only failed steps have one
        "screenshot": "screenshot",
    }

    def __init__(self, host: HostAgent, model: ScriptedModel, screens: pathlib.Path) -> None:
        super().__init__(
            "AppAgent", host=host, step_class=AppStep, step_callbacks=[drop_old_images(keep=2)]
        )
        self.model = model
        self.screens = screens
        # Pin the subtask (the first item) and attach at most the newest
        # earlier screenshot; the window charges text without the image paths,
        # as render_parts() sends it.
        self.window = Window(max_tokens=HISTORY_BUDGET, max_images=1, pin_first=1, counter=COUNTER)

    def screenshot(self) -> pathlib.Path:
        """Take the current screenshot (a stand-in PNG file)."""
        path = self.screens / f"app_step{self.step}.png"
        path.write_bytes(PIXEL)
        return path

    def work(self, subtask: str) -> None:
        """Run steps until the model says the subtask is finished."""
        self.inject_context([{"subtask": subtask}], source=self.host.name if self.host else "")
        while True:
            shot = self.screenshot()
            parts: list[dict[str, Any]] = [
                {"type": "text", "text": "You are the app agent. Choose the next control."}
            ]
            parts += self.blackboard.blackboard_to_prompt(
                last_k={"trajectories": 3, "screenshots": 1}, max_tokens=BLACKBOARD_BUDGET
            )
            kept, history_tokens, dropped = 0, 0, 0
            if self.step:  # the first step has no history yet
                window = self.history_window(self.window, self.HISTORY_KEYS)
                kept, history_tokens, dropped = len(window.records), window.tokens, window.dropped
                parts += render_parts(window.records, header="[Previous steps:]")
            else:
                parts.append({"type": "text", "text": f"[Subtask:] {subtask}"})
            parts += render_parts([{"screenshot": str(shot)}], header="[Current screenshot:]")
            cost = prompt_cost(parts, COUNTER)
            tokens, images = cost.tokens, cost.images
            reply = self.model.complete(self.name, parts)
            item = self.record_step(
                agent=self.name, prompt_tokens=tokens, screenshot=str(shot), **reply
            )
            note = f" (error: {item['error']})" if "error" in item else ""
            print(
                f"[app  step {item['step']}] prompt {tokens} tokens, {images} images, "
                f"history {kept} items/{history_tokens} tokens ({dropped} left out)"
                f" -> {item['action']} on {item['control_text']!r}{note}"
            )
            if item["status"] == "FINISH":
                break
        done = [i for i in self.memory if "action" in i]
        self.blackboard.add_trajectories(
            {
                "agent": self.name,
                "subtask": subtask,
                "steps": len(done),
                "result": done[-1]["observation"],
            }
        )
        self.blackboard.add_image(
            shot, {"agent": self.name, "step": done[-1]["step"], "note": "after the subtask"}
        )


def journal_into(journal: Memory, agents: Sequence[BasicAgent], run: int) -> None:
    """Make ``journal`` receive every item any of ``agents`` adds, marked with the run number."""

    def copy_adds(memory: Memory, change: MemoryChange) -> None:
        if change.kind == "add":
            for item in change.items:
                item.set_value("run", run)
            journal.add_memory_items(change.items)

    for agent in agents:
        agent.memory.add_callback(copy_adds)


def export(
    path: pathlib.Path, journal: Memory, blackboard: Blackboard, agents: Sequence[str]
) -> Memory:
    """Write the journal as one session file, and the blackboard beside it."""
    # Plain items, so the file opens anywhere without importing this script's classes.
    session = Memory(
        [MemoryItem.from_mapping(item.to_dict()) for item in journal],
        session_id=journal.session_id,
        metadata={"request": REQUEST, "agents": list(agents)},
    )
    session.save(path)
    blackboard.save(path.with_suffix(".blackboard.json"))
    return session


def main(argv: Sequence[str] | None = None) -> int:
    """Run the session and export it; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", type=pathlib.Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--store",
        help="store URL or SQLite path for the session (default: kvmemory.db beside OUTPUT)",
    )
    parser.add_argument("--session", default=SESSION_ID, help=f"session id (default: {SESSION_ID})")
    args = parser.parse_args(argv)
    output: pathlib.Path = args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    store = args.store or str(output.parent / "kvmemory.db")
    with open_memory(store, args.session) as journal:
        return run_session(journal, output, store)


def run_session(journal: Memory, output: pathlib.Path, store: str) -> int:
    """Play one run of the two agents into ``journal``, export and replay it."""
    earlier = len(journal)
    run = latest_value(journal, "run", 0) + 1
    if earlier:
        print(
            f"Continuing session {journal.session_id!r} in {store}: "
            f"{earlier} items from {run - 1} earlier run(s); this is run {run}."
        )
    else:
        print(f"New session {journal.session_id!r} in {store}; this is run {run}.")
    screens = output.parent / f"{output.stem}_screens"
    screens.mkdir(exist_ok=True)

    model = ScriptedModel(SCRIPT)
    host = HostAgent(model)
    app = AppAgent(host, model, screens)
    journal_into(journal, [host, app], run)
    host.inject_context(
        [{"task": "Email last week's report to the team (finished)."}], source="previous session"
    )
    host.blackboard.add_requests({"request": REQUEST})

    decision = host.decide()
    while decision["status"] != "FINISH":
        app.work(decision["subtask"])
        decision = host.decide()

    session = export(output, journal, host.blackboard, [host.name, app.name])
    this_run = [item for item in session if item.get_value("run") == run]
    total = sum(item.get_value("cost", 0.0) for item in this_run)
    print(
        f"Exported {len(session)} items to {output} (blackboard: {output.with_suffix('.blackboard.json')})"
    )
    print(f"Model calls: {model.calls}, total cost of this run: {total:.4f}")
    print()
    replay(this_run, file=sys.stdout, title=f"Replay of run {run}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
