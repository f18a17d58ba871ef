"""Tests for the kvmemory command line: show, stats, replay, convert, sessions, errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import shlex
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.cli import main
from agents.memory import Memory, MemoryItem
from agents.memory.stores import open_store


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    """A saved three-step session."""
    memory = Memory(session_id="run-1")
    for step, action in enumerate(["open", "type", "save"], start=1):
        memory.add_memory_item(MemoryItem(step=step, action=action, cost=0.5))
    path = tmp_path / "run.json"
    memory.save(path)
    return path


ROOT = Path(__file__).resolve().parent.parent
# The console script pip installed beside this interpreter.
KVMEMORY = Path(sys.executable).with_name("kvmemory")
# An OSC 52 clipboard write, a 7-bit CSI and an 8-bit CSI (0x9b), as data, and as shown.
OSC52 = "\x1b]52;c;aGVsbG8=\x07"
CSI = "\x1b[2J\x9b2J"
OSC52_SHOWN = "\\x1b]52;c;aGVsbG8=\\x07"
CSI_SHOWN = "\\x1b[2J\\x9b2J"
# What a terminal acts on: C0 but tab and newline, DEL, C1.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
HOSTILE_KEY = f"key{OSC52}{CSI}"
HOSTILE_VALUE = f"value{OSC52}{CSI}"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints kvmemory's version and exits 0."""
    import agents

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"kvmemory {agents.__version__}\n"


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


def test_show_json_plain_gives_one_object_of_fields_per_item(tmp_path: Path) -> None:
    """--json is lossless (an item holding a date is wrapped); --json --plain is fields only, for scripts."""
    import datetime as dt

    path = tmp_path / "typed.json"
    when = dt.datetime(2026, 11, 26, 9, 30, tzinfo=dt.timezone.utc)
    Memory([MemoryItem(step=1, at=when, blob=b"hi"), MemoryItem(step=2, action="open")]).save(path)
    lossless = json.loads(run("show", str(path), "--json")[1])
    assert lossless[0]["$kv"] == "item"
    assert Memory.from_json(json.dumps(lossless)).content[0]["at"] == when
    status, text = run("show", str(path), "--json", "--plain")
    assert status == 0
    assert json.loads(text) == [
        {"step": 1, "at": "2026-11-26T09:30:00+00:00", "blob": "aGk="},
        {"step": 2, "action": "open"},
    ]
    assert json.loads(run("show", str(path), "--json", "--plain", "--keys", "at")[1]) == [
        {"at": "2026-11-26T09:30:00+00:00"},
        {},
    ]


def test_plain_without_json_is_a_usage_error(
    session_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plain alone exits 2 and says to pass --json too."""
    assert run("show", str(session_file), "--plain") == (2, "")
    assert "--json --plain" in capsys.readouterr().err


def test_stats_counts_items_fields_and_cost(session_file: Path) -> None:
    """stats reports items, steps, total cost and field counts."""
    status, text = run("stats", str(session_file))
    assert status == 0
    assert "items: 3\nsteps: 3 (1 .. 3)\ntotal cost: 1.5\n" in text
    assert "  action: 3\n" in text


def test_stats_json_is_one_object(session_file: Path) -> None:
    """stats --json prints the counts as one JSON object."""
    status, text = run("stats", str(session_file), "--json")
    assert status == 0
    assert json.loads(text) == {
        "session": "run-1",
        "items": 3,
        "steps": 3,
        "first_step": 1,
        "last_step": 3,
        "total_cost": 1.5,
        "cost_fields": ["cost"],
        "fields": {"step": 3, "action": 3, "cost": 3},
    }


def test_sessions_json_lists_sessions_with_counts(session_file: Path, tmp_path: Path) -> None:
    """sessions --json prints a JSON list of sessions with their item counts."""
    db = tmp_path / "runs.db"
    run("convert", str(session_file), str(db))
    run("convert", str(session_file), str(db), "--to-session", "run-2")
    status, text = run("sessions", str(db), "--json")
    assert status == 0
    assert json.loads(text) == [{"session": "run-1", "items": 3}, {"session": "run-2", "items": 3}]


def test_sessions_json_of_an_empty_store_is_an_empty_list(tmp_path: Path) -> None:
    """sessions --json of a store without sessions prints [] (no prose for scripts to parse)."""
    db = tmp_path / "empty.db"
    with open_store(str(db)):
        pass
    assert run("sessions", str(db), "--json") == (0, "[]\n")


def test_replay_html_says_where_it_wrote(session_file: Path, tmp_path: Path) -> None:
    """replay --html writes the timeline of the chosen items and prints where."""
    target = tmp_path / "run.html"
    status, text = run("replay", str(session_file), "--last", "2", "--html", str(target))
    assert (status, text) == (0, f"wrote the timeline of 2 items to {target}\n")
    assert "Session run-1: 2 items" in target.read_text(encoding="utf-8")


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


# -- terminal output escapes control characters ------------------------------------


@pytest.fixture
def hostile_file(tmp_path: Path) -> Path:
    """A session file whose id, keys and values hold OSC 52 and CSI sequences."""
    memory = Memory(session_id=f"run{OSC52}{CSI}")
    memory.add_memory_item(MemoryItem(step=1, **{HOSTILE_KEY: HOSTILE_VALUE}))
    path = tmp_path / "hostile.json"
    memory.save(path)
    return path


@pytest.fixture
def hostile_store(hostile_file: Path, tmp_path: Path) -> Path:
    """A SQLite store holding the hostile session's items as session 'run-1'."""
    db = tmp_path / "hostile.db"
    assert run("convert", str(hostile_file), str(db), "--to-session", "run-1")[0] == 0
    return db


def assert_escaped(text: str, *shown: str) -> None:
    """Assert that ``text`` holds no raw control character and shows each of ``shown``."""
    assert not RAW_CONTROL.search(text), text
    for part in shown:
        assert part in text


@pytest.mark.parametrize(
    "command",
    [["show"], ["show", "--keys", f"step,{HOSTILE_KEY}"], ["replay", "--no-color"]],
)
def test_show_and_replay_escape_keys_and_values_of_a_file(
    hostile_file: Path, command: list[str]
) -> None:
    """show and replay of a session file print its sequences as text."""
    status, text = run(command[0], str(hostile_file), *command[1:])
    assert status == 0
    assert_escaped(text, f"key{OSC52_SHOWN}{CSI_SHOWN}", f"value{OSC52_SHOWN}{CSI_SHOWN}")


@pytest.mark.parametrize(
    "command",
    [["show"], ["show", "--keys", f"step,{HOSTILE_KEY}"], ["replay", "--no-color"]],
)
def test_show_and_replay_escape_keys_and_values_of_a_store(
    hostile_store: Path, command: list[str]
) -> None:
    """show (also the store's own key projection) and replay of a store session print sequences as text."""
    status, text = run(command[0], str(hostile_store), "--session", "run-1", *command[1:])
    assert status == 0
    assert_escaped(text, f"key{OSC52_SHOWN}{CSI_SHOWN}", f"value{OSC52_SHOWN}{CSI_SHOWN}")


def test_replay_escapes_session_id(hostile_file: Path) -> None:
    """replay's title shows the session id's sequences as text."""
    text = run("replay", str(hostile_file), "--no-color")[1]
    assert text.startswith(f"Session run{OSC52_SHOWN}{CSI_SHOWN}: 1 item\n")


def test_replay_in_colour_escapes_session_data(hostile_file: Path) -> None:
    """replay --color keeps its own colour codes and prints the session's sequences as text."""
    status, text = run("replay", str(hostile_file), "--color")
    assert status == 0
    assert OSC52 not in text
    assert "\x9b" not in text
    assert "\x1b[2J" not in text
    assert f"value{OSC52_SHOWN}{CSI_SHOWN}" in text


def test_stats_escapes_session_id_and_keys(hostile_file: Path) -> None:
    """stats prints the session id and the field names with their sequences as text."""
    status, text = run("stats", str(hostile_file))
    assert status == 0
    assert_escaped(
        text, f"session: run{OSC52_SHOWN}{CSI_SHOWN}\n", f"  key{OSC52_SHOWN}{CSI_SHOWN}: 1\n"
    )


def test_show_json_escapes_and_stays_valid_json(hostile_file: Path) -> None:
    """show --json writes every control character as \\u00NN and still decodes to the values."""
    status, text = run("show", str(hostile_file), "--json")
    assert status == 0
    assert_escaped(text, "\\u001b]52", "\\u009b2J")
    assert json.loads(text) == [{"step": 1, HOSTILE_KEY: HOSTILE_VALUE}]


def test_sessions_escapes_session_ids(hostile_store: Path) -> None:
    """sessions lists, as text, a session id written into the store by other means, and the others."""
    with sqlite3.connect(hostile_store) as con:
        for table in ("kvmemory_sessions", "kvmemory_items"):
            con.execute(f"UPDATE {table} SET session_id = ?", (f"run{OSC52}{CSI}",))
    con.close()
    plain = hostile_store.with_suffix(".json")
    assert run("convert", str(plain), str(hostile_store), "--to-session", "run-2")[0] == 0
    status, text = run("sessions", str(hostile_store))
    assert status == 0
    assert_escaped(text)
    assert text.splitlines() == [
        f"run{OSC52_SHOWN}{CSI_SHOWN}\tnot a valid session id; kvmemory cannot read this session",
        "run-2\t1 item",
    ]


def test_error_message_escapes_session_id(
    hostile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error naming the file's session id prints its sequences as text."""
    assert run("show", str(hostile_file), "--session", "other")[0] == 2
    assert_escaped(capsys.readouterr().err, f"run{OSC52_SHOWN}{CSI_SHOWN}")


# -- usage errors ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_last_must_be_a_count(
    session_file: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--last with a negative or non-whole number is a usage error naming the option."""
    with pytest.raises(SystemExit) as exit_info:
        main(["show", str(session_file), "--last", value])
    assert exit_info.value.code == 2
    assert f"argument --last: expected a number of items, 0 or more, got '{value}'" in (
        capsys.readouterr().err
    )


def test_last_zero_shows_nothing(session_file: Path) -> None:
    """--last 0 is a valid count and selects no item."""
    assert run("show", str(session_file), "--last", "0") == (0, "")


@pytest.mark.parametrize("value", ["abc", "1-3", "1,two", "true", "[1]", ","])
def test_steps_must_be_step_numbers(
    session_file: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--steps with text that is not a step number is a usage error, not an empty selection."""
    with pytest.raises(SystemExit) as exit_info:
        main(["show", str(session_file), "--steps", value])
    assert exit_info.value.code == 2
    assert "argument --steps: expected step numbers such as 1,2,5" in capsys.readouterr().err


def test_steps_of_a_store_session_must_be_step_numbers(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """show --keys of a store session (the store's projection) refuses bad --steps too."""
    db = tmp_path / "runs.db"
    run("convert", str(session_file), str(db))
    with pytest.raises(SystemExit):
        main(["show", str(db), "--session", "run-1", "--keys", "action", "--steps", "x"])
    assert "argument --steps:" in capsys.readouterr().err


def test_steps_selects_numbers_and_quoted_text_steps(tmp_path: Path) -> None:
    """--steps takes numbers (with spaces), and text steps in JSON quotes."""
    memory = Memory(session_id="s")
    for step in (1, 2, "plan", 2.5):
        memory.add_memory_item(MemoryItem(step=step))
    path = tmp_path / "mixed.json"
    memory.save(path)
    assert run("show", str(path), "--steps", ' 1, "plan",2.5') == (
        0,
        "step=1\nstep='plan'\nstep=2.5\n",
    )


def test_convert_to_unknown_extension_asks_for_a_url(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """convert to out.txt exits 2, names the target and the forms it takes, and writes nothing."""
    target = tmp_path / "out.txt"
    assert run("convert", str(session_file), str(target))[0] == 2
    err = capsys.readouterr().err
    assert f"Cannot tell what to write to {str(target)!r}" in err
    assert ".json or .jsonl" in err
    assert f"sqlite://{target}" in err
    assert not target.exists()


@pytest.mark.parametrize("name", ["out.sqlite", "out.sqlite3", "out.db"])
def test_convert_to_sqlite_suffixes(session_file: Path, tmp_path: Path, name: str) -> None:
    """convert writes SQLite to a path ending in .db, .sqlite or .sqlite3."""
    target = tmp_path / name
    assert run("convert", str(session_file), str(target))[0] == 0
    assert run("sessions", str(target)) == (0, "run-1\t3 items\n")


def test_convert_to_sqlite_url_of_any_name(session_file: Path, tmp_path: Path) -> None:
    """The URL the error suggests (sqlite://out.txt) writes SQLite to that name."""
    target = tmp_path / "out.txt"
    assert run("convert", str(session_file), f"sqlite://{target}")[0] == 0
    assert run("sessions", f"sqlite://{target}") == (0, "run-1\t3 items\n")


@pytest.mark.parametrize("command", ["show", "replay", "stats", "convert"])
def test_missing_session_file_is_a_usage_error(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .json file that does not exist exits 2 with the same message shape as a missing store."""
    missing = tmp_path / "missing.json"
    extra = [str(tmp_path / "out.jsonl")] if command == "convert" else []
    assert run(command, str(missing), *extra)[0] == 2
    err = capsys.readouterr().err
    assert err == f"kvmemory: error: No session file {str(missing)!r}; check the path.\n"
    assert not (tmp_path / "out.jsonl").exists()


# -- the command never imports code a session names ------------------------------------

PLANTED_MODULE = """\
import pathlib
pathlib.Path({marker!r}).write_text("planted_mod ran")
from agents.memory import MemoryItem
class Evil(MemoryItem):
    pass
"""
# Writes a session naming the class planted_mod:Evil, without that module existing.
WRITER = """\
import sys
from agents.memory import Memory, MemoryItem
from agents.memory.stores import open_memory
Evil = type("Evil", (MemoryItem,), {{"__module__": "planted_mod", "__qualname__": "Evil"}})
memory = Memory([Evil(step=1, action="exfiltrate", note="planted")], session_id="s1")
memory.save({session!r})
with open_memory({store!r}, "s1") as stored:
    stored.add_memory_items(memory.content)
"""
LAUNCHERS = {
    "kvmemory": [str(KVMEMORY)],
    "python -m agents.cli": [sys.executable, "-m", "agents.cli"],
}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A folder holding a session file and a SQLite store that name planted_mod:Evil, and planted_mod.py."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    writer = WRITER.format(session=str(folder / "run.json"), store=str(folder / "runs.db"))
    subprocess.run([sys.executable, "-c", writer], cwd=tmp_path, check=True)
    assert '"class":"planted_mod:Evil"' in (folder / "run.json").read_text(encoding="utf-8")
    marker = tmp_path / "MARKER"
    (folder / "planted_mod.py").write_text(
        PLANTED_MODULE.format(marker=str(marker)), encoding="utf-8"
    )
    return folder


def planted_commands(folder: Path) -> list[list[str]]:
    """The inspecting and converting commands, on the session file and on the store session."""
    commands: list[list[str]] = []
    for source in (["run.json"], ["runs.db", "--session", "s1"]):
        commands += [
            ["show", *source],
            ["replay", *source, "--no-color"],
            ["stats", *source],
            ["convert", *source, str(folder.parent / "copy.jsonl"), "--force"],
        ]
    return commands


def run_planted(folder: Path, launcher: list[str], env: dict[str, str]) -> str:
    """Run every planted command in ``folder`` and return their joined output."""
    outputs = []
    for command in planted_commands(folder):
        result = subprocess.run(
            [*launcher, *command], cwd=folder, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, (command, result.stderr)
        outputs.append(result.stdout)
    return "".join(outputs)


@pytest.mark.parametrize("launcher", LAUNCHERS.values(), ids=LAUNCHERS.keys())
def test_module_planted_beside_session_never_runs(planted: Path, launcher: list[str]) -> None:
    """show/replay/stats/convert never import a module planted beside the session and in the cwd."""
    output = run_planted(planted, launcher, dict(os.environ))
    assert not (planted.parent / "MARKER").exists()
    assert "action='exfiltrate'  note='planted'" in output
    assert "  action: exfiltrate\n" in output
    assert "  note: 1\n" in output
    assert Memory.from_file(planted.parent / "copy.jsonl").list_content == [
        {"step": 1, "action": "exfiltrate", "note": "planted"}
    ]


@pytest.mark.parametrize("launcher", LAUNCHERS.values(), ids=LAUNCHERS.keys())
def test_module_on_the_import_path_is_not_imported(planted: Path, launcher: list[str]) -> None:
    """Even where planted_mod could be imported (PYTHONPATH), the command shows the item plainly."""
    paths = [str(planted), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    output = run_planted(planted, launcher, env)
    assert not (planted.parent / "MARKER").exists()
    assert "action='exfiltrate'  note='planted'" in output


# -- docs/cli.md ------------------------------------------------------------------------


def docs_commands() -> list[str]:
    """The lines of the bash blocks of docs/cli.md."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_docs_cli_example_runs(tmp_path: Path) -> None:
    """Every command docs/cli.md shows runs on the session scripts/run creates, from a fresh folder."""
    commands = docs_commands()
    assert commands[0] == "scripts/run"
    assert len(commands) > 1
    # scripts/run runs this example with the environment's Python (see the script).
    assert "examples/ufo_two_agents.py" in (ROOT / "scripts" / "run").read_text(encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "ufo_two_agents.py"),
            "examples/out/ufo_two_agents.json",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    for line in commands[1:]:
        program, *argv = shlex.split(line)
        assert program == ".venv/bin/kvmemory", line
        result = subprocess.run(
            [str(KVMEMORY), *argv], cwd=tmp_path, capture_output=True, text=True
        )
        assert (result.returncode, result.stderr) == (0, ""), line
        assert result.stdout, line


def test_inspecting_a_typo_jsonl_path_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sessions, show and stats of a jsonl:// path that is not a store fail and create no directory."""
    typo = f"jsonl://{tmp_path / 'tpyo' / 'logs'}"
    assert run("sessions", typo)[0] != 0
    assert run("show", typo, "--session", "s")[0] != 0
    assert run("stats", typo, "--session", "s")[0] != 0
    assert list(tmp_path.iterdir()) == []
    assert "is not a kvmemory JSONL store" in capsys.readouterr().err


def test_sessions_of_a_foreign_database_says_so_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sessions on a SQLite file of another program says it is not a store and leaves its bytes."""
    import sqlite3

    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE mine (x)")
    con.commit()
    con.close()
    before = path.read_bytes()
    assert run("sessions", str(path))[0] != 0
    err = capsys.readouterr().err
    assert "is not a kvmemory store" in err
    assert "backup" not in err
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["app.db"]


def test_sessions_of_a_text_file_says_it_is_not_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sessions on a file that is not a database says so plainly, without suggesting a backup."""
    path = tmp_path / "notes.db"
    path.write_text("not a database at all\n" * 100, encoding="utf-8")
    assert run("sessions", str(path))[0] != 0
    err = capsys.readouterr().err
    assert "is not a kvmemory store" in err
    assert "backup" not in err


def test_inspecting_a_store_writes_nothing(session_file: Path, tmp_path: Path) -> None:
    """sessions, show, stats and replay of a SQLite store leave its directory byte for byte."""
    db = tmp_path / "store" / "runs.db"
    db.parent.mkdir()
    assert run("convert", str(session_file), str(db))[0] == 0
    before = {p.name: p.read_bytes() for p in db.parent.iterdir()}
    assert run("sessions", str(db))[0] == 0
    for command in ("show", "stats", "replay"):
        assert run(command, str(db), "--session", "run-1")[0] == 0
    assert {p.name: p.read_bytes() for p in db.parent.iterdir()} == before


# -- reading what is printed, streaming, progress ----------------------------------------


@pytest.fixture
def long_store(tmp_path: Path) -> Path:
    """A SQLite store whose session 'long' has 2,500 items (three convert pages), the first one damaged."""
    db = tmp_path / "long.db"
    with open_store(str(db)) as store:
        store.append("long", [MemoryItem(step=n, action=f"a{n}", cost=0.25) for n in range(2_500)])
    return db


def damage_first_item(db: Path) -> None:
    """Overwrite the stored bytes of the session's first item with something that is not JSON."""
    with sqlite3.connect(db) as con:
        con.execute(
            "UPDATE kvmemory_items SET data = x'7b7b' WHERE seq = (SELECT min(seq) FROM kvmemory_items)"
        )


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["show", "--last", "2"],
            "step=2498  action='a2498'  cost=0.25\nstep=2499  action='a2499'  cost=0.25\n",
        ),
        (["show", "--last", "1", "--keys", "action,step"], "action='a2499'  step=2499\n"),
        (["show", "--last", "1", "--steps", "3,7"], "step=7  action='a7'  cost=0.25\n"),
    ],
    ids=["show", "show --keys", "show --steps"],
)
def test_show_last_reads_only_the_last_items(
    long_store: Path, command: list[str], expected: str
) -> None:
    """show --last N of a store session reads only those items: a damaged first item is never read."""
    damage_first_item(long_store)
    assert run(command[0], str(long_store), "--session", "long", *command[1:]) == (0, expected)


@pytest.mark.parametrize("command", ["show", "replay"])
def test_steps_of_a_store_session_read_only_those_steps(long_store: Path, command: str) -> None:
    """show/replay --steps of a store session read only those steps: a damaged first item is never read."""
    damage_first_item(long_store)
    status, text = run(command, str(long_store), "--session", "long", "--steps", "5,2400")
    assert status == 0
    assert "a5" in text
    assert "a2400" in text
    assert "a6" not in text


def test_replay_last_reads_only_the_last_items(long_store: Path) -> None:
    """replay --last N of a store session reads only those items."""
    damage_first_item(long_store)
    status, text = run("replay", str(long_store), "--session", "long", "--last", "2", "--no-color")
    assert status == 0
    assert text.startswith("Session long: 2 items\n── step 2498 ──\n")


def test_stats_of_a_store_matches_stats_of_its_file(long_store: Path, tmp_path: Path) -> None:
    """stats of a store session, read a page at a time, says what stats of the same session's file says."""
    copy = tmp_path / "long.json"
    assert run("convert", str(long_store), "--session", "long", str(copy))[0] == 0
    from_store = run("stats", str(long_store), "--session", "long", "--json")
    from_file = run("stats", str(copy), "--json")
    assert from_store == from_file
    assert json.loads(from_store[1])["items"] == 2_500


@pytest.mark.parametrize("target", ["copy.json", "copy.jsonl", "copy.db"])
def test_convert_of_a_long_store_session_copies_every_item(
    long_store: Path, tmp_path: Path, target: str
) -> None:
    """convert copies a store session of several pages to a file or a store, every item in order."""
    dest = tmp_path / target
    status, text = run("convert", str(long_store), "--session", "long", str(dest))
    assert status == 0
    with open_store(str(long_store)) as store:
        expected = store.read("long")
    if target.endswith(".db"):
        assert text == f"appended 2500 items to session 'long' of {dest}\n"
        with open_store(str(dest)) as store:
            assert store.read("long") == expected
    else:
        assert text == f"wrote 2500 items to {dest}\n"
        copied = Memory.from_file(dest)
        assert (copied.content, copied.session_id) == (expected, "long")


def long_jsonl(tmp_path: Path, *, damaged_line: int | None = None) -> Path:
    """A 2,500-item JSONL session file (three convert pages), one line optionally cut short."""
    path = tmp_path / "long.jsonl"
    memory = Memory(session_id="long", step_key="turn")
    memory.add_memory_items([MemoryItem(turn=n, action=f"a{n}") for n in range(2_500)])
    memory.save(path)
    if damaged_line is not None:
        lines = path.read_bytes().split(b"\n")
        lines[damaged_line - 1] = lines[damaged_line - 1][:10]
        path.write_bytes(b"\n".join(lines))
    return path


def test_convert_of_a_jsonl_file_to_a_store_copies_every_item(tmp_path: Path) -> None:
    """A JSONL file streamed into a store arrives whole, in order, with its step key."""
    source = long_jsonl(tmp_path)
    dest = tmp_path / "c.db"
    assert run("convert", str(source), str(dest)) == (
        0,
        f"appended 2500 items to session 'long' of {dest}\n",
    )
    with open_store(str(dest)) as store:
        assert store.read("long") == Memory.from_file(source).content
        info = store.session_info("long")
        assert info is not None
        assert info.step_key == "turn"


def test_convert_of_a_jsonl_file_damaged_late_leaves_the_store_session_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged line after the first pages exits 1 naming the line, and takes back what was appended."""
    source = long_jsonl(tmp_path, damaged_line=2_400)
    dest = tmp_path / "c.db"
    assert run("convert", str(source), str(dest))[0] == 1
    assert "line 2400" in capsys.readouterr().err
    with open_store(str(dest)) as store:
        assert store.count("long") == 0


def test_read_session_pages_decodes_a_page_at_a_time(tmp_path: Path) -> None:
    """The first page of a JSONL file is read before a damaged later line is reached."""
    from agents.memory import CorruptSessionError, read_session_pages

    source = long_jsonl(tmp_path, damaged_line=2_400)
    with read_session_pages(source, size=1_000) as session:
        assert (session.session_id, session.step_key) == ("long", "turn")
        first = next(session.pages)
        assert [item["turn"] for item in first] == list(range(1_000))
        assert len(next(session.pages)) == 1_000
        with pytest.raises(CorruptSessionError, match="line 2400"):
            next(session.pages)


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_read_session_pages_refuses_a_bad_page_size(tmp_path: Path, size: object) -> None:
    """A page size that is not a positive int is named."""
    from agents.memory import InvalidArgumentError, read_session_pages

    with (
        pytest.raises(InvalidArgumentError, match="size must be"),
        read_session_pages(long_jsonl(tmp_path), size=size),  # type: ignore[arg-type]
    ):
        pass


def test_convert_shows_no_progress_off_a_terminal(
    long_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal, convert prints its result line only: no progress bar."""
    assert run("convert", str(long_store), "--session", "long", str(tmp_path / "c.jsonl"))[0] == 0
    assert capsys.readouterr().err == ""


def test_convert_shows_progress_on_a_terminal(long_store: Path, tmp_path: Path) -> None:
    """On a terminal convert draws a progress bar on stderr, and --quiet turns it off."""
    pytest.importorskip("rich")
    outputs = []
    for extra in ([], ["--quiet"]):
        leader, follower = pty.openpty()
        command = [
            "convert",
            str(long_store),
            "--session",
            "long",
            str(tmp_path / "c.db"),
            "--force",
        ]
        done = subprocess.run(
            [sys.executable, "-m", "agents.cli", *command, *extra],
            stdout=subprocess.PIPE,
            stderr=follower,
            check=False,
        )
        os.close(follower)
        chunks = []
        with contextlib.suppress(OSError):  # reading a pty whose other end closed ends in EIO
            while chunk := os.read(leader, 65536):
                chunks.append(chunk)
        os.close(leader)
        assert done.returncode == 0
        outputs.append(b"".join(chunks).decode(errors="replace"))
    assert "appending to long" in outputs[0]
    assert outputs[1] == ""


def test_convert_of_a_store_session_keeps_its_step_key_and_metadata(tmp_path: Path) -> None:
    """A store session converted to a file keeps the step key and metadata the store holds."""
    db = tmp_path / "turns.db"
    with open_store(str(db)) as store:
        store.append(
            "t", [MemoryItem(turn=1, text="hi"), MemoryItem(turn=2, text="yo")], step_key="turn"
        )
        store.set_metadata("t", {"user": "ann"}, step_key="turn")
    dest = tmp_path / "t.json"
    assert run("convert", str(db), "--session", "t", str(dest))[0] == 0
    copied = Memory.from_file(dest)
    assert (copied.step_key, copied.metadata, copied.steps()) == ("turn", {"user": "ann"}, [1, 2])


# -- what issue 29 found at the command line, run as a user runs it (a subprocess) ----------


def kvmemory(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m agents.cli ARGV`` in a new process and return what it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "agents.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def ufo2_store(tmp_path: Path) -> Path:
    """A store holding a UFO 2 log import: keys ``Step``, ``Agent``, ``Action``."""
    from agents.integrations.ufo import import_ufo_log

    folder = tmp_path / "run"
    folder.mkdir()
    lines = [
        {"Step": 1, "Agent": "HostAgent", "Action": "select_application", "Cost": 0.5},
        {"Step": 2, "Agent": "AppAgent", "Action": "click_input", "Cost": 0.25},
    ]
    (folder / "response.log").write_text("".join(json.dumps(line) + "\n" for line in lines))
    path = tmp_path / "runs.db"
    import_ufo_log(folder, str(path), "ufo-1")
    return path


@pytest.mark.parametrize("where", ["store", "file"])
def test_show_keys_that_match_nothing_warn_with_a_suggestion(
    ufo2_store: Path, tmp_path: Path, where: str
) -> None:
    """``show --keys step,action`` on a UFO 2 session warns on stderr, suggesting 'Step' and 'Action'."""
    if where == "store":
        source = [str(ufo2_store), "--session", "ufo-1"]
    else:
        file = tmp_path / "ufo.json"
        assert kvmemory("convert", str(ufo2_store), "--session", "ufo-1", str(file)).returncode == 0
        source = [str(file)]
    done = kvmemory("show", *source, "--keys", "step,action,Agent")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Agent='HostAgent'", "Agent='AppAgent'"]
    warnings = done.stderr.splitlines()
    assert len(warnings) == 2
    assert warnings[0].startswith(
        "kvmemory: warning: Key 'step' matches none of the 2 selected items, so nothing is shown for it;"
    )
    assert warnings[0].endswith("did you mean 'Step'?.")
    assert "did you mean 'Action'?" in warnings[1]


def test_show_keys_that_all_match_print_no_warning(ufo2_store: Path) -> None:
    """Keys every shown item holds print their values and nothing on stderr."""
    done = kvmemory("show", str(ufo2_store), "--session", "ufo-1", "--keys", "Step,Action")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "Step=1  Action='select_application'",
        "Step=2  Action='click_input'",
    ]


def test_show_folds_long_values_as_replay_does(tmp_path: Path) -> None:
    """A value of 10,000 characters is shown cut to 200 with an ellipsis, in show as in replay."""
    path = tmp_path / "long.json"
    Memory([MemoryItem(step=1, page="x" * 10_000)], session_id="s").save(path)
    shown = kvmemory("show", str(path)).stdout.splitlines()
    replayed = kvmemory("replay", str(path), "--no-color").stdout.splitlines()
    assert shown == ["step=1  page='" + "x" * 198 + "…"]
    assert "  page: " + "x" * 199 + "…" in replayed


def test_replay_without_colour_marks_error_steps(tmp_path: Path) -> None:
    """Without colour the error step's header and its error line are marked in words."""
    path = tmp_path / "err.json"
    Memory(
        [MemoryItem(step=1, action="open"), MemoryItem(step=2, action="save", error="disk full")],
        session_id="s",
    ).save(path)
    lines = kvmemory("replay", str(path), "--no-color").stdout.splitlines()
    assert lines == [
        "Session s: 2 items",
        "── step 1 ──",
        "  action: open",
        "── step 2 · error ──",
        "  action: save",
        "! error: disk full",
    ]


def test_convert_with_step_key_keeps_the_steps_of_a_dump(tmp_path: Path) -> None:
    """A list of step dicts numbered under step_number converts with --step-key, and replay finds step 2."""
    dump = tmp_path / "steps.json"
    dump.write_text(
        json.dumps(
            [
                {"step_number": 1, "model_output": "look"},
                {"step_number": 2, "model_output": "act"},
            ]
        )
    )
    store = tmp_path / "out.db"
    done = kvmemory(
        "convert", str(dump), str(store), "--to-session", "s", "--step-key", "step_number"
    )
    assert done.returncode == 0, done.stderr
    stats = json.loads(kvmemory("stats", str(store), "--session", "s", "--json").stdout)
    assert (stats["steps"], stats["last_step"]) == (2, 2)
    replayed = kvmemory("replay", str(store), "--session", "s", "--steps", "2", "--no-color")
    assert "── step 2 ──" in replayed.stdout
    assert "act" in replayed.stdout
    assert "look" not in replayed.stdout


def test_sessions_say_one_item_not_one_items(ufo2_store: Path) -> None:
    """The session list writes 1 item and 2 items."""
    assert kvmemory("sessions", str(ufo2_store)).stdout == "ufo-1\t2 items\n"


@pytest.fixture
def two_sessions(tmp_path: Path) -> Path:
    """A store where 'invoice' is rare in a large session and the better match is in a small one."""
    path = tmp_path / "many.db"
    with open_store(str(path)) as store:
        big = [MemoryItem(step=n, note=f"filler step {n} about menus") for n in range(1, 200)]
        big.append(
            MemoryItem(step=200, note="the menu bar shows an invoice icon among many other icons")
        )
        store.append("big", big)
        store.append(
            "small",
            [
                MemoryItem(step=1, note="invoice invoice total paid"),
                MemoryItem(step=2, note="invoice"),
                MemoryItem(step=3, note="invoice number"),
            ],
        )
    return path


def test_search_across_sessions_ranks_with_their_shared_statistics(two_sessions: Path) -> None:
    """``kvmemory search STORE QUERY`` ranks all sessions as one memory holding them would, naming each hit's session."""
    done = kvmemory("search", str(two_sessions), "invoice", "-k", "3", "--json")
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)
    with open_store(str(two_sessions)) as store:
        # Session after session in id order, each in seq order: the union the ranking is defined on.
        records = [(name, r) for name in ("big", "small") for r in store.records(name)]
    union = Memory([record.item for _, record in records])
    where = {id(record.item): (name, record.seq) for name, record in records}
    expected = union.search("invoice", 3)
    assert [(hit["session"], hit["seq"], hit["score"]) for hit in hits] == [
        (*where[id(hit.item)], hit.score) for hit in expected
    ]
    assert {hit["session"] for hit in hits} == {"small"}


def test_search_one_session_prints_step_seq_score_and_fields(two_sessions: Path) -> None:
    """``--session`` searches that session alone; each hit names its session, step, seq and score."""
    done = kvmemory("search", str(two_sessions), "invoice number", "--session", "small", "-k", "1")
    assert done.returncode == 0, done.stderr
    first, fields = done.stdout.splitlines()
    assert re.fullmatch(r"small · step 3 · seq \d+ · score \d+\.\d{4}", first), first
    assert fields == "  note='invoice number'"


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_search_k_answers_as_the_store_or_is_a_usage_error(kind: str, tmp_path: Path) -> None:
    """``-k N`` gives ``Store.search``'s hits (one session or many) for N >= 1; below 1 it exits 2 naming -k."""
    url = f"sqlite://{tmp_path / 'k.db'}" if kind == "sqlite" else f"jsonl://{tmp_path / 'k'}"
    with open_store(url) as store:
        store.append("a", [MemoryItem(step=n, note=f"invoice {n % 3} paid") for n in range(6)])
        store.append("b", [MemoryItem(step=1, note="invoice total"), MemoryItem(step=2, note="x")])

    @settings(max_examples=25)
    @given(k=st.integers(-3, 12) | st.sampled_from([2**63 - 1, 2**63]), one=st.booleans())
    def check(k: int, one: bool) -> None:
        scope = ["--session", "a"] if one else []
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                status, text = run("search", url, "invoice paid", "-k", str(k), "--json", *scope)
            except SystemExit as exited:  # argparse's usage errors
                status, text = int(str(exited.code)), ""
        if not 1 <= k <= 2**63 - 1:
            assert status == 2, err.getvalue()
            assert f"argument -k: expected a number of hits from 1 to 2**63 - 1, got '{k}'" in (
                err.getvalue()
            )
            return
        assert status == 0, err.getvalue()
        with open_store(url, read_only=True) as store:
            if one:
                expected = [("a", h.seq, h.score) for h in store.search("a", "invoice paid", k)]
            else:
                found = store.search_sessions("invoice paid", k)
                expected = [(h.session_id, h.seq, h.score) for h in found]
        assert [(h["session"], h["seq"], h["score"]) for h in json.loads(text)] == expected

    check()


def plain_int(value: Any) -> Any:
    """An int as ``--json --plain`` and ``search --json`` write it: a number within 64 bits, else its text."""
    if isinstance(value, dict):
        return {key: plain_int(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain_int(item) for item in value]
    return value if -(2**63) <= value < 2**64 else str(value)


INTS = st.integers() | st.sampled_from([2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**400])


@settings(max_examples=30)
@given(
    values=st.dictionaries(
        st.sampled_from(["n", "m", "cost"]),
        INTS | st.lists(INTS, max_size=3) | st.dictionaries(st.sampled_from("xy"), INTS),
        max_size=3,
    )
)
def test_search_and_show_json_write_ints_of_any_size(values: dict[str, Any]) -> None:
    """``search --json`` and ``show --json --plain`` write any int (beyond 64 bits as its text) and agree on an item's fields."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{Path(folder) / 'ints.db'}"
        with open_store(url) as store:
            store.append("s", [MemoryItem(step=1, note="invoice", **values)])
        searched = run("search", url, "invoice", "--json")
        shown = run("show", url, "--session", "s", "--json", "--plain")
    assert searched[0] == shown[0] == 0
    expected = {"step": 1, "note": "invoice", **plain_int(values)}
    assert [hit["fields"] for hit in json.loads(searched[1])] == [expected]
    assert json.loads(shown[1]) == [expected]


@pytest.mark.parametrize("command", [["search", "invoice"], ["sessions"]])
def test_a_jsonl_folder_given_as_a_path_names_the_url_to_open_it(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSONL store's folder passed as a bare path (a SQLite file's form) exits 1 naming jsonl://FOLDER; nothing is written."""
    folder = tmp_path / "logs"
    with open_store(f"jsonl://{folder}") as store:
        store.append("s", [MemoryItem(step=1, note="invoice")])
    before = sorted(path.name for path in folder.iterdir())
    status, text = run(command[0], str(folder), *command[1:])
    assert (status, text) == (1, "")
    assert (
        f"it is a directory, not a file; it holds a JSONL store: open it as 'jsonl://{folder}'"
        in (capsys.readouterr().err)
    )
    assert sorted(path.name for path in folder.iterdir()) == before
    assert run(command[0], f"jsonl://{folder}", *command[1:])[0] == 0


def test_search_across_sessions_leaves_out_an_id_written_by_other_means(tmp_path: Path) -> None:
    """A session another program renamed to an id kvmemory refuses ('agent 2') does not stop the search of the others."""
    path = tmp_path / "foreign.db"
    with open_store(str(path)) as store:
        store.append("agent-1", [MemoryItem(step=1, note="invoice paid")])
        store.append("agent-2", [MemoryItem(step=1, note="invoice total")])
    with sqlite3.connect(path) as con:
        for table in ("kvmemory_sessions", "kvmemory_items", "kvmemory_search"):
            con.execute(f"UPDATE {table} SET session_id = 'agent 2' WHERE session_id = 'agent-2'")
    con.close()
    status, text = run("search", str(path), "invoice", "--json")
    assert status == 0
    with open_store(str(path), read_only=True) as store:
        expected = store.search_sessions("invoice", 10, sessions=["agent-1"])
    assert [(hit["session"], hit["seq"], hit["score"]) for hit in json.loads(text)] == [
        (hit.session_id, hit.seq, hit.score) for hit in expected
    ]


def test_search_with_session_and_prefix_is_a_usage_error(two_sessions: Path) -> None:
    """--session and --prefix together exit 2 before anything is read."""
    done = kvmemory("search", str(two_sessions), "x", "--session", "big", "--prefix", "b")
    assert done.returncode == 2
    assert "either --session ID or --prefix P" in done.stderr


def test_search_by_meaning_needs_an_embedder(two_sessions: Path) -> None:
    """--mode semantic without --embedder exits 1 with the fix named."""
    done = kvmemory("search", str(two_sessions), "bill", "--mode", "semantic")
    assert done.returncode == 1
    assert "Semantic search needs an embedder, and none was given; pass --embedder" in done.stderr


def test_show_prints_a_record_once_with_its_key(tmp_path: Path) -> None:
    """show of a store session prints a keyed record like any item, its key field included, once after a replace."""
    path = tmp_path / "records.db"
    with open_store(path) as store:
        store.append("s", [MemoryItem(step=1, action="open")])
        store.put_record("s", "lang", {"value": "fr"})
        store.put_record("s", "lang", {"value": "de"})
    status, text = run("show", str(path), "--session", "s", "--json", "--plain")
    assert status == 0
    assert json.loads(text) == [{"step": 1, "action": "open"}, {"key": "lang", "value": "de"}]
