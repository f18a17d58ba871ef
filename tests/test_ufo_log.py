"""UFO logs in: a log folder in UFO's documented shape becomes a session."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest

from agents.cli import main
from agents.integrations.ufo import import_ufo_log, read_ufo_log
from agents.memory import (
    CorruptSessionError,
    InvalidSessionIdError,
    MemoryItem,
    StoreNotFoundError,
    to_messages,
)
from agents.memory.stores import open_memory, open_store

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _steps() -> list[dict[str, Any]]:
    """Two steps with the fields UFO's step-log docs list for HostAgent and AppAgent (values made up)."""
    host = {
        "Observation": "The desktop shows a file explorer and an editor.",
        "Thought": "The note should be written in the editor.",
        "CurrentSubtask": "Write the note",
        "Message": ["Type the text into the document."],
        "ControlLabel": "3",
        "ControlText": "Notes - Editor",
        "Plan": ["Save the note"],
        "Status": "ASSIGN",
        "Comment": "Handing over to the editor.",
        "Questions": [],
        "Bash": "",
        "Step": 1,
        "RoundStep": 1,
        "AgentStep": 1,
        "Round": 0,
        "Request": "Write a note that says hello and save it.",
        "Agent": "HostAgent",
        "AgentName": "HostAgent",
        "Application": "explorer.exe",
        "Cost": 0.0125,
        "Results": "",
        "CleanScreenshot": "logs/note_task/action_step1.png",
        "AnnotatedScreenshot": "C:\\UFO\\logs\\note_task\\action_step1_annotated.png",
        "ConcatScreenshot": "logs/note_task/action_step1_concat.png",
        "SelectedControlScreenshot": "logs/note_task/action_step1_selected_controls.png",
        "time_cost": {"screenshot": 0.41, "llm": 2.5},
    }
    app = {
        "Observation": "An empty document is open.",
        "Thought": "Type the greeting.",
        "ControlLabel": "12",
        "ControlText": "Document",
        "Function": "set_edit_text",
        "Args": {"text": "hello"},
        "Status": "CONTINUE",
        "Plan": ["Save with Ctrl+S"],
        "Comment": "",
        "SaveScreenshot": {"save": False, "reason": ""},
        "Step": 2,
        "RoundStep": 2,
        "AgentStep": 1,
        "Round": 0,
        "Subtask": "Write the note",
        "SubtaskIndex": 0,
        "Action": "set_edit_text",
        "ActionType": "UIControl",
        "Request": "Write a note that says hello and save it.",
        "Agent": "AppAgent",
        "AgentName": "AppAgent/editor",
        "Application": "notepad.exe",
        "Cost": 0.0093,
        "Results": "hello",
        "CleanScreenshot": "logs/note_task/action_step2.png",
        "AnnotatedScreenshot": "",
        "ConcatScreenshot": "logs/note_task/action_step2_concat.png",
        "time_cost": {"screenshot": 0.38, "llm": 1.9, "action": 0.2},
    }
    return [host, app]


def _log_folder(root: Path, steps: list[dict[str, Any]] | None = None) -> Path:
    folder = root / "logs" / "note_task"
    folder.mkdir(parents=True)
    lines = [json.dumps(step) for step in steps or _steps()]
    (folder / "response.log").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    for name in [
        "action_step1.png",
        "action_step1_annotated.png",
        "action_step1_concat.png",
        "action_step2.png",
    ]:
        (folder / name).write_bytes(PNG)
    return folder


def test_every_field_is_kept(tmp_path: Path) -> None:
    """Each line becomes one item with all of its fields and values, in order."""
    memory = read_ufo_log(_log_folder(tmp_path))
    for item, step in zip(memory, _steps(), strict=True):
        fields = item.to_dict()
        assert list(fields)[: len(step)] == list(step)
        assert {k: fields[k] for k in step} == step


def test_steps_are_indexed_by_ufo_step_key(tmp_path: Path) -> None:
    """The memory uses UFO's 'Step' key and is named for the folder."""
    memory = read_ufo_log(_log_folder(tmp_path))
    assert memory.step_key == "Step"
    assert memory.steps() == [1, 2]
    assert memory.session_id == "note_task"


def test_screenshots_are_linked(tmp_path: Path) -> None:
    """Screenshot fields are found as written, in the folder, or by name; the rest are listed as missing."""
    folder = _log_folder(tmp_path)
    memory = read_ufo_log(folder)
    host, app = memory
    assert host["screenshots"] == [
        str((folder / "action_step1.png").resolve()),
        str((folder / "action_step1_annotated.png").resolve()),
        str((folder / "action_step1_concat.png").resolve()),
    ]
    assert host["missing_screenshots"] == ["logs/note_task/action_step1_selected_controls.png"]
    assert app["screenshots"] == [str((folder / "action_step2.png").resolve())]
    assert app["missing_screenshots"] == ["logs/note_task/action_step2_concat.png"]


def test_linked_screenshots_render_as_images(tmp_path: Path) -> None:
    """The linked screenshots go into chat messages as data: URLs."""
    memory = read_ufo_log(_log_folder(tmp_path))
    (message,) = to_messages(memory.content[1:], text_keys=["Step", "Action"])
    assert message["content"][0]["text"] == '{"Step":2,"Action":"set_edit_text"}'
    assert message["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_no_link_keeps_the_lines_as_they_are(tmp_path: Path) -> None:
    """link_screenshots=False gives exactly the logged objects."""
    memory = read_ufo_log(_log_folder(tmp_path), link_screenshots=False)
    assert memory.to_list_of_dicts() == _steps()


def test_log_file_path_works_too(tmp_path: Path) -> None:
    """The path may name response.log itself."""
    folder = _log_folder(tmp_path)
    assert len(read_ufo_log(folder / "response.log")) == 2


def test_import_writes_a_store_session(tmp_path: Path) -> None:
    """import_ufo_log writes every step to the session, and a stored memory reads them by step."""
    folder = _log_folder(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert import_ufo_log(folder, url, "ufo-1") == 2
    with open_memory(url, "ufo-1", step_key="Step") as memory:
        assert memory.content == read_ufo_log(folder).content
        assert memory.filter_memory_from_steps([2])[0]["Action"] == "set_edit_text"


def test_import_refuses_a_non_empty_session(tmp_path: Path) -> None:
    """A session that holds items is refused unless append is given."""
    folder = _log_folder(tmp_path)
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        import_ufo_log(folder, store, "ufo-1")
        with pytest.raises(InvalidSessionIdError, match=r"Session 'ufo-1' already holds 2 items"):
            import_ufo_log(folder, store, "ufo-1")
        assert import_ufo_log(folder, store, "ufo-1", append=True) == 2
        assert store.count("ufo-1") == 4


def test_bad_line_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    """A line that is not JSON before the last one is named by number, and the store is left untouched."""
    folder = _log_folder(tmp_path)
    with (folder / "response.log").open("a", encoding="utf-8") as log:
        log.write('{"Step": 3, "Action": \n{"Step": 4}\n')
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(CorruptSessionError, match=r"Line 4 of .*response\.log' is not valid JSON"):
        import_ufo_log(folder, url, "ufo-1")
    with open_store(url) as store:
        assert store.count("ufo-1") == 0


def test_line_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    """A JSON value that is not an object is refused, naming the line."""
    folder = _log_folder(tmp_path)
    (folder / "response.log").write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(CorruptSessionError, match=r"Line 1 of .* holds list"):
        read_ufo_log(folder)


def test_missing_log_is_named(tmp_path: Path) -> None:
    """A folder without response.log raises StoreNotFoundError naming the path."""
    with pytest.raises(StoreNotFoundError, match=r"No UFO log at .*nowhere"):
        read_ufo_log(tmp_path / "nowhere")


def test_link_field_clash_is_refused(tmp_path: Path) -> None:
    """A step that already has a 'screenshots' field is refused with the way out."""
    step = {"Step": 1, "CleanScreenshot": "logs/note_task/action_step1.png", "screenshots": ["x"]}
    folder = _log_folder(tmp_path, [step])
    with pytest.raises(
        CorruptSessionError, match=r"already has a field 'screenshots'.*link_screenshots=False"
    ):
        read_ufo_log(folder)
    assert read_ufo_log(folder, link_screenshots=False)[0] == MemoryItem(**step)


def test_command_line_import(tmp_path: Path) -> None:
    """kvmemory import ufo-log writes the session and says how many steps it imported."""
    folder = _log_folder(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    out = io.StringIO()
    status = main(["import", "ufo-log", str(folder), "--store", url, "--session", "ufo-1"], out=out)
    assert status == 0
    assert out.getvalue() == f"imported 2 steps into session 'ufo-1' of {url}\n"
    with open_memory(url, "ufo-1", step_key="Step") as memory:
        assert memory.content == read_ufo_log(folder).content


def test_command_line_no_link_and_append(tmp_path: Path) -> None:
    """--no-link imports the lines as logged; a second import needs --append."""
    folder = _log_folder(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    argv = ["import", "ufo-log", str(folder), "--store", url, "--session", "ufo-1", "--no-link"]
    assert main(argv, out=io.StringIO()) == 0
    assert main(argv, out=io.StringIO()) == 1
    assert main([*argv, "--append"], out=io.StringIO()) == 0
    with open_memory(url, "ufo-1", step_key="Step") as memory:
        assert memory.to_list_of_dicts() == _steps() * 2


def test_command_line_reports_a_missing_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path without a UFO log is a usage error (exit 2), as a missing file is for other commands."""
    status = main(
        [
            "import",
            "ufo-log",
            str(tmp_path / "none"),
            "--store",
            str(tmp_path / "r.db"),
            "--session",
            "s",
        ]
    )
    assert status == 2
    assert "No UFO log at" in capsys.readouterr().err
