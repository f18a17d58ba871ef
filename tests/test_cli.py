"""Tests for the kvmemory command line: show, stats, replay, convert, sessions, errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents.cli import main
from agents.memory import Memory, MemoryItem


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    """A saved three-step session."""
    memory = Memory(session_id="run-1")
    for step, action in enumerate(["open", "type", "save"], start=1):
        memory.add_memory_item(MemoryItem(step=step, action=action, cost=0.5))
    path = tmp_path / "run.json"
    memory.save(path)
    return path


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_show_prints_chosen_keys_of_last_items(session_file: Path) -> None:
    """show --keys --last prints the chosen fields of the newest items."""
    assert run("show", str(session_file), "--keys", "step,action", "--last", "2") == (
        0,
        "step=2  action='type'\nstep=3  action='save'\n",
    )


def test_show_json_of_chosen_steps(session_file: Path) -> None:
    """show --json --steps prints the items of those steps as JSON."""
    status, text = run("show", str(session_file), "--steps", "1,3", "--json", "--keys", "action")
    assert status == 0
    assert json.loads(text) == [{"action": "open"}, {"action": "save"}]


def test_stats_counts_items_fields_and_cost(session_file: Path) -> None:
    """stats reports items, steps, total cost and field counts."""
    status, text = run("stats", str(session_file))
    assert status == 0
    assert "items: 3\nsteps: 3 (1 .. 3)\ntotal cost: 1.5\n" in text
    assert "  action: 3\n" in text


def test_replay_prints_each_step(session_file: Path) -> None:
    """replay prints a block per step, without colour when asked."""
    status, text = run("replay", str(session_file), "--no-color")
    assert status == 0
    assert text.count("── step") == 3
    assert "action: save" in text


def test_convert_file_to_sqlite_and_back(session_file: Path, tmp_path: Path) -> None:
    """convert copies a file session into a SQLite store, and a store session back to JSONL."""
    db = tmp_path / "runs.db"
    assert run("convert", str(session_file), str(db))[0] == 0
    assert run("sessions", str(db)) == (0, "run-1\t3 items\n")
    out = tmp_path / "copy.jsonl"
    assert run("convert", str(db), "--session", "run-1", str(out))[0] == 0
    assert Memory.from_file(out) == Memory.from_file(session_file)


def test_convert_refuses_to_overwrite(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """convert onto an existing file needs --force and otherwise changes nothing."""
    target = tmp_path / "exists.json"
    target.write_text("keep", encoding="utf-8")
    assert run("convert", str(session_file), str(target))[0] == 2
    assert target.read_text(encoding="utf-8") == "keep"
    assert "pass --force" in capsys.readouterr().err


def test_store_without_session_is_a_usage_error(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reading a store without --session exits 2 and says how to list sessions."""
    db = tmp_path / "runs.db"
    run("convert", str(session_file), str(db))
    assert run("show", str(db))[0] == 2
    assert "kvmemory sessions" in capsys.readouterr().err


def test_unknown_session_is_a_usage_error(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session the store does not have is reported by name."""
    db = tmp_path / "runs.db"
    run("convert", str(session_file), str(db))
    assert run("show", str(db), "--session", "nope")[0] == 2
    assert "has no session 'nope'" in capsys.readouterr().err


def test_missing_store_file_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Inspecting a store path that does not exist fails and creates no file."""
    missing = tmp_path / "missing.db"
    assert run("sessions", str(missing))[0] == 2
    assert not missing.exists()
    assert "No store file" in capsys.readouterr().err


def test_corrupt_file_exits_1_with_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A corrupt session file exits 1 with the file and position."""
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    assert run("stats", str(bad))[0] == 1
    assert "is not valid JSON at line 1" in capsys.readouterr().err


def test_console_script_runs(session_file: Path) -> None:
    """`python -m agents.cli` (the kvmemory entry point) runs in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-m", "agents.cli", "show", str(session_file), "--keys", "step"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == "step=1\nstep=2\nstep=3\n"


def test_sqlite_url_with_extra_slash_opens(session_file: Path, tmp_path: Path) -> None:
    """sqlite:////abs/path.db (a path written with a leading //) opens the same file."""
    db = tmp_path / "slashes.db"
    assert run("convert", str(session_file), f"sqlite:///{db}")[0] == 0
    assert run("sessions", str(db)) == (0, "run-1\t3 items\n")


def test_store_items_of_unimportable_class_show_as_plain(tmp_path: Path) -> None:
    """A store session written with a class of the writer's __main__ is still shown."""
    db = tmp_path / "typed.db"
    writer = (
        "from agents.memory import MemoryItem\n"
        "from agents.memory.stores import open_memory\n"
        "class GoneStep(MemoryItem):\n"
        "    step: int\n"
        f"with open_memory({str(db)!r}, 's1') as memory:\n"
        "    memory.add_memory_item(MemoryItem(step=0))\n"
        "    memory.add_memory_item(GoneStep(step=1, action='click'))\n"
    )
    subprocess.run([sys.executable, "-c", writer], check=True)
    assert run("show", str(db), "--session", "s1", "--keys", "step,action") == (
        0,
        "step=0\nstep=1  action='click'\n",
    )
