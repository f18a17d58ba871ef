"""Run examples/ufo_two_agents.py as a user would and check what it prints and exports."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from agents.memory import Blackboard, ImageItem, Memory

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "ufo_two_agents.py"

EXPECTED_HEAD = """\
New session 'ufo-two-agents-demo' in kvmemory.db; this is run 1.
[host step 0] prompt 66 tokens, 5 parts -> ASSIGN: Open report.docx in Word and type the summary line at the top.
[app  step 0] prompt 853 tokens, 1 images, history 0 items/0 tokens (0 left out) -> click_input on 'File'
[app  step 1] prompt 1645 tokens, 2 images, history 2 items/809 tokens (0 left out) -> click_input on 'Open' (error: control 'Open' not found; the menu was scrolled)
[app  step 2] prompt 1683 tokens, 2 images, history 3 items/848 tokens (0 left out) -> click_input on 'Open'
[app  step 3] prompt 1706 tokens, 2 images, history 4 items/872 tokens (0 left out) -> double_click on 'report.docx'
[app  step 4] prompt 1708 tokens, 2 images, history 4 items/874 tokens (1 left out) -> type_keys on 'Document body'
[host step 1] prompt 933 tokens, 10 parts -> FINISH: (done)
Exported 9 items to session.json (blackboard: session.blackboard.json)
Model calls: 7, total cost of this run: 0.0266
"""


def run_example(cwd: pathlib.Path, *extra: str) -> str:
    """Run the example in ``cwd`` with output 'session.json' and return its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "error"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "session.json", *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, str]:
    """Run the example once for the module; return its folder and stdout."""
    folder = tmp_path_factory.mktemp("example")
    return folder, run_example(folder)


@pytest.mark.slow
def test_example_prints_each_step_and_the_export(first_run: tuple[pathlib.Path, str]) -> None:
    """The example prints one line per model call, then the export summary, exactly."""
    _, out = first_run
    assert out.startswith(EXPECTED_HEAD)


@pytest.mark.slow
def test_example_replays_the_session(first_run: tuple[pathlib.Path, str]) -> None:
    """The printed replay shows the error, the dropped and attached images, and the total cost."""
    _, out = first_run
    replay = out[len(EXPECTED_HEAD) :]
    assert replay.startswith("\nReplay of run 1\n── item 0 (no step) ──\n")
    assert "── step 1 · AppAgent · error ──\n" in replay
    assert "! error: control 'Open' not found; the menu was scrolled\n" in replay
    assert replay.count("  image_dropped: true\n") == 3
    assert "  images attached: session_screens/app_step4.png\n" in replay
    assert replay.endswith("total cost: 0.0266\n")


@pytest.mark.slow
def test_example_is_deterministic(
    first_run: tuple[pathlib.Path, str], tmp_path: pathlib.Path
) -> None:
    """A second run in another folder prints exactly the same text."""
    assert run_example(tmp_path) == first_run[1]


@pytest.mark.slow
def test_example_exports_a_session_file(first_run: tuple[pathlib.Path, str]) -> None:
    """The exported session opens with Memory.from_file, in call order, with custom fields."""
    folder, _ = first_run
    session = Memory.from_file(folder / "session.json")
    assert session.session_id == "ufo-two-agents-demo"
    assert [item.get_value("agent") for item in session if "agent" in item] == [
        "HostAgent",
        *["AppAgent"] * 5,
        "HostAgent",
    ]
    assert session[3].get_value("prompt_tokens") == 853


@pytest.mark.slow
def test_example_exports_the_blackboard(
    first_run: tuple[pathlib.Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exported blackboard loads, keeps its screenshot as an image, and renders a prompt."""
    folder, _ = first_run
    monkeypatch.chdir(folder)
    board = Blackboard.from_file("session.blackboard.json")
    assert (len(board.requests), len(board.trajectories)) == (1, 1)
    assert isinstance(board.screenshots[0], ImageItem)
    parts = board.blackboard_to_prompt()
    assert parts[-1]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.slow
def test_example_keeps_the_session_in_sqlite(first_run: tuple[pathlib.Path, str]) -> None:
    """The run leaves its session in the SQLite file beside the export, with every item."""
    from agents.memory.stores import open_store

    folder, _ = first_run
    with open_store(str(folder / "kvmemory.db")) as store:
        assert store.sessions() == ["ufo-two-agents-demo"]
        # AppStep is defined in the example's __main__, which this process cannot import.
        items = store.read("ufo-two-agents-demo", on_unknown_class="base")
    assert len(items) == 9
    assert {item.get_value("run") for item in items} == {1}


@pytest.mark.slow
def test_second_run_continues_the_session(tmp_path: pathlib.Path) -> None:
    """Running the example again in the same folder continues the stored session and says so."""
    run_example(tmp_path)
    second = run_example(tmp_path)
    assert second.startswith(
        "Continuing session 'ufo-two-agents-demo' in kvmemory.db: 9 items from 1 earlier run(s); this is run 2.\n"
    )
    assert "Exported 18 items to session.json" in second
    assert "\nReplay of run 2\n" in second
    session = Memory.from_file(tmp_path / "session.json")
    assert [item.get_value("run") for item in session] == [1] * 9 + [2] * 9


@pytest.mark.slow
def test_example_runs_on_another_store(tmp_path: pathlib.Path) -> None:
    """--store points the example at another store URL (here a JSONL log directory)."""
    out = run_example(tmp_path, "--store", f"jsonl://{tmp_path / 'logs'}", "--session", "other")
    assert out.startswith(f"New session 'other' in jsonl://{tmp_path / 'logs'}; this is run 1.\n")
    assert (tmp_path / "logs").is_dir()
    assert not (tmp_path / "kvmemory.db").exists()
