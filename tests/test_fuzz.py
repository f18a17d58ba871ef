"""Fuzzing of every loader: session documents, to_json output, JSONL, blackboard files, MemoryItem.from_json, store rows.

Each test starts from a valid encoded session holding every kind of type tag,
mutates it (bytes flipped, inserted, deleted or cut; or a node of the parsed
JSON replaced by other JSON, tag-shaped objects included), loads the result,
and checks the two promises of loading: only errors of the library's tree
escape, and a load that fails leaves its target exactly as it was.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import enum
import functools
import io
import json
import os
import sqlite3
import sys
import tempfile
import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import AgentMemoryError, Blackboard, Memory, MemoryItem, field
from agents.memory.stores import open_memory

# Few examples per test keep the suite fast; each runs in a few seconds.
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Mood(enum.Enum):
    """An enum that the seed sessions hold."""

    CALM = "calm"
    BUSY = 2


class FuzzStep(MemoryItem):
    """A typed item whose declared fields mutations can break."""

    step: int = 0
    note: str = field(default="")


def seed_memory() -> Memory:
    """Return a memory that holds every kind of type tag, a typed item and tagged metadata."""
    items = [
        MemoryItem(step=0, action="click", cost=0.25, ok=True, nothing=None),
        MemoryItem(
            step=1,
            when=dt.datetime(2024, 5, 1, 12, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
            day=dt.date(2024, 2, 29),
            at=dt.time(23, 59, 1),
            took=dt.timedelta(days=1, seconds=5),
            id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
            price=Decimal("3.14"),
            raw=b"\x00\xffpng",
            buf=bytearray(b"ab"),
            shot=Path("/runs/1.png"),
            posix=PurePosixPath("a/b"),
            mood=Mood.CALM,
            tags={1, 2, 3},
            frozen=frozenset({"a"}),
            args=(1, "two", (3.0,)),
            z=complex(1, -2),
            nan=float("nan"),
            big=2**80,
            by_int={1: "one"},
            nested={"list": [1, (2, 3), {"when": dt.date(2020, 1, 1)}]},
            array=np.arange(6, dtype=np.int32).reshape(2, 3),
            scalar=np.float32(1.5),
            stamp=np.datetime64("2020-01-01T00:00:00.000000001"),
        ),
        FuzzStep(step=2, note="typed", extra=[1, 2]),
    ]
    return Memory(
        items,
        session_id="seed",
        metadata={"run": 1, "started": dt.date(2024, 1, 1), "mood": Mood.BUSY},
    )


def seed_files() -> dict[str, bytes]:
    """Return the seed session as a JSON document, a JSONL stream and a blackboard file."""
    memory = seed_memory()
    board = Blackboard()
    board.add_requests("open the report")
    board.add_trajectories(memory[1])
    board.add_image("https://shots.example/1.png", {"step": 1, "at": dt.date(2024, 1, 1)})
    with tempfile.TemporaryDirectory() as folder:
        memory.save(Path(folder) / "seed.json")
        board.save(Path(folder) / "board.json")
        document = (Path(folder) / "seed.json").read_bytes()
        blackboard = (Path(folder) / "board.json").read_bytes()
    stream = io.BytesIO()
    memory.write_jsonl(stream)
    return {
        "document": document,
        "ufo_json": memory.to_json().encode(),
        "jsonl": stream.getvalue(),
        "blackboard": blackboard,
    }


SEEDS = seed_files()
TAGS = [
    "item", "float", "int", "tuple", "set", "frozenset", "dict", "bytes", "bytearray",
    "datetime", "date", "time", "timedelta", "uuid", "decimal", "complex", "path",
    "enum", "ndarray", "npscalar", "martian",
]  # fmt: skip
KEYS = [
    "$kv", "v", "cls", "tz", "fold", "dtype", "shape", "flavor", "fields", "class",
    "step", "metadata", "items", "format", "version", "session_id", "sections",
]  # fmt: skip
INTERESTING_BYTES = list(b'{}[]":,0123456789-.eE tfnul\\\n\x00\xff')

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["nan", "inf", "2024-01-01", "Europe/Paris", "<f8", "|V8", "abc"])
    | st.sampled_from(["builtins:dict", "enum:Enum", "http:HTTPStatus", f"{__name__}:Mood"])
)


def _tagged(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    plain = st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=4
    )
    tag = st.builds(
        lambda name, payload, extra: {"$kv": name, "v": payload, **extra},
        st.sampled_from(TAGS),
        children,
        st.dictionaries(st.sampled_from(KEYS), children, max_size=2),
    )
    return plain | tag


json_values = st.recursive(scalars, _tagged, max_leaves=12)


def node_paths(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Yield the path of every node of a JSON value, the root included."""
    yield path
    if type(obj) is list:
        for index, child in enumerate(obj):
            yield from node_paths(child, (*path, index))
    elif type(obj) is dict:
        for key, child in obj.items():
            yield from node_paths(child, (*path, key))


def replaced(obj: Any, path: tuple[Any, ...], value: Any, *, delete: bool) -> Any:
    """Return a copy of ``obj`` with the node at ``path`` replaced by ``value`` (or removed)."""
    if not path:
        return value
    out = copy.deepcopy(obj)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


@st.composite
def byte_mutation(draw: st.DrawFn, seed: bytes) -> bytes:
    """Flip, insert or delete a few bytes of ``seed``, or cut it short."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        position = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        byte = draw(st.sampled_from(INTERESTING_BYTES) | st.integers(0, 255))
        kind = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if kind == "flip" and data:
            data[position] = byte
        elif kind == "insert":
            data.insert(position, byte)
        elif kind == "delete" and data:
            del data[position]
        elif kind == "cut":
            del data[position:]
    return bytes(data)


@st.composite
def structure_mutation(draw: st.DrawFn, seed: bytes) -> bytes:
    """Replace or remove one node of the parsed ``seed`` (one line of a JSONL stream)."""
    lines = seed.splitlines() if seed.count(b"\n") > 1 else [seed]
    index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
    # The standard json module, because to_json output holds NaN and integers beyond 64 bits.
    obj = json.loads(lines[index])
    path = draw(st.sampled_from(list(node_paths(obj))))
    delete = bool(path) and draw(st.booleans())
    value = None if delete else draw(json_values)
    lines[index] = json.dumps(replaced(obj, path, value, delete=delete)).encode()
    return b"\n".join(lines) + b"\n"


def mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """Byte-level or structural mutations of ``seed``."""
    return byte_mutation(seed) | structure_mutation(seed)


def target_memory() -> Memory:
    """Return the memory a fuzzed load tries to replace."""
    return Memory([MemoryItem(step=7, action="keep")], session_id="before", metadata={"k": 1})


def state_of(memory: Memory) -> tuple[Any, ...]:
    """Return everything a load may change, items by identity and by value."""
    return (
        [id(item) for item in memory],
        memory.to_list_of_dicts(),
        memory.session_id,
        memory.metadata,
        memory.created_at,
        memory.step_key,
    )


def check_load(load: Callable[[], object], state: Callable[[], object]) -> None:
    """Run ``load``: it succeeds, or raises an AgentMemoryError and ``state()`` is unchanged."""
    before = state()
    try:
        load()
    except AgentMemoryError:
        assert state() == before


def test_seeds_load() -> None:
    """The unmutated seeds load, so mutations start from valid files."""
    memory = Memory.from_json(SEEDS["document"])
    assert memory.session_id == "seed"
    assert len(Memory.read_jsonl(io.BytesIO(SEEDS["jsonl"]))) == 3
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "board.json"
        path.write_bytes(SEEDS["blackboard"])
        assert len(Blackboard.from_file(path).screenshots) == 1


@FUZZ
@given(data=mutations(SEEDS["document"]))
def test_fuzzed_session_document(data: bytes) -> None:
    """A mutated session document loads or raises a library error, leaving the memory as it was."""
    memory = target_memory()
    check_load(lambda: memory.load_json(data), lambda: state_of(memory))


@FUZZ
@given(data=mutations(SEEDS["ufo_json"]))
def test_fuzzed_ufo_json(data: bytes) -> None:
    """Mutated to_json output (tags inside plain field objects) loads or raises, leaving the memory as it was."""
    memory = target_memory()
    check_load(lambda: memory.load_json(data), lambda: state_of(memory))


@FUZZ
@given(data=mutations(SEEDS["jsonl"]))
def test_fuzzed_jsonl_file(data: bytes) -> None:
    """A mutated JSONL session file loads or raises a library error, leaving the memory as it was."""
    memory = target_memory()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.jsonl"
        path.write_bytes(data)
        check_load(lambda: memory.load_file(path), lambda: state_of(memory))


@FUZZ
@given(data=mutations(SEEDS["jsonl"]))
def test_fuzzed_jsonl_stream(data: bytes) -> None:
    """Memory.read_jsonl of a mutated stream returns a memory or raises a library error."""
    check_load(lambda: Memory.read_jsonl(io.BytesIO(data)), lambda: None)


@FUZZ
@given(data=mutations(SEEDS["blackboard"]))
def test_fuzzed_blackboard_file(data: bytes) -> None:
    """A mutated blackboard file loads or raises a library error, leaving the blackboard as it was."""
    board = Blackboard()
    board.add_requests("keep me")
    board.add_image("https://shots.example/keep.png", {"n": 1})
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "board.json"
        path.write_bytes(data)
        check_load(lambda: board.load(path), board.blackboard_to_dict)


@FUZZ
@given(data=st.sampled_from(SEEDS["jsonl"].splitlines()[1:]).flatmap(mutations))
def test_fuzzed_item_json(data: bytes) -> None:
    """MemoryItem.from_json of a mutated item returns an item or raises a library error."""
    check_load(lambda: MemoryItem.from_json(data), lambda: None)


def store_rows() -> list[bytes]:
    """Return the stored bytes of each seed item, as a SQLite store keeps them."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{Path(folder) / 'seed.db'}"
        with open_memory(url, "seed") as memory:
            memory.add_memory_items(seed_memory().content)
        with sqlite3.connect(Path(folder) / "seed.db") as con:
            rows = [row[0] for row in con.execute("SELECT data FROM kvmemory_items ORDER BY seq")]
        con.close()
    return rows


ROWS = store_rows()


@FUZZ
@given(data=st.sampled_from(ROWS).flatmap(mutations))
def test_fuzzed_store_row(data: bytes) -> None:
    """A damaged row of a real SQLite store: reload and reopen raise only library errors, changing nothing."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.db"
        url = f"sqlite://{path}"
        with open_memory(url, "s") as memory:
            memory.add_memory_items(seed_memory().content)
            with sqlite3.connect(path) as con:
                con.execute("UPDATE kvmemory_items SET data = ? WHERE seq = 2", (data,))
            con.close()
            check_load(memory.reload, lambda: state_of(memory))
        check_load(lambda: open_memory(url, "s").close(), lambda: path.read_bytes())


def test_damaged_store_row_fails_reload_and_keeps_the_memory(tmp_path: Path) -> None:
    """A row that is no longer JSON makes reload raise, naming the row, and the memory stays as it was."""
    path = tmp_path / "store.db"
    with open_memory(f"sqlite://{path}", "s") as memory:
        memory.add_memory_items(seed_memory().content)
        before = state_of(memory)
        with sqlite3.connect(path) as con:
            con.execute("UPDATE kvmemory_items SET data = ? WHERE seq = 2", (b'{"step": 1,',))
        con.close()
        with pytest.raises(AgentMemoryError, match="2"):
            memory.reload()
        assert state_of(memory) == before


# -- UFO log folders: lines, screenshot names, links and sizes --------------------------------------

_PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\0" * 8
_SECRET = _PNG_BYTES + b"outside the log folder: must never be read into any output"

UFO_LOG_SEED = (
    b"\n".join(
        json.dumps(line).encode()
        for line in [
            {
                "Step": 1,
                "Agent": "HostAgent",
                "Cost": 0.5,
                "CleanScreenshot": "logs/task/action_step1.png",
            },
            {
                "Step": 2,
                "Agent": "AppAgent",
                "Handle": 2**70,
                "AnnotatedScreenshot": "C:\\UFO\\logs\\task\\a.png",
            },
            {
                "agent_type": "AppAgent",
                "session_step": 3,
                "llm_cost": 0.25,
                "clean_screenshot_path": "a.png",
            },
        ]
    )
    + b"\n"
)

screenshot_names = st.sampled_from(
    [
        "a.png",
        "logs/task/a.png",
        "../secret/holiday.png",
        "../../secret/holiday.png",
        "sub/../../secret/holiday.png",
        "C:\\UFO\\logs\\task\\a.png",
        "out.png",
        "outdir/holiday.png",
        "notes.png",
        "huge.png",
        "fifo.png",
        "a.png\0.png",
        "",
        ".",
        "/",
        "x" * 300 + ".png",
    ]
) | st.text(max_size=20)


@st.composite
def ufo_log_folders(draw: st.DrawFn) -> tuple[bytes, list[str], bool]:
    """A mutated response.log whose lines name screenshots, and whether to plant links out of the folder."""
    lines = [json.loads(line) for line in UFO_LOG_SEED.splitlines()]
    for line in lines:
        key = "clean_screenshot_path" if "session_step" in line else "ConcatScreenshot"
        line[key] = draw(screenshot_names)
    log = b"\n".join(json.dumps(line).encode() for line in lines) + b"\n"
    if draw(st.booleans()):
        log = draw(mutations(log))
    extra = draw(st.lists(screenshot_names, max_size=3))
    # Fields prompt renderers read from disk themselves, beside UFO's own screenshot fields.
    extra_key = draw(st.sampled_from(["SelectedControlScreenshot", "screenshot", "image_path"]))
    return log, [extra_key, *extra] if extra else [], draw(st.booleans())


def _plant_ufo_folder(root: Path, log: bytes, plant_links: bool) -> tuple[Path, Path]:
    """Write a log folder beside a secret image outside it; return (folder, secret)."""
    secret_dir = root / "secret"
    secret_dir.mkdir()
    secret = secret_dir / "holiday.png"
    secret.write_bytes(_SECRET)
    folder = root / "logs" / "task"
    folder.mkdir(parents=True)
    (folder / "response.log").write_bytes(log)
    (folder / "a.png").write_bytes(_PNG_BYTES)
    (folder / "notes.png").write_text("not an image")
    with (folder / "huge.png").open("wb") as big:
        big.write(_PNG_BYTES)
        big.truncate(64 * 1024 * 1024)  # sparse: large, not slow to write
    if plant_links:
        (folder / "out.png").symlink_to(secret)
        (folder / "outdir").symlink_to(secret_dir, target_is_directory=True)
    return folder, secret


_OPENED: list[str] | None = None
"""Paths opened while a UFO log is read, recorded by the audit hook below (None: not recording)."""


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, Path)):
        _OPENED.append(os.fsdecode(args[0]))


# Audit hooks cannot be removed; this one records only while _OPENED is a list.
sys.addaudithook(_record_opens)


def _read_recording_opens(read: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``read`` and return its result (or its library error) and every path it opened."""
    global _OPENED
    _OPENED = []
    try:
        try:
            result: Any = read()
        except AgentMemoryError as exc:
            result = exc
        return result, list(_OPENED)
    finally:
        _OPENED = None


def _folder_state(folder: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (str(path.relative_to(folder)), path.read_bytes()[:64] if path.is_file() else b"")
        for path in folder.rglob("*")
        if not path.is_symlink()
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ufo_log_folders())
def test_fuzzed_ufo_log_folder(case: tuple[bytes, list[str], bool]) -> None:
    """A mutated UFO log folder imports or raises a library error; nothing outside it is read; a failure writes nothing."""
    import base64
    import warnings

    from agents.integrations.ufo import import_ufo_log, read_ufo_log
    from agents.memory import to_messages
    from agents.memory.stores import open_store

    log, extra, plant_links = case
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped lines and refused screenshots warn by design
        root = Path(tmp)
        folder, secret = _plant_ufo_folder(root, log, plant_links)
        if extra:
            with (folder / "response.log").open("ab") as stream:
                stream.write(json.dumps({"Step": 9, extra[0]: extra[1]}).encode())
        before = _folder_state(folder)
        folder_real = str(folder.resolve())
        memory, opened = _read_recording_opens(lambda: read_ufo_log(folder))
        outside = [
            path for path in opened if not os.path.realpath(path).startswith(folder_real + "/")
        ]
        assert outside == []
        assert any(path.endswith("response.log") for path in opened)  # the hook does record
        if isinstance(memory, Memory):
            for item in memory:
                for linked in item.get_value("screenshots", []):
                    assert linked.startswith(folder_real + "/")
                    assert Path(linked).read_bytes() != _SECRET
            rendered = json.dumps(to_messages(memory.content, text_keys=["Step"])).encode()
            assert base64.b64encode(_SECRET) not in rendered
        db = root / "runs.db"
        with open_store(db) as store:
            store.append("other", [MemoryItem(step=1)])
            try:
                import_ufo_log(folder, store, "ufo")
            except AgentMemoryError:
                assert store.count("ufo") == 0
                assert store.session_info("ufo") is None
            assert store.count("other") == 1
        assert _folder_state(folder) == before
        assert secret.read_bytes() == _SECRET
        assert b"must never be read" not in db.read_bytes()


# -- incoming chat messages ---------------------------------------------------------------

SECRET = b"\x89PNG\r\n\x1a\n" + b"kvmemory-fuzz-secret-" * 8
SECRET_SIGNS = (
    SECRET.decode("latin-1"),
    __import__("base64").b64encode(SECRET).decode(),
    "kvmemory-fuzz-secret",
)
PLACEHOLDER = "@secret-path"


def chat_seeds() -> list[bytes]:
    """Return two client chat requests naming a local file as an image: plain kinds, and every kind."""
    plain = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look"},
                {"type": "image_url", "image_url": {"url": PLACEHOLDER}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
    ]
    return [json.dumps(plain).encode(), chat_seed()]


def chat_seed() -> bytes:
    """Return a client's chat request: every message kind, and an image part naming a local file."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1}'}}
    image = {"type": "image_url", "image_url": {"url": PLACEHOLDER, "detail": "low"}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "No tables."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look"}, image], "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "2", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Done.", "audio": {"id": "au_1"}, "tags": ["x"]},
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "f-1"}}]},
    ]
    return json.dumps(messages).encode()


def with_secret(value: Any, path: str) -> Any:
    """Return ``value`` with every placeholder string replaced by the secret file's path."""
    if isinstance(value, str):
        return path if value == PLACEHOLDER else value
    if isinstance(value, list):
        return [with_secret(v, path) for v in value]
    if isinstance(value, dict):
        return {k: with_secret(v, path) for k, v in value.items()}
    return value


@FUZZ
@given(data=st.sampled_from(chat_seeds()).flatmap(mutations))
def test_fuzzed_incoming_chat_messages(data: bytes) -> None:
    """Mutated client messages: only library errors escape, a refused request changes nothing, no file is read."""
    from agents.memory import Conversation, to_messages

    try:
        request = json.loads(data)
    except ValueError:
        return  # not JSON: the server's parser refuses it before kvmemory sees it
    with tempfile.TemporaryDirectory() as folder:
        secret = Path(folder) / "secret.png"
        secret.write_bytes(SECRET)
        request = with_secret(request, str(secret))
        store = Path(folder) / "chats.db"
        with Conversation.for_context(f"sqlite://{store}", {"user": "ann"}) as chat:
            chat.add_user("earlier")
            before = state_of(chat.history)
            try:
                chat.add_messages(request)
            except AgentMemoryError:
                assert state_of(chat.history) == before
                chat.history.reload()
                assert chat.history.to_list_of_dicts() == before[1]
            outputs = [chat.history.to_json()]
            for policy in ("refuse", "drop", "close"):
                with contextlib.suppress(AgentMemoryError):
                    outputs.append(repr(to_messages(chat.history, unanswered=policy)))
        written = [
            path.read_bytes().decode("latin-1") for path in Path(folder).iterdir() if path != secret
        ]
        for text in [*outputs, *written]:
            assert not any(sign in text for sign in SECRET_SIGNS)


def test_chat_seed_is_refused_for_its_path_unless_read_paths(tmp_path: Path) -> None:
    """The unmutated requests are refused for their local image path (never read, never kept); read_paths=True reads it."""
    from agents.memory import Conversation, FieldValidationError

    secret = tmp_path / "secret.png"
    secret.write_bytes(SECRET)
    for seed in chat_seeds():
        request = with_secret(json.loads(seed), str(secret))
        chat = Conversation()
        with pytest.raises(FieldValidationError, match="read_paths=True"):
            chat.add_messages(request)
        assert len(chat) == 0
        chat.add_messages(request, read_paths=True)  # the explicit opt-in reads it
        sent = repr(chat.messages())
        assert SECRET_SIGNS[1] in sent
        assert str(secret) not in sent


# -- stored smolagents rows -------------------------------------------------------------------
#
# A session recorded by SmolagentsRecorder from a real smolagents agent (system
# prompt, task with an image, planning, actions with tool calls, an error and
# observations), kept in a real SQLite store. Restoring it is loading untrusted
# rows: only library errors may escape, and a refused restore changes neither
# the agent nor the store. Pillow must never see anything but PNG.

HOSTILE_IMAGES = [
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n%%EndComments\nshowpage\n%%EOF\n",
    b"\x89PNG\r\n\x1a\n",
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x9c@\x00\x00\x9c@\x08\x00\x00\x00\x00",
    b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
    b"",
]
"""Image bytes a hostile row may hold: EPS, a bare PNG signature, a 40000x40000 header, GIF, nothing."""


@functools.cache
def smolagents_seed() -> tuple[list[MemoryItem], bytes]:
    """Return the items a real recorded smolagents session holds, and a SQLite store file holding them."""
    pytest.importorskip("smolagents")
    from PIL import Image
    from smolagents_agent import FIRST_TASK, make_agent

    from agents.integrations.smolagents import SmolagentsRecorder

    memory = Memory()
    recorder = SmolagentsRecorder(memory)
    agent, _ = make_agent()
    agent.planning_interval = 5
    recorder.attach(agent)
    agent.run(FIRST_TASK, images=[Image.new("RGB", (4, 3), (1, 2, 3))])
    agent.planning_interval = None  # the scripted model calls tools only outside planning
    agent.run("Use the broken tool.")
    items = list(memory)
    assert {item["kind"] for item in items} == {"system_prompt", "task", "planning", "action"}
    assert any(item.get_value("error") for item in items)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "seed.db"
        with open_memory(f"sqlite://{path}", "run") as stored:
            stored.add_memory_items([item.copy() for item in items])
        return items, path.read_bytes()


def _sentinel_agent() -> tuple[Any, list[Any], list[Any]]:
    """Return an agent whose memory holds one task step, that memory's list, and its steps as dicts."""
    from smolagents.memory import TaskStep
    from smolagents_agent import make_agent

    agent, _ = make_agent()
    agent.memory.steps = [TaskStep(task="keep me")]
    steps = agent.memory.steps
    return agent, steps, [step.dict() for step in steps]


def check_restore(memory: Memory, *, into_agent: bool = True) -> None:
    """Restore every run of ``memory`` (and, with ``into_agent``, into an agent): success, or an AgentMemoryError that changed nothing."""
    from agents.integrations.smolagents import SmolagentsRecorder, restore_steps

    before = state_of(memory)
    for run in (1, 2, None):
        with contextlib.suppress(AgentMemoryError):
            restore_steps(memory, run=run)
    if not into_agent:
        assert state_of(memory) == before
        return
    agent, steps, dicts = _sentinel_agent()
    try:
        SmolagentsRecorder(memory).restore(agent)
    except AgentMemoryError:
        assert agent.memory.steps is steps
        assert [step.dict() for step in steps] == dicts
    assert state_of(memory) == before


@FUZZ
@given(data=st.data())
def test_fuzzed_smolagents_row(data: st.DataObject) -> None:
    """A damaged row of a recorded smolagents session in a real SQLite store: reopening and restoring raise only library errors, changing nothing."""
    items, store_file = smolagents_seed()
    index = data.draw(st.integers(0, len(items) - 1), label="row")
    mutated = data.draw(mutations(items[index].to_json().encode()), label="bytes")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "store.db"
        path.write_bytes(store_file)
        with sqlite3.connect(path) as con:
            con.execute("UPDATE kvmemory_items SET data = ? WHERE seq = ?", (mutated, index + 1))
        con.close()
        on_disk = path.read_bytes()
        try:
            memory = open_memory(f"sqlite://{path}", "run")
        except AgentMemoryError:
            assert path.read_bytes() == on_disk
            return
        with memory:
            check_restore(memory)
        assert path.read_bytes() == on_disk


_DELETE = object()


def _field_values() -> list[Any]:
    """Values every field of every step kind is set to in turn: wrong shapes, hostile images, NaN."""
    return [
        None, "x", "", 0, -1, 2**70, 1.5, float("nan"), True, [], {}, [1], ["x"], [None], [{}],
        {"a": 1}, {"role": 1}, {"type": "AgentError"}, {"start_time": "noon"},
        [{"role": "user", "content": [{"type": "image", "image": b"GIF89a"}]}],
        [{"id": 1, "name": None, "arguments": {}}], *HOSTILE_IMAGES, *[[b] for b in HOSTILE_IMAGES],
    ]  # fmt: skip


def test_every_field_of_every_step_kind_damaged() -> None:
    """Each field of each recorded item, set to each wrong value or removed: restore succeeds or raises a library error, changing nothing."""
    items, _ = smolagents_seed()
    values = _field_values()
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(items):
        for key in item.to_dict():
            seen.add((item["kind"], key))
            for value in [*values, _DELETE]:
                damaged = [other.copy() for other in items]
                if value is _DELETE:
                    del damaged[index][key]
                else:
                    damaged[index][key] = value
                # restore() reads every step before it touches the agent, and the
                # fuzz tests above check the agent: here the reading alone, fast.
                check_restore(Memory(damaged), into_agent=False)
    kinds = {kind for kind, _ in seen}
    assert kinds == {"system_prompt", "task", "planning", "action"}
    assert ("action", "observations_images") in seen
    assert ("planning", "model_output_message") in seen


@FUZZ
@given(data=st.data(), image=st.sampled_from(HOSTILE_IMAGES) | st.binary(max_size=64))
def test_fuzzed_image_bytes_in_message_parts(data: st.DataObject, image: bytes) -> None:
    """Image bytes in any content part of any stored chat message: PNG only, anything else a library error."""
    items, _ = smolagents_seed()
    damaged = [item.copy() for item in items]
    places = [
        (index, key, number)
        for index, item in enumerate(damaged)
        for key in ("model_input_messages", "model_output_message")
        if item.get_value(key)
        for number in range(len(item[key]) if key == "model_input_messages" else 1)
    ]
    index, key, number = data.draw(st.sampled_from(places))
    value = copy.deepcopy(damaged[index][key])
    message = value[number] if key == "model_input_messages" else value
    parts = message["content"] if isinstance(message["content"], list) else []
    position = data.draw(st.integers(0, len(parts)))
    message["content"] = [*parts[:position], {"type": "image", "image": image}, *parts[position:]]
    damaged[index][key] = value
    check_restore(Memory(damaged))


# -- contexts of incoming conversations -------------------------------------------------------


@FUZZ
@given(context=json_values, prefix=st.text(max_size=70) | st.just("chat"), keep=st.booleans())
def test_fuzzed_conversation_context(context: Any, prefix: str, keep: bool) -> None:
    """Any context and prefix a client sends: for_context opens a conversation or raises a library error and creates no file."""
    from agents.memory import Conversation

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "chats.db"
        try:
            chat = Conversation.for_context(str(path), context, prefix=prefix, keep_steps=keep)
        except AgentMemoryError:
            assert not path.exists()
            return
        with chat:
            assert len(chat.history.session_id) <= 128
            if keep:
                assert len(chat.scratchpad.session_id) <= 128
