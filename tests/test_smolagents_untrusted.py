"""Stored smolagents rows are untrusted: restore decodes PNG only and names every damaged field.

Against the real smolagents and Pillow packages and real store files.
"""

from __future__ import annotations

import io
import math
import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("smolagents")

from PIL import Image  # smolagents brings Pillow; both are checked for above
from smolagents.memory import TaskStep
from smolagents_agent import FIRST_TASK, image_state, make_agent

from agents.integrations.smolagents import SmolagentsRecorder, restore_steps
from agents.memory import CorruptSessionError, Memory, MemoryItem
from agents.memory.stores import open_memory

HERE = Path(__file__).resolve().parent

EPS = (
    b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n%%EndComments\n"
    b"(/etc/passwd) (r) file pop\nshowpage\n%%EOF\n"
)
"""Encapsulated PostScript: Pillow hands it to Ghostscript (``gs``) when it loads it."""


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def _png_claiming(width: int, height: int) -> bytes:
    """A well-formed PNG header claiming width x height pixels, with almost no pixel data."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _chunk(b"IEND", b"")
    )


def _message_with_image(data: bytes) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "image", "image": data}],
        "tool_calls": None,
        "raw": None,
        "token_usage": None,
    }


def _timing() -> dict[str, Any]:
    return {"start_time": 1.0, "end_time": 2.0}


def _rows_holding(data: Any) -> dict[str, list[MemoryItem]]:
    """One session per place a stored image can sit, each holding ``data`` there."""
    return {
        "task_images": [MemoryItem(kind="task", run=1, task="t", task_images=[data])],
        "observations_images": [
            MemoryItem(kind="action", run=1, step=1, timing=_timing(), observations_images=[data])
        ],
        "model_input_messages": [
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing=_timing(),
                model_input_messages=[_message_with_image(data)],
            )
        ],
        "model_output_message": [
            MemoryItem(
                kind="planning",
                run=1,
                plan="p",
                timing=_timing(),
                model_input_messages=[],
                model_output_message=_message_with_image(data),
            )
        ],
    }


_GHOSTSCRIPT_PROBE = textwrap.dedent(
    """
    import io, sys
    from agents.integrations.smolagents import SmolagentsRecorder
    from agents.memory import CorruptSessionError
    from agents.memory.stores import open_memory
    from smolagents_agent import make_agent

    for session in sys.argv[2:]:
        with open_memory(sys.argv[1], session) as memory:
            agent, _ = make_agent()
            try:
                SmolagentsRecorder(memory).restore(agent)
            except CorruptSessionError as exc:
                print("refused", session, exc)
            else:
                print("restored", session)
    # The control: plain Pillow, asked to load the same bytes, does call gs.
    from PIL import Image
    from test_smolagents_untrusted import EPS
    try:
        Image.open(io.BytesIO(EPS)).load()
    except Exception:
        pass
    """
)


def test_eps_bytes_in_any_image_field_never_run_ghostscript(tmp_path: Path) -> None:
    """Stored EPS bytes are refused as CorruptSessionError in every image field; gs on PATH is never run."""
    marker = tmp_path / "gs-was-run"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    gs = fake_bin / "gs"
    gs.write_text(f'#!/bin/sh\necho "$@" >> "{marker}"\n', encoding="utf-8")
    gs.chmod(0o755)
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    sessions = _rows_holding(EPS)
    for session, items in sessions.items():
        with open_memory(url, session) as memory:
            memory.add_memory_items(items)
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]),
    }
    probe = subprocess.run(
        [sys.executable, "-c", _GHOSTSCRIPT_PROBE, url, *sessions],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    lines = probe.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["refused", s] for s in sessions]
    assert all("not a PNG image" in line for line in lines)
    # Only the control (plain Pillow, after every restore) ran the fake gs:
    # without the PNG-only rule, the restores above would have run it first.
    calls = marker.read_text(encoding="utf-8").splitlines()
    assert all("--version" in c or "-sDEVICE" in c for c in calls)
    assert len([c for c in calls if "-sDEVICE" in c]) == 1


@pytest.mark.parametrize(
    ("label", "data"),
    [
        ("random bytes", b"\x00\x01not an image at all"),
        ("empty", b""),
        ("gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"),
        ("truncated png", _png(Image.new("RGB", (40, 40), (1, 2, 3)))[:60]),
        ("png signature only", b"\x89PNG\r\n\x1a\n"),
        ("bad pixel data", _png_claiming(8, 8).replace(zlib.compress(b"\x00" * 64), b"x" * 12)),
    ],
)
@pytest.mark.parametrize("field", ["task_images", "observations_images", "model_input_messages"])
def test_damaged_image_bytes_are_named(label: str, data: bytes, field: str) -> None:
    """Bytes that are not a whole PNG raise CorruptSessionError naming the item and field; the memory is unchanged."""
    memory = Memory(_rows_holding(data)[field])
    before = memory.to_json()
    with pytest.raises(CorruptSessionError, match=rf"item 0 \(\w+ step\).*{field}"):
        restore_steps(memory)
    assert memory.to_json() == before


def test_png_header_claiming_a_huge_image_is_refused_before_decoding() -> None:
    """A PNG header of 40000x40000 pixels is refused by size; no pixel is decoded."""
    memory = Memory(_rows_holding(_png_claiming(40000, 40000))["task_images"])
    with pytest.raises(CorruptSessionError, match=r"40000x40000 pixels.*MAX_IMAGE_PIXELS"):
        restore_steps(memory)


def test_png_bytes_are_still_restored_from_a_bytearray() -> None:
    """The recorder's PNG bytes restore pixel for pixel (a bytearray too)."""
    image = Image.new("RGBA", (3, 2), (10, 20, 30, 40))
    memory = Memory([MemoryItem(kind="task", run=1, task="t", task_images=[_png(image)])])
    (step,) = restore_steps(memory)[1]
    assert step.task_images[0].tobytes() == image.tobytes()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("boom", r"error: expected an object, got str 'boom'"),
        (["boom"], r"error: expected an object, got list"),
        ({"type": "AgentError"}, r"error: lacks 'message'"),
        ({"type": "AgentError", "message": 3}, r"error.message: expected a str, got int 3"),
    ],
)
def test_error_of_the_wrong_shape_is_named(error: Any, expected: str) -> None:
    """An ``error`` holding a string, a list or a bad object raises CorruptSessionError naming it."""
    memory = Memory([MemoryItem(kind="action", run=1, step=1, timing=_timing(), error=error)])
    with pytest.raises(
        CorruptSessionError, match=rf"Field 'error' of item 0 \(action step\).*{expected}"
    ):
        restore_steps(memory)


@pytest.mark.parametrize(
    "run",
    ["one", [1], math.nan, -1, 1.0, True, {"n": 1}, pytest.param(10**5000, id="5001-digit int")],
)
def test_run_that_is_not_a_run_number_is_named(run: Any) -> None:
    """A ``run`` that is not a non-negative int raises CorruptSessionError naming the item, in restore and in the recorder."""
    memory = Memory(
        [MemoryItem(kind="task", run=1, task="t"), MemoryItem(kind="task", run=run, task="u")]
    )
    with pytest.raises(CorruptSessionError, match=r"Field 'run' of item 1 holds"):
        restore_steps(memory)
    with pytest.raises(CorruptSessionError, match=r"Field 'run' of item 1 holds"):
        SmolagentsRecorder(memory)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (MemoryItem(kind="task", run=1, task=3), r"Field 'task' of item 0.*task: expected a str"),
        (
            MemoryItem(kind="action", run=1, step="2", timing=_timing()),
            r"Field 'step' of item 0.*step_number: expected an int",
        ),
        (
            MemoryItem(kind="action", run=1, step=1, timing={"start_time": "noon"}),
            r"timing.start_time: expected a number",
        ),
        (
            MemoryItem(kind="action", run=1, step=1, timing=_timing(), tool_calls=[{"id": 1}]),
            r"tool_calls\[0\]: lacks 'name', 'arguments'",
        ),
        (
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing=_timing(),
                token_usage={"input_tokens": "a", "output_tokens": "b"},
            ),
            r"token_usage.input_tokens: expected an int",
        ),
        (
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing=_timing(),
                model_input_messages=[{"role": ["user"]}],
            ),
            r"model_input_messages\[0\].role: expected a str",
        ),
        (
            MemoryItem(
                kind="action",
                run=1,
                step=1,
                timing=_timing(),
                model_input_messages=[{"role": "user", "content": ["text"]}],
            ),
            r"model_input_messages\[0\].content\[0\]: expected an object",
        ),
        (
            MemoryItem(kind="system_prompt", run=1, system_prompt=["s"]),
            r"Field 'system_prompt' of item 0 \(system_prompt\) holds list",
        ),
    ],
)
def test_fields_of_the_wrong_shape_are_named(item: MemoryItem, expected: str) -> None:
    """Each field of each step kind is checked: a wrong shape raises CorruptSessionError naming field and path."""
    with pytest.raises(CorruptSessionError, match=expected):
        restore_steps(Memory([item]))


def test_a_refused_restore_leaves_the_agent_and_the_store_as_they_were(tmp_path: Path) -> None:
    """restore that meets a damaged row changes neither the agent's memory nor the stored session."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_memory(url, "s") as memory:
        memory.add_memory_items(_rows_holding(b"GIF89a")["task_images"])
        before = memory.to_json()
        agent, _ = make_agent()
        agent.run(FIRST_TASK)
        steps = agent.memory.steps
        snapshot = [step.dict() for step in steps]
        recorder = SmolagentsRecorder(memory)
        with pytest.raises(CorruptSessionError):
            recorder.restore(agent)
        assert agent.memory.steps is steps
        assert [step.dict() for step in steps] == snapshot
        assert memory.to_json() == before
    with open_memory(url, "s") as memory:
        assert memory.to_json() == before


def _image_in(mode: str) -> Image.Image:
    """A 5x3 image in ``mode`` with distinct pixels (and, for P and PA, a palette of 6 colours)."""
    if mode in ("P", "PA"):
        image = Image.new(mode, (5, 3))
        image.putpalette(bytes(range(18)), rawmode="RGB")
    else:
        image = Image.new(mode, (5, 3))
    bands = len(image.getbands())
    for x in range(5):
        for y in range(3):
            value = (x * 3 + y) % 6 if mode in ("P", "PA", "1") else x * 40 + y * 7 + 1
            if mode == "1":
                value = (x + y) % 2
            if mode == "F":
                value = value + 0.25 * y - 1e6 * (x == 4)
            image.putpixel((x, y), value if bands == 1 else (value,) * bands)
    return image


_ALL_MODES = [
    "1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB",
    "HSV", "I", "F", "I;16", "I;16B", "I;16L", "I;16N",
]  # fmt: skip


@pytest.mark.parametrize("mode", _ALL_MODES)
def test_images_in_every_mode_come_back_exact(mode: str) -> None:
    """A task image in any Pillow mode is restored with its mode, size, pixels, palette and info."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    image = _image_in(mode)
    agent.run(FIRST_TASK, images=[image])
    (task, *_) = restore_steps(memory)[1]
    assert isinstance(task, TaskStep)
    assert image_state(task.task_images[0]) == image_state(image)


def test_modes_png_holds_exactly_stay_png() -> None:
    """RGB and the other modes a PNG gives back exactly are stored as PNG bytes; CMYK as a raw record."""
    memory = Memory()
    agent, _ = make_agent([SmolagentsRecorder(memory)])
    agent.run(FIRST_TASK, images=[_image_in("RGB"), _image_in("CMYK")])
    png, raw = memory[1]["task_images"]
    assert png.startswith(b"\x89PNG")
    assert raw["mode"] == "CMYK"
    assert raw["size"] == [5, 3]


def test_hostile_rows_are_refused_on_every_store(store_url: str) -> None:
    """EPS bytes and a bad run, kept in any store (SQLite, JSONL, PostgreSQL, memory), are refused as CorruptSessionError on restore."""
    for session, items in _rows_holding(EPS).items():
        with open_memory(store_url, session) as memory:
            memory.add_memory_items(items)
        with open_memory(store_url, session) as memory:
            before = memory.to_json()
            agent, _ = make_agent()
            with pytest.raises(CorruptSessionError, match=r"not a PNG image"):
                SmolagentsRecorder(memory).restore(agent)
            assert agent.memory.steps == []
            assert memory.to_json() == before
    with open_memory(store_url, "bad-run") as memory:
        memory.add_memory_items([MemoryItem(kind="task", run="one", task="t")])
    with (
        open_memory(store_url, "bad-run") as memory,
        pytest.raises(CorruptSessionError, match=r"Field 'run' of item 0 holds str 'one'"),
    ):
        SmolagentsRecorder(memory)


def _record(**changes: Any) -> dict[str, Any]:
    """A raw image record as the recorder writes one (CMYK, 3x2), with ``changes``."""
    record = {"mode": "CMYK", "size": [3, 2], "pixels": zlib.compress(bytes(24))}
    record.update(changes)
    return record


_BAD_RECORDS = {
    "unknown mode": (_record(mode="EPS"), r"mode 'EPS' is not one the recorder writes raw"),
    "size shape": (_record(size=[3]), r"size must be \[width, height\]"),
    "negative size": (_record(size=[-3, 2]), r"size must be \[width, height\]"),
    "pixels text": (_record(pixels="AAAA"), r"pixels must be bytes, got str"),
    "too many pixels": (
        _record(size=[100_000, 100_000]),
        r"100000x100000 pixels is more than PIL.Image.MAX_IMAGE_PIXELS",
    ),
    "short pixels": (
        _record(pixels=zlib.compress(bytes(23))),
        r"CMYK 3x2 needs 24 bytes of pixels",
    ),
    "long pixels": (
        _record(pixels=zlib.compress(bytes(25))),
        r"CMYK 3x2 needs 24 bytes of pixels",
    ),
    "inflates far": (
        _record(mode="L", size=[1, 1], pixels=zlib.compress(bytes(50_000_000))),
        r"L 1x1 needs 1 bytes of pixels",
    ),
    "not zlib": (_record(pixels=b"\x00" * 24), r"the pixels are not zlib data"),
    "palette on CMYK": (_record(palette=["RGB", bytes(3)]), r"a CMYK image has no palette"),
    "palette size": (
        _record(mode="P", size=[1, 1], pixels=zlib.compress(b"\x00"), palette=["RGB", bytes(770)]),
        r"a RGB palette of 770 bytes is not whole colours, at most 256",
    ),
    "transparency": (_record(transparency={"a": 1}), r"transparency must be a whole number"),
}


@pytest.mark.parametrize("bad", sorted(_BAD_RECORDS), ids=sorted(_BAD_RECORDS))
def test_a_damaged_raw_image_is_refused_in_every_image_field(bad: str) -> None:
    """A raw image record whose parts disagree is refused before Image.frombytes, naming the field; the agent is unchanged."""
    record, message = _BAD_RECORDS[bad]
    for field, items in _rows_holding(record).items():
        agent, _ = make_agent()
        steps = agent.memory.steps
        with pytest.raises(CorruptSessionError, match=message) as caught:
            SmolagentsRecorder(Memory(items)).restore(agent)
        assert field in str(caught.value)
        assert agent.memory.steps is steps


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "mode": st.sampled_from(["1", "L", "P", "PA", "CMYK", "F", "I;16B", "RGB", "X"]),
            "size": st.lists(st.integers(-2, 6), min_size=0, max_size=3),
            "pixels": st.binary(max_size=40).map(zlib.compress) | st.binary(max_size=8),
        },
        optional={
            "palette": st.lists(
                st.sampled_from(["RGB", "RGBA", 1]) | st.binary(max_size=12), max_size=3
            ),
            "transparency": st.integers(-1, 300)
            | st.binary(max_size=4)
            | st.lists(st.integers(0, 9)),
        },
    )
)
def test_any_raw_image_record_restores_or_is_refused(record: dict[str, Any]) -> None:
    """Whatever a raw image record holds, restore rebuilds an image of its mode and size or raises CorruptSessionError naming the record."""
    memory = Memory([MemoryItem(kind="task", run=1, task="t", task_images=[record])])
    try:
        (task,) = restore_steps(memory)[1]
    except CorruptSessionError as exc:
        refused = str(exc)
    else:
        refused = ""
    if refused:
        assert "holds a raw image record that cannot be read" in refused
        return
    assert task.task_images[0].mode == record["mode"]
    assert list(task.task_images[0].size) == record["size"]
