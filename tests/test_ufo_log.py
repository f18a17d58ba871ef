"""UFO logs in: a log folder in UFO's documented shape becomes a session."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.cli import main
from agents.integrations.ufo import import_ufo_log, read_ufo_log
from agents.memory import (
    CorruptSessionError,
    InvalidSessionIdError,
    MemoryItem,
    SkippedRecordWarning,
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


# -- UFO 3 logs ------------------------------------------------------------------------------------


def _ufo3_steps() -> list[dict[str, Any]]:
    """A HostAgent line and two AppAgent lines in UFO 3's shape (values made up).

    Each is what UFO 3's processing context writes (its ``selected_keys`` that
    are attributes of the context): HostAgent lines have no ``session_step``
    and no screenshot field, and carry the context's ``cost``; AppAgent lines
    carry ``session_step``, ``llm_cost`` and five ``*_screenshot_path`` fields.
    """
    host = {
        "status": "ASSIGN",
        "round_step": 0,
        "agent_step": 0,
        "round_num": 0,
        "subtask_index": 0,
        "action": [{"function": "select_application_window", "arguments": {"id": "4"}}],
        "function_call": "select_application_window",
        "action_representation": "select_application_window(id='4')",
        "arguments": {"id": "4"},
        "action_type": "",
        "request": "Write a note that says hello and save it.",
        "agent_type": "HostAgent",
        "agent_name": "HostAgent",
        "application": "",
        "cost": 0.0,
        "results": "",
        "result": None,
        "last_error": None,
        "execution_times": {"data_collection": 0.4, "llm_interaction": 2.1},
        "total_time": 2.6,
        "control_log": {},
    }
    apps = [
        {
            "agent_type": "AppAgent",
            "agent_name": "AppAgent/editor",
            "app_root": "notepad.exe",
            "application_process_name": "notepad.exe",
            "session_step": step,
            "round_step": step,
            "round_num": 0,
            "status": "CONTINUE",
            "request": "Write a note that says hello and save it.",
            "llm_cost": 0.0125 if step == 1 else 0.0325,
            "observation": "An empty document.",
            "thought": "Type the greeting.",
            "plan": ["Save"],
            "comment": "",
            "action": [{"action_string": "set_edit_text", "result": "ok"}],
            "action_type": "UIControl",
            "subtask": "Type the note",
            "action_representation": "set_edit_text(text='hello')",
            "result": "ok",
            "clean_screenshot_path": f"logs/note3/action_step{step}.png",
            "annotated_screenshot_path": f"logs/note3/action_step{step}_annotated.png",
            "concat_screenshot_path": f"logs/note3/action_step{step}_concat.png",
            "selected_control_screenshot_path": f"logs/note3/action_step{step}_selected_controls.png",
            "desktop_screenshot_path": f"logs/note3/desktop_step{step}.png" if step == 1 else "",
            "action_success": True,
            "function_call": "set_edit_text",
            "save_screenshot": {"save": False, "reason": ""},
            "control_log": {},
        }
        for step in (1, 2)
    ]
    return [host, *apps]


def _ufo3_folder(root: Path) -> Path:
    folder = root / "logs" / "note3"
    folder.mkdir(parents=True)
    lines = [json.dumps(step) for step in _ufo3_steps()]
    (folder / "response.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    names = ["desktop_step1.png"] + [
        f"action_step{step}{suffix}.png"
        for step in (1, 2)
        for suffix in ("", "_annotated", "_concat", "_selected_controls")
    ]
    for name in names:
        (folder / name).write_bytes(PNG)
    return folder


def test_ufo3_log_is_recognised_and_steps_by_session_step(tmp_path: Path) -> None:
    """A UFO 3 folder reads with step key session_step, its AppAgent lines as steps 1 and 2."""
    memory = read_ufo_log(_ufo3_folder(tmp_path))
    assert memory.step_key == "session_step"
    assert memory.steps() == [1, 2]
    assert memory.metadata == {
        "source": "ufo-log",
        "ufo_generation": "ufo3",
        "cost_keys": ["llm_cost"],
        "agent_keys": ["agent_type"],
    }
    assert [item["agent_type"] for item in memory] == ["HostAgent", "AppAgent", "AppAgent"]


def test_ufo3_every_screenshot_field_is_linked(tmp_path: Path) -> None:
    """Every *_screenshot_path field UFO 3 writes is linked from the folder; empty ones are left alone."""
    folder = _ufo3_folder(tmp_path)
    host, first, second = read_ufo_log(folder)
    assert "screenshots" not in host
    assert first["screenshots"] == [
        *(
            str((folder / f"action_step1{suffix}.png").resolve())
            for suffix in ("", "_annotated", "_concat", "_selected_controls")
        ),
        str((folder / "desktop_step1.png").resolve()),
    ]
    assert len(second["screenshots"]) == 4
    assert "missing_screenshots" not in first
    assert "missing_screenshots" not in second


def test_ufo2_log_is_recognised_with_its_cost_field(tmp_path: Path) -> None:
    """A UFO 2 folder reads with step key Step and cost field Cost."""
    memory = read_ufo_log(_log_folder(tmp_path))
    assert memory.metadata["ufo_generation"] == "ufo2"
    assert memory.metadata["cost_keys"] == ["Cost"]


def test_generation_and_step_key_can_be_named(tmp_path: Path) -> None:
    """generation= and step_key= override what the lines show."""
    folder = _ufo3_folder(tmp_path)
    memory = read_ufo_log(folder, generation="ufo2", step_key="round_step")
    assert memory.metadata["ufo_generation"] == "ufo2"
    assert memory.step_key == "round_step"
    assert memory.steps() == [0, 1, 2]
    with pytest.raises(ValueError, match="generation must be 'auto', 'ufo2' or 'ufo3'"):
        read_ufo_log(folder, generation="ufo4")  # type: ignore[arg-type]  # the refusal is tested


# -- damaged lines -----------------------------------------------------------------------------------


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    """A run killed mid-write leaves a cut last line: it is skipped with a warning naming it."""
    folder = _ufo3_folder(tmp_path)
    with (folder / "response.log").open("a", encoding="utf-8") as log:
        log.write('{"agent_type": "AppAgent", "session_step": 3, "thou')
    with pytest.warns(SkippedRecordWarning, match=r"Line 4 of .*the last line, is not valid JSON"):
        memory = read_ufo_log(folder)
    assert memory.steps() == [1, 2]


def test_truncated_last_line_does_not_stop_the_import(tmp_path: Path) -> None:
    """import_ufo_log writes the complete lines of a log whose last line was cut."""
    folder = _log_folder(tmp_path)
    with (folder / "response.log").open("a", encoding="utf-8") as log:
        log.write('{"Step": 3, "Acti')
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.warns(SkippedRecordWarning, match="the last line"):
        assert import_ufo_log(folder, url, "ufo-1") == 2


# A last line that ends with its newline was written whole: damage there is an error, not a cut.
DAMAGED_WHOLE_LAST_LINES = {
    "invalid UTF-8": b'{"Step": 3, "Text": "caf\xe9 \xff\xfe"}\n',
    "NUL bytes": b'{"Step": 3, "Text": "a\x00\x00b"}\n',
    "nested 2,000 deep": b'{"Step": 3, "Tree": ' + b"[" * 2000 + b"]" * 2000 + b"}\n",
    "cut before its newline": b'{"Step": 3,\n',
}


def _store_with_a_session(tmp_path: Path) -> tuple[Path, str, list[dict[str, Any]]]:
    """Return a log folder of two good steps, a store URL whose session 'ufo-1' holds them, and its items."""
    folder = _log_folder(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert import_ufo_log(folder, url, "ufo-1") == 2
    return folder, url, _stored(url)


def _stored(url: str) -> list[dict[str, Any]]:
    with open_memory(url, "ufo-1", step_key="Step") as memory:
        return memory.to_list_of_dicts()


@pytest.mark.parametrize("line", DAMAGED_WHOLE_LAST_LINES.values(), ids=DAMAGED_WHOLE_LAST_LINES)
def test_damaged_last_line_with_its_newline_fails_the_import(tmp_path: Path, line: bytes) -> None:
    """A damaged last line that ends with its newline is named by file and line, and nothing is written."""
    folder, url, before = _store_with_a_session(tmp_path)
    with (folder / "response.log").open("ab") as log:
        log.write(line)
    with pytest.raises(CorruptSessionError, match=r"Line 4 of '.*response\.log' is not valid JSON"):
        import_ufo_log(folder, url, "ufo-1", append=True)
    assert _stored(url) == before


@pytest.mark.parametrize("line", DAMAGED_WHOLE_LAST_LINES.values(), ids=DAMAGED_WHOLE_LAST_LINES)
def test_command_fails_on_a_damaged_last_line_with_its_newline(tmp_path: Path, line: bytes) -> None:
    """kvmemory import ufo-log, run as a program, exits 1 naming the file and line, and the store is unchanged."""
    folder, url, before = _store_with_a_session(tmp_path)
    with (folder / "response.log").open("ab") as log:
        log.write(line)
    argv = ["import", "ufo-log", str(folder), "--store", url, "--session", "ufo-1", "--append"]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "kvmemory", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    log = os.fspath(folder / "response.log")
    assert done.stderr.startswith(f"kvmemory: error: Line 4 of {log!r} is not valid JSON")
    assert done.stderr.count("\n") == 1
    assert _stored(url) == before


def test_cut_last_line_with_damage_is_still_skipped(tmp_path: Path) -> None:
    """A last line without its newline is a cut, whatever it holds: skipped with a warning."""
    folder = _log_folder(tmp_path)
    with (folder / "response.log").open("ab") as log:
        log.write(b'{"Step": 3, "Text": "caf\xe9 \xff')
    with pytest.warns(SkippedRecordWarning, match=r"Line 4 of .*the last line, .*no newline"):
        memory = read_ufo_log(folder)
    assert memory.steps() == [1, 2]


def test_damage_in_the_middle_stays_an_error(tmp_path: Path) -> None:
    """A bad line followed by good ones is refused, naming it."""
    folder = _ufo3_folder(tmp_path)
    log = folder / "response.log"
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1][:40]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorruptSessionError, match=r"Line 2 of .* is not valid JSON"):
        read_ufo_log(folder)


# -- big integers ----------------------------------------------------------------------------------


def test_integers_beyond_64_bits_stay_ints(tmp_path: Path) -> None:
    """Integers too big for 64 bits are read as ints, exactly, and survive a store."""
    big = 2**64 + 7
    folder = _log_folder(tmp_path, [{"Step": 1, "Handle": big, "Negative": -(10**30), "Small": 5}])
    (item,) = read_ufo_log(folder)
    assert item["Handle"] == big
    assert type(item["Handle"]) is int
    assert item["Negative"] == -(10**30)
    assert type(item["Negative"]) is int
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    import_ufo_log(folder, url, "ufo-1")
    with open_store(url) as store:
        assert store.read("ufo-1")[0]["Handle"] == big


# -- the CLI ---------------------------------------------------------------------------------------


def test_command_line_step_key_option(tmp_path: Path) -> None:
    """--step-key names the step field of the imported session."""
    folder = _ufo3_folder(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    argv = ["import", "ufo-log", str(folder), "--store", url, "--session", "u3"]
    assert main([*argv, "--step-key", "round_step"], out=io.StringIO()) == 0
    with open_store(url) as store:
        info = store.session_info("u3")
        assert info is not None
        assert info.step_key == "round_step"


def test_commands_use_the_sessions_stored_step_key(tmp_path: Path) -> None:
    """show --steps and replay read a UFO session by its own step key (Step), not 'step'."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    import_ufo_log(_log_folder(tmp_path), url, "ufo-1")
    out = io.StringIO()
    assert (
        main(["show", url, "--session", "ufo-1", "--steps", "2", "--keys", "Action"], out=out) == 0
    )
    assert out.getvalue() == "Action='set_edit_text'\n"
    out = io.StringIO()
    assert main(["show", url, "--session", "ufo-1", "--steps", "2", "--json"], out=out) == 0
    assert [row["Step"] for row in json.loads(out.getvalue())] == [2]
    out = io.StringIO()
    assert main(["replay", url, "--session", "ufo-1", "--no-color"], out=out) == 0
    assert "(no step)" not in out.getvalue()
    assert "step 2" in out.getvalue()
    out = io.StringIO()
    assert main(["replay", url, "--session", "ufo-1", "--last", "1", "--no-color"], out=out) == 0
    assert "step 2" in out.getvalue()


def test_stats_sums_the_cost_field_the_source_wrote(tmp_path: Path) -> None:
    """stats sums llm_cost for a UFO 3 import and Cost for a UFO 2 import, unless told otherwise."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    import_ufo_log(_ufo3_folder(tmp_path / "a"), url, "u3")
    import_ufo_log(_log_folder(tmp_path / "b"), url, "u2")

    def stats(*extra: str) -> dict[str, Any]:
        out = io.StringIO()
        assert main(["stats", url, "--json", *extra], out=out) == 0
        result: dict[str, Any] = json.loads(out.getvalue())
        return result

    u3 = stats("--session", "u3")
    assert (u3["total_cost"], u3["cost_fields"]) == (0.045, ["llm_cost"])
    with_host = stats("--session", "u3", "--cost-field", "llm_cost,cost")
    assert with_host["total_cost"] == 0.045
    u2 = stats("--session", "u2")
    assert (u2["total_cost"], u2["cost_fields"]) == (0.0218, ["Cost"])
    both = stats("--session", "u3", "--cost-field", "llm_cost,round_step")
    assert (both["total_cost"], both["cost_fields"]) == (3.045, ["llm_cost", "round_step"])
    assert stats("--session", "u2", "--cost-field", "nothing")["total_cost"] == 0


# -- screenshots are untrusted references: only image files inside the log folder are linked ----------


SECRET = PNG + b"private holiday picture: never leave this file"


def _outputs(tmp_path: Path, folder: Path, **options: Any) -> bytes:
    """Everything an import makes visible: chat messages, the store file, show --json, the HTML timeline."""
    memory = read_ufo_log(folder, **options)
    messages = json.dumps(to_messages(memory.content, text_keys=["Step"])).encode()
    db = tmp_path / "out.db"
    import_ufo_log(folder, db, "s", **options)
    shown = io.StringIO()
    assert main(["show", str(db), "--session", "s", "--json"], out=shown) == 0
    html = tmp_path / "timeline.html"
    assert main(["replay", str(db), "--session", "s", "--html", str(html)], out=io.StringIO()) == 0
    return messages + db.read_bytes() + shown.getvalue().encode() + html.read_bytes()


def _assert_secret_absent(output: bytes) -> None:
    assert base64.b64encode(SECRET) not in output
    assert b"never leave this file" not in output


def _hostile_folder(tmp_path: Path, reference: str) -> Path:
    (tmp_path / "private").mkdir(exist_ok=True)
    (tmp_path / "private" / "holiday.png").write_bytes(SECRET)
    return _log_folder(tmp_path, [{"Step": 1, "CleanScreenshot": reference}])


def test_parent_folder_reference_is_never_linked(tmp_path: Path) -> None:
    """A screenshot named '../../private/holiday.png' is not linked, and its bytes reach no output."""
    folder = _hostile_folder(tmp_path, "../../private/holiday.png")
    with pytest.warns(SkippedRecordWarning, match=r"names a parent folder"):
        (item,) = read_ufo_log(folder)
    assert "screenshots" not in item
    assert item["missing_screenshots"] == ["../../private/holiday.png"]
    with pytest.warns(SkippedRecordWarning):
        _assert_secret_absent(_outputs(tmp_path, folder))


def test_symlink_leaving_the_folder_is_never_linked(tmp_path: Path) -> None:
    """A link inside the folder to a file outside, or through a linked folder, is not linked."""
    folder = _hostile_folder(tmp_path, "holiday.png")
    (folder / "holiday.png").symlink_to(tmp_path / "private" / "holiday.png")
    (folder / "pictures").symlink_to(tmp_path / "private", target_is_directory=True)
    step = {"Step": 1, "CleanScreenshot": "holiday.png", "ConcatScreenshot": "pictures/holiday.png"}
    (folder / "response.log").write_text(json.dumps(step) + "\n", encoding="utf-8")
    with pytest.warns(SkippedRecordWarning, match=r"a link that leaves the log folder"):
        (item,) = read_ufo_log(folder)
    assert "screenshots" not in item
    with pytest.warns(SkippedRecordWarning):
        _assert_secret_absent(_outputs(tmp_path, folder))


def test_link_that_stays_inside_the_folder_is_linked(tmp_path: Path) -> None:
    """A link to an image inside the same folder is followed."""
    folder = _log_folder(tmp_path, [{"Step": 1, "CleanScreenshot": "alias.png"}])
    (folder / "alias.png").symlink_to(folder / "action_step1.png")
    (item,) = read_ufo_log(folder)
    assert item["screenshots"] == [str((folder / "action_step1.png").resolve())]


def test_absolute_path_is_linked_only_when_allowed(tmp_path: Path) -> None:
    """An absolute path outside the folder is linked only with allow_absolute=True."""
    outside = str(tmp_path / "private" / "holiday.png")
    folder = _hostile_folder(tmp_path, outside)
    (item,) = read_ufo_log(folder)
    assert "screenshots" not in item
    assert item["missing_screenshots"] == [outside]
    _assert_secret_absent(_outputs(tmp_path, folder))
    (allowed,) = read_ufo_log(folder, allow_absolute=True)
    assert allowed["screenshots"] == [str((tmp_path / "private" / "holiday.png").resolve())]


def test_command_line_allow_absolute(tmp_path: Path) -> None:
    """--allow-absolute links an absolute screenshot path; without it the path is only listed."""
    outside = str(tmp_path / "private" / "holiday.png")
    folder = _hostile_folder(tmp_path, outside)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["import", "ufo-log", str(folder), "--store", url]
    assert main([*base, "--session", "a"], out=io.StringIO()) == 0
    assert main([*base, "--session", "b", "--allow-absolute"], out=io.StringIO()) == 0
    with open_store(url) as store:
        assert "screenshots" not in store.read("a")[0]
        assert store.read("b")[0]["screenshots"] == [str(Path(outside).resolve())]


def test_file_that_is_not_an_image_is_not_linked(tmp_path: Path) -> None:
    """A text file named like a screenshot is not linked (checked by content), so prompts still build."""
    folder = _log_folder(tmp_path, [{"Step": 1, "CleanScreenshot": "notes.png"}])
    (folder / "notes.png").write_text("meeting notes, not a picture", encoding="utf-8")
    with pytest.warns(SkippedRecordWarning, match=r"not an image file"):
        (item,) = read_ufo_log(folder)
    assert "screenshots" not in item
    assert to_messages([item], text_keys=["Step"]) == [{"role": "user", "content": '{"Step":1}'}]


def test_log_file_linked_from_outside_is_refused(tmp_path: Path) -> None:
    """A response.log that is a link to a file outside its folder is not read."""
    (tmp_path / "elsewhere.log").write_text('{"Step": 1}\n', encoding="utf-8")
    folder = tmp_path / "logs" / "task"
    folder.mkdir(parents=True)
    (folder / "response.log").symlink_to(tmp_path / "elsewhere.log")
    with pytest.raises(CorruptSessionError, match=r"is a link to a file outside its folder"):
        read_ufo_log(folder)


def test_image_too_large_for_a_prompt_is_not_linked(tmp_path: Path) -> None:
    """A screenshot over 20 MiB is not linked, so the prompts of its step still build."""
    folder = _log_folder(tmp_path, [{"Step": 1, "CleanScreenshot": "huge.png"}])
    with (folder / "huge.png").open("wb") as big:
        big.write(PNG)
        big.truncate(21 * 1024 * 1024)
    with pytest.warns(SkippedRecordWarning, match=r"larger than 20971520 bytes"):
        (item,) = read_ufo_log(folder)
    assert "screenshots" not in item
    assert to_messages([item], text_keys=["Step"]) == [{"role": "user", "content": '{"Step":1}'}]


@pytest.mark.parametrize("key", ["screenshot", "screenshot_path", "image", "image_path", "images"])
def test_field_prompt_renderers_read_from_disk_is_refused(tmp_path: Path, key: str) -> None:
    """A field such as 'screenshot' would be read from disk as written by to_messages: refused, nothing written."""
    outside = str(tmp_path / "private" / "holiday.png")
    folder = _hostile_folder(tmp_path, "a.png")
    step = {"Step": 1, key: [outside] if key == "images" else outside}
    (folder / "response.log").write_text(json.dumps(step) + "\n", encoding="utf-8")
    with pytest.raises(CorruptSessionError, match=rf"has a field '{key}' holding the path"):
        read_ufo_log(folder)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(CorruptSessionError):
        import_ufo_log(folder, url, "s")
    with open_store(url) as store:
        assert store.count("s") == 0


def test_url_in_an_image_field_is_kept(tmp_path: Path) -> None:
    """An http(s) URL in such a field reads nothing from disk and is kept as logged."""
    folder = _log_folder(tmp_path, [{"Step": 1, "image_url": "https://example.org/shot.png"}])
    (item,) = read_ufo_log(folder)
    assert item["image_url"] == "https://example.org/shot.png"


_PIECES = ["..", ".", "", "a.png", "out.png", "outdir", "holiday.png", "task", "logs", "C:", "~"]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pieces=st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), min_size=1, max_size=5),
    separator=st.sampled_from(["/", "\\"]),
    rooted=st.booleans(),
)
def test_property_linked_screenshots_are_always_inside_the_folder(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], separator: str, rooted: bool
) -> None:
    """Whatever a screenshot field holds, whatever is linked is an image file inside the log folder."""
    root = tmp_path_factory.mktemp("prop")
    (root / "secret").mkdir()
    (root / "secret" / "holiday.png").write_bytes(SECRET)
    reference = ("/" if rooted else "") + separator.join(pieces)
    folder = _log_folder(root, [{"Step": 1, "CleanScreenshot": reference}])
    folder = folder.rename(root / "logs" / "task")
    (folder / "a.png").write_bytes(PNG)
    (folder / "out.png").symlink_to(root / "secret" / "holiday.png")
    (folder / "outdir").symlink_to(root / "secret", target_is_directory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRecordWarning)
        (item,) = read_ufo_log(folder)
    inside = str(folder.resolve()) + os.sep
    for linked in item.get_value("screenshots", []):
        assert linked.startswith(inside)
        assert Path(linked).read_bytes() != SECRET
