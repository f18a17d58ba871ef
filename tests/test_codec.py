"""Tests for the codec: lossless JSON for documented types, the unencodable policy, session files."""

from __future__ import annotations

import copy
import datetime as dt
import enum
import gc
import io
import itertools
import json
import math
import os
import sys
import threading
import types
import uuid
import weakref
from decimal import Decimal
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory import (
    CorruptSessionError,
    InvalidArgumentError,
    Memory,
    MemoryItem,
    MissingDependencyError,
    SerializationError,
    UnsupportedVersionError,
    _codec,
    field,
    write_session,
)


class Color(enum.Enum):
    """An importable Enum for round trips."""

    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    """An IntEnum, which orjson would otherwise write as a bare int."""

    LOW = 1


class Observation(MemoryItem):
    """A typed item whose class must survive round trips."""

    step: int = 0
    seen: str = field(default="")


def round_trip(memory: Memory) -> Memory:
    return Memory.from_json(memory.to_json_bytes())


EXAMPLES: dict[str, Any] = {
    "datetime_naive": dt.datetime(2024, 5, 1, 12, 30, 5, 123456),
    "datetime_aware": dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "date": dt.date(2024, 2, 29),
    "time": dt.time(23, 59, 1, 5),
    "timedelta": dt.timedelta(days=-1, seconds=5, microseconds=7),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "decimal": Decimal("3.14159265358979323846"),
    "decimal_nan": Decimal("NaN"),
    "bytes": b"\x00\xffpng",
    "bytearray": bytearray(b"ab"),
    "path": Path("/runs/step_1.png"),
    "pure_posix": PurePosixPath("a/b"),
    "pure_windows": PureWindowsPath("C:/shots/1.png"),
    "enum": Color.RED,
    "enum_int_value": Color.BLUE,
    "int_enum": Level.LOW,
    "set": {1, 2, 3},
    "frozenset": frozenset({"a"}),
    "tuple": (1, "two", (3.0,)),
    "empty_tuple": (),
    "complex": complex(1, -2),
    "nan": float("nan"),
    "inf": float("inf"),
    "minus_inf": float("-inf"),
    "int_keys": {1: "one", 2: "two"},
    "tuple_keys": {(1, 2): "pair"},
    "tag_lookalike": {"$kv": "datetime", "v": "not a date"},
    "nested": {"list": [1, (2, 3), {"when": dt.date(2020, 1, 1)}]},
    "big_int": 2**80,
    "big_negative_int": -(2**70),
    "big_ints_in_list": [1, 2**65],
    "unicode": "日本語 ✓",
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_documented_type_round_trips(name: str) -> None:
    """Each documented type comes back with the same type and value."""
    value = EXAMPLES[name]
    memory = Memory([MemoryItem(step=1, value=value)])
    back = round_trip(memory).content[0]["value"]
    assert type(back) is type(value)
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    elif isinstance(value, Decimal) and value.is_nan():
        assert back.is_nan()
    else:
        assert back == value


def test_numpy_array_round_trips() -> None:
    """A numpy array keeps dtype, shape and values."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    back = round_trip(Memory([MemoryItem(a=array)])).content[0]["a"]
    assert back.dtype == array.dtype
    assert back.shape == array.shape
    assert np.array_equal(back, array)


def test_numpy_scalar_round_trips() -> None:
    """A numpy scalar keeps its dtype."""
    back = round_trip(Memory([MemoryItem(a=np.int16(7))])).content[0]["a"]
    assert type(back) is np.int16
    assert back == 7


def test_typed_item_class_survives_round_trip() -> None:
    """A typed subclass comes back as itself, with its fields."""
    memory = Memory([Observation(step=1, seen="dialog"), MemoryItem(step=2)])
    back = round_trip(memory)
    assert [type(item) for item in back] == [Observation, MemoryItem]
    assert back == memory


def test_nan_is_tagged_not_null() -> None:
    """NaN and infinities are written as float tags, never as null."""
    text = Memory([MemoryItem(x=float("nan"), y=float("-inf"))]).to_json_bytes()
    assert b'"x":{"$kv":"float","v":"nan"}' in text
    assert b'"y":{"$kv":"float","v":"-inf"}' in text


def test_plain_items_are_written_unwrapped() -> None:
    """Items of JSON types only are plain field objects, as UFO writes them."""
    memory = Memory([MemoryItem(step=1, tags=["a"], meta={"k": None}, cost=0.5)])
    assert memory.to_json_bytes() == b'[{"step":1,"tags":["a"],"meta":{"k":null},"cost":0.5}]'


def test_item_with_tags_is_wrapped() -> None:
    """An item that needs tags is wrapped with its fields inside."""
    doc = orjson.loads(Memory([MemoryItem(step=1, when=dt.date(2024, 1, 2))]).to_json_bytes())
    assert doc == [
        {"$kv": "item", "fields": {"step": 1, "when": {"$kv": "date", "v": "2024-01-02"}}}
    ]


def test_field_named_like_the_tag_round_trips() -> None:
    """A field literally named "$kv" survives a round trip."""
    memory = Memory([MemoryItem(**{"$kv": "user data", "step": 1})])
    assert round_trip(memory) == memory


def test_encoding_reflects_changes_after_first_encode() -> None:
    """A value changed after an encode is encoded anew (the plain-JSON cache is reset)."""
    item = MemoryItem(step=1, v="text")
    memory = Memory([item])
    memory.to_json_bytes()
    item.set_value("v", (1, 2))
    assert round_trip(memory).content[0]["v"] == (1, 2)


# -- property tests ------------------------------------------------------------------

_keys = st.text(min_size=1, max_size=8)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=16)
    | st.datetimes(timezones=st.none() | st.timezones())
    | st.dates()
    | st.times()
    | st.uuids()
    | st.decimals(allow_nan=False)
    | st.sampled_from(list(Color))
)
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(_keys, children, max_size=4)
        | st.dictionaries(st.integers(), children, max_size=3)
        | st.frozensets(st.integers() | st.text(max_size=5), max_size=4)
    ),
    max_leaves=12,
)
_fields = st.dictionaries(_keys, _values, max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(_fields, max_size=6))
def test_property_memory_round_trips_through_json(rows: list[dict[str, Any]]) -> None:
    """decode(encode(memory)) == memory for generated fields of every supported type."""
    memory = Memory([MemoryItem(**row) for row in rows])
    assert round_trip(memory) == memory


@settings(max_examples=100, deadline=None)
@given(st.lists(_fields, max_size=4), st.integers(min_value=0))
def test_property_typed_items_round_trip(rows: list[dict[str, Any]], step: int) -> None:
    """Typed items keep their class and fields through JSON."""
    memory = Memory(
        [
            Observation(step=step, **{k: v for k, v in row.items() if k not in ("step", "seen")})
            for row in rows
        ]
    )
    back = round_trip(memory)
    assert back == memory
    assert all(type(item) is Observation for item in back)


@settings(max_examples=100, deadline=None)
@given(_values)
def test_property_encode_value_round_trips(value: Any) -> None:
    """decode_value(encode_value(v)) == v."""
    encoded = _codec.encode_value(value)
    assert _codec.decode_value(orjson.loads(_codec.dumps(encoded))) == value


# -- the unencodable policy --------------------------------------------------------------


class Opaque:
    """Something JSON cannot hold (a stand-in for a PIL image)."""

    def __repr__(self) -> str:
        return "<Opaque image>"


def test_unencodable_value_names_key_step_and_type() -> None:
    """The default policy raises SerializationError naming the key, the step and the type."""
    memory = Memory([MemoryItem(step=7, screenshot=Opaque())])
    with pytest.raises(
        SerializationError,
        match=r"Field 'screenshot' of step 7 cannot be encoded as JSON \(got (tests\.)?test_codec\.Opaque\)",
    ) as info:
        memory.to_json()
    assert isinstance(info.value, TypeError)


def test_unencodable_nested_value_names_top_level_key() -> None:
    """A bad value inside a list names the field that holds it."""
    with pytest.raises(SerializationError, match="Field 'images' of step 2"):
        Memory([MemoryItem(step=2, images=[1, Opaque()])]).to_json()


def test_repr_policy_writes_repr() -> None:
    """on_unencodable="repr" writes repr() of the value."""
    text = Memory([MemoryItem(step=1, img=Opaque())]).to_json(on_unencodable="repr")
    assert json.loads(text) == [{"step": 1, "img": "<Opaque image>"}]


def test_drop_policy_drops_the_field() -> None:
    """on_unencodable="drop" leaves the field out and keeps the rest."""
    text = Memory([MemoryItem(step=1, img=Opaque(), ok=True)]).to_json(on_unencodable="drop")
    assert json.loads(text) == [{"step": 1, "ok": True}]


def test_unknown_policy_is_refused() -> None:
    """A misspelt policy raises ValueError listing the choices."""
    with pytest.raises(ValueError, match="'error', 'repr' or 'drop'"):
        _codec.encode_value(Opaque(), on_unencodable="ignore")  # type: ignore[arg-type]  # the wrong value is the point


def test_local_enum_is_refused_with_reason() -> None:
    """An Enum defined in a function cannot be imported back, so it is refused."""

    class Local(enum.Enum):
        A = 1

    with pytest.raises(SerializationError, match="defined inside a function"):
        Memory([MemoryItem(step=1, e=Local.A)]).to_json()


# -- session documents -------------------------------------------------------------------


def sample_memory() -> Memory:
    memory = Memory(
        session_id="run-1", metadata={"task": "save as pdf", "started": dt.date(2024, 5, 1)}
    )
    memory.add_memory_item(MemoryItem(step=1, action="click"))
    memory.add_memory_item(Observation(step=2, seen="dialog"))
    return memory


def test_save_and_load_file_round_trip(tmp_path: Path) -> None:
    """save() then Memory.from_file() gives back items, classes, session id and metadata."""
    path = tmp_path / "run.json"
    memory = sample_memory()
    memory.save(path)
    back = Memory.from_file(path)
    assert back == memory
    assert back.session_id == "run-1"
    assert back.metadata == {"task": "save as pdf", "started": dt.date(2024, 5, 1)}
    assert back.created_at == memory.created_at


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_write_session_in_pages_reads_back_as_saved(tmp_path: Path, suffix: str) -> None:
    """write_session() of pages gives the file save() gives: same items, classes, id and metadata."""
    memory = sample_memory()
    memory.add_memory_items([MemoryItem(step=n, note=f"n{n}") for n in range(3, 8)])
    path = tmp_path / f"pages{suffix}"
    items = memory.content
    pages = iter([items[:3], [], items[3:6], items[6:]])
    written = write_session(
        path, pages, session_id="run-1", metadata=memory.metadata, step_key="step"
    )
    assert written == len(memory)
    back = Memory.from_file(path)
    assert back == memory
    assert (back.session_id, back.metadata) == ("run-1", memory.metadata)


def test_write_session_of_no_pages_is_an_empty_session(tmp_path: Path) -> None:
    """write_session() with no items writes a valid, empty session document."""
    path = tmp_path / "empty.json"
    assert write_session(path, [], session_id="none") == 0
    back = Memory.from_file(path)
    assert (len(back), back.session_id) == (0, "none")


def test_write_session_failing_part_way_leaves_the_old_file(tmp_path: Path) -> None:
    """A value that cannot be encoded in a later page leaves the previous file and no temporary file."""
    path = tmp_path / "run.jsonl"
    sample_memory().save(path)
    before = path.read_bytes()
    pages = [[MemoryItem(step=1)], [MemoryItem(step=2, img=Opaque())]]
    with pytest.raises(SerializationError, match="img"):
        write_session(path, pages)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.jsonl"]


def test_session_document_is_versioned(tmp_path: Path) -> None:
    """The saved document names its format and version."""
    path = tmp_path / "run.json"
    sample_memory().save(path)
    doc = orjson.loads(path.read_bytes())
    assert (doc["format"], doc["version"], doc["session_id"], doc["step_key"]) == (
        "kvmemory.session",
        1,
        "run-1",
        "step",
    )


def test_future_version_is_refused(tmp_path: Path) -> None:
    """A document of a newer format version raises UnsupportedVersionError and loads nothing."""
    path = tmp_path / "future.json"
    path.write_bytes(orjson.dumps({"format": "kvmemory.session", "version": 99, "items": []}))
    memory = sample_memory()
    with pytest.raises(
        UnsupportedVersionError, match="version 99, newer than the 1 this kvmemory reads"
    ):
        memory.load_file(path)
    assert memory == sample_memory()


def test_save_is_atomic_when_encoding_fails(tmp_path: Path) -> None:
    """A failed save leaves the previous file intact and no temporary file behind."""
    path = tmp_path / "run.json"
    sample_memory().save(path)
    before = path.read_bytes()
    bad = Memory([MemoryItem(step=1, img=Opaque())])
    with pytest.raises(SerializationError):
        bad.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["run.json"]


def test_save_replaces_by_rename(tmp_path: Path) -> None:
    """save() writes a new inode and renames it over the old file."""
    path = tmp_path / "run.json"
    sample_memory().save(path)
    first_inode = path.stat().st_ino
    sample_memory().save(path)
    assert path.stat().st_ino != first_inode


def test_ufo_bare_array_file_loads(tmp_path: Path) -> None:
    """A file holding UFO's bare JSON array loads as items."""
    path = tmp_path / "ufo.json"
    path.write_text(json.dumps([{"Step": 1, "Action": "click"}]), encoding="utf-8")
    memory = Memory.from_file(path, step_key="Step")
    assert memory.filter_memory_from_steps([1]) == [{"Step": 1, "Action": "click"}]


def test_corrupt_file_names_file_and_position(tmp_path: Path) -> None:
    """Invalid JSON raises CorruptSessionError naming the file, line and column; nothing is loaded."""
    path = tmp_path / "run.json"
    path.write_text('[\n{"step": 1},\n{"step": 2,, }\n]', encoding="utf-8")
    memory = sample_memory()
    with pytest.raises(
        CorruptSessionError, match=r"'.*run\.json' is not valid JSON at line 3, column 12"
    ):
        memory.load_file(path)
    assert memory == sample_memory()


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    """A file cut short raises and leaves the memory unchanged."""
    path = tmp_path / "run.json"
    sample_memory().save(path)
    path.write_bytes(path.read_bytes()[:-20])
    memory = Memory([MemoryItem(step=0)])
    with pytest.raises(CorruptSessionError, match=r"run\.json"):
        memory.load_file(path)
    assert memory.content == [MemoryItem(step=0)]


def test_item_that_is_not_an_object_is_refused() -> None:
    """An array element that is not an object names its position."""
    with pytest.raises(CorruptSessionError, match="item 1 of JSON input is a JSON int"):
        Memory.from_json("[{}, 3]")


def test_unknown_tag_is_refused() -> None:
    """An unknown type tag raises and names the item."""
    bad = '[{"$kv": "item", "fields": {"x": {"$kv": "martian", "v": 1}}}]'
    with pytest.raises(
        CorruptSessionError,
        match=r"item 0 of JSON input, at \$\.fields\.x: unknown type tag 'martian'",
    ):
        Memory.from_json(bad)


def test_malformed_tag_payload_is_refused() -> None:
    """A tag with a broken payload raises CorruptSessionError, not a bare ValueError."""
    bad = '[{"$kv": "item", "fields": {"x": {"$kv": "date", "v": "yesterday"}}}]'
    with pytest.raises(CorruptSessionError, match="malformed 'date' value 'yesterday'"):
        Memory.from_json(bad)


def test_unknown_item_class_is_refused() -> None:
    """A class this process does not define raises and says what to import."""
    bad = '[{"$kv": "item", "class": "nowhere.module:Thing", "fields": {}}]'
    with pytest.raises(
        CorruptSessionError,
        match=r"'nowhere\.module:Thing' .* is not defined in this process; import the module",
    ):
        Memory.from_json(bad)


def test_unknown_item_class_can_load_as_base() -> None:
    """on_unknown_class="base" loads the fields of an unimportable class as a plain item."""
    data = '[{"$kv": "item", "class": "__main__:Gone", "fields": {"step": 1}}]'
    memory = Memory.from_json(data, on_unknown_class="base")
    assert memory.content == [MemoryItem(step=1)]


def test_non_item_class_is_refused() -> None:
    """A class path naming something that is not a MemoryItem is refused."""
    bad = '[{"$kv": "item", "class": "builtins:dict", "fields": {}}]'
    with pytest.raises(CorruptSessionError, match="not a MemoryItem subclass"):
        Memory.from_json(bad, trusted_import=True)


def test_document_without_format_is_refused() -> None:
    """A JSON object that is not a session document is refused."""
    with pytest.raises(CorruptSessionError, match="is not a kvmemory session"):
        Memory.from_json('{"items": []}')


# -- JSONL ----------------------------------------------------------------------------


def test_jsonl_stream_round_trip() -> None:
    """write_jsonl then read_jsonl gives back the memory and its session data."""
    memory = sample_memory()
    buffer = io.BytesIO()
    memory.write_jsonl(buffer)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 3  # header + one line per item
    buffer.seek(0)
    back = Memory.read_jsonl(buffer)
    assert back == memory
    assert back.session_id == "run-1"


def test_jsonl_file_save_and_load(tmp_path: Path) -> None:
    """save("x.jsonl") writes JSONL that from_file reads back."""
    path = tmp_path / "run.jsonl"
    memory = sample_memory()
    memory.save(path)
    assert path.read_bytes().count(b"\n") == 3
    assert Memory.from_file(path) == memory


def test_jsonl_without_header_loads_items() -> None:
    """A JSONL stream of bare field objects loads as items."""
    stream = io.BytesIO(b'{"step": 1}\n\n{"step": 2}\n')
    assert [item.step for item in Memory.read_jsonl(stream)] == [1, 2]


def test_jsonl_truncated_line_names_the_line(tmp_path: Path) -> None:
    """A truncated last line raises, naming the line, and loads nothing."""
    path = tmp_path / "run.jsonl"
    sample_memory().save(path)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    memory = Memory()
    with pytest.raises(CorruptSessionError, match=r"line 3, column \d+ \(the line is truncated\)"):
        memory.load_file(path)
    assert memory.is_empty()


def test_jsonl_future_version_is_refused() -> None:
    """A JSONL header of a newer version is refused."""
    stream = io.BytesIO(b'{"format":"kvmemory.session","version":2,"items":"jsonl"}\n{"step":1}\n')
    with pytest.raises(UnsupportedVersionError):
        Memory.read_jsonl(stream)


def test_load_json_keeps_memory_on_bad_input() -> None:
    """load_json with invalid JSON leaves the memory as it was."""
    memory = sample_memory()
    with pytest.raises(CorruptSessionError, match="line 1"):
        memory.load_json("[{")
    assert memory == sample_memory()


# -- edges of the codec ----------------------------------------------------------------


def test_dumps_refuses_raw_unsupported_value() -> None:
    """dumps() on data that was not prepared by the encoder raises SerializationError."""
    with pytest.raises(SerializationError, match="Opaque"):
        _codec.dumps({"x": Opaque()})


def test_builtin_subclass_is_written_as_its_base() -> None:
    """A str subclass and a named tuple are written as their builtin base."""
    from typing import NamedTuple

    class Label(str):
        pass

    class Point(NamedTuple):
        x: int
        y: int

    back = round_trip(Memory([MemoryItem(label=Label("ok"), point=Point(1, 2))])).content[0]
    assert (type(back["label"]), back["label"]) == (str, "ok")
    assert (type(back["point"]), back["point"]) == (tuple, (1, 2))


def test_datetime_subclass_uses_the_datetime_tag() -> None:
    """A subclass of a tagged type is written with its base's tag."""

    class Stamp(dt.date):
        pass

    back = round_trip(Memory([MemoryItem(d=Stamp(2024, 1, 2))])).content[0]["d"]
    assert back == dt.date(2024, 1, 2)


def test_numpy_object_array_is_refused() -> None:
    """A numpy array of Python objects cannot be encoded and says why."""
    with pytest.raises(SerializationError, match="arrays of Python objects"):
        Memory([MemoryItem(step=1, a=np.array([object()]))]).to_json()


def test_encode_value_drop_gives_none() -> None:
    """encode_value with the drop policy returns None for an unencodable value."""
    assert _codec.encode_value(Opaque(), on_unencodable="drop") is None


def test_enum_tag_naming_a_non_enum_is_refused() -> None:
    """An enum tag whose class is not an Enum is refused."""
    bad = '[{"$kv":"item","fields":{"e":{"$kv":"enum","cls":"builtins:dict","v":1}}}]'
    with pytest.raises(CorruptSessionError, match="is not an Enum"):
        Memory.from_json(bad)


def test_float_tag_with_other_text_is_refused() -> None:
    """A float tag must hold nan, inf or -inf."""
    bad = '[{"$kv":"item","fields":{"f":{"$kv":"float","v":"1.5"}}}]'
    with pytest.raises(CorruptSessionError, match="expected 'nan', 'inf' or '-inf'"):
        Memory.from_json(bad)


def test_malformed_class_path_is_refused() -> None:
    """A class path without a colon is refused."""
    with pytest.raises(CorruptSessionError, match="not of the form 'module:QualName'"):
        Memory.from_json('[{"$kv":"item","class":"nocolon","fields":{}}]', trusted_import=True)


def test_unknown_item_marker_is_refused() -> None:
    """An object with a "$kv" marker other than "item" is refused."""
    with pytest.raises(CorruptSessionError, match="unknown '\\$kv' marker 'thing'"):
        Memory.from_json('[{"$kv":"thing"}]')


def test_wrapped_item_without_fields_is_refused() -> None:
    """A wrapped item must carry a fields object."""
    with pytest.raises(CorruptSessionError, match="without a 'fields' object"):
        Memory.from_json('[{"$kv":"item","fields":[1]}]')


def test_invalid_version_is_refused() -> None:
    """A session header with a non-integer version is refused."""
    with pytest.raises(CorruptSessionError, match="invalid format version '1'"):
        Memory.from_json('{"format":"kvmemory.session","version":"1","items":[]}')


def test_document_without_items_is_refused() -> None:
    """A session header without an items array is refused."""
    with pytest.raises(CorruptSessionError, match="has no 'items' array"):
        Memory.from_json('{"format":"kvmemory.session","version":1}')


def test_failed_atomic_write_removes_the_temporary_file(tmp_path: Path) -> None:
    """If writing a chunk fails, the temporary file is removed and the target untouched."""

    def chunks() -> Any:
        yield b"partial"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _codec.atomic_write(tmp_path / "out.json", chunks())
    assert os.listdir(tmp_path) == []


def test_file_with_leading_whitespace_loads(tmp_path: Path) -> None:
    """A JSON session file may start with blank space."""
    path = tmp_path / "ufo.json"
    path.write_text('  \n [{"step": 1}]', encoding="utf-8")
    assert Memory.from_file(path).steps() == [1]


def test_session_header_restores_step_key(tmp_path: Path) -> None:
    """A saved step_key comes back with the file."""
    path = tmp_path / "old.json"
    Memory([MemoryItem(Step=1)], step_key="Step").save(path)
    back = Memory.from_file(path)
    assert back.step_key == "Step"
    assert back.filter_memory_from_steps([1]) == [{"Step": 1}]


def test_empty_jsonl_stream_loads_empty() -> None:
    """An empty JSONL stream gives an empty memory."""
    assert Memory.read_jsonl(io.BytesIO(b"")).is_empty()


def test_typed_field_invalid_in_file_names_the_item() -> None:
    """A stored typed item that no longer validates is refused, naming the item."""
    bad = '[{"$kv":"item","class":"test_codec:Observation","fields":{"step":"x"}}]'
    bad_alt = bad.replace("test_codec", Observation.__module__)
    with pytest.raises(
        CorruptSessionError, match="item 0 of JSON input: Field 'step' of Observation"
    ):
        Memory.from_json(bad_alt)


# -- UFO's JSON (dumps_ufo) ----------------------------------------------------------------------


def test_dumps_ufo_is_json_dumps_for_what_json_dumps_writes() -> None:
    """dumps_ufo writes exactly json.dumps's text for data json.dumps accepts."""
    data = {"a": (1, 2.5), "b": [None, True, "é"], "c": {"1": float("inf")}}
    assert _codec.dumps_ufo(data) == json.dumps(data)


def test_dumps_ufo_tags_what_json_dumps_refuses() -> None:
    """dumps_ufo writes a value json.dumps refuses as its type tag, in json.dumps style."""
    assert (
        _codec.dumps_ufo({"d": dt.date(2024, 1, 2)}) == '{"d": {"$kv": "date", "v": "2024-01-02"}}'
    )


def test_dumps_ufo_writes_tuple_keys_in_the_lossless_form() -> None:
    """A dict key json.dumps cannot write makes dumps_ufo write the lossless form."""
    assert json.loads(_codec.dumps_ufo({(1, 2): "x"})) == {
        "$kv": "dict",
        "v": [[{"$kv": "tuple", "v": [1, 2]}, "x"]],
    }


def test_dumps_ufo_repr_policy_writes_repr() -> None:
    """With the repr policy, a value no encoder can write becomes its repr()."""
    assert _codec.dumps_ufo([Opaque()], on_unencodable="repr") == '["<Opaque image>"]'


def test_dumps_ufo_refuses_a_reference_cycle() -> None:
    """A list that holds itself raises SerializationError instead of ValueError."""
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(SerializationError, match="reference cycle"):
        _codec.dumps_ufo(cycle)


def test_to_json_names_the_field_that_holds_a_reference_cycle() -> None:
    """Memory.to_json names the field and step of a value that holds itself."""
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(SerializationError, match=r"Field 'loop' of step 3 .*reference cycle"):
        Memory([MemoryItem(step=3, loop=cycle)]).to_json()


def test_lone_surrogate_written_by_to_json_reads_back() -> None:
    """A lone surrogate, which json.dumps escapes and orjson refuses to read, reads back."""
    memory = Memory([MemoryItem(text="\ud800")])
    assert Memory.from_json(memory.to_json())[0]["text"] == "\ud800"


def test_item_from_json_decodes_tags_in_ufo_json() -> None:
    """MemoryItem.from_json of to_json decodes the tags written in place."""
    item = MemoryItem(step=1, when=dt.date(2024, 1, 2))
    assert MemoryItem.from_json(item.to_json()) == item


# -- loading runs no code -----------------------------------------------------

PLANTED_ITEM = '[{"$kv":"item","class":"this_module_does_not_exist_yet:Cls","fields":{"step":1}}]'
PLANTED_ENUM = (
    '[{"$kv":"item","fields":{"step":1,'
    '"color":{"$kv":"enum","cls":"this_module_does_not_exist_yet:Color","v":"red"}}}]'
)


def test_item_class_of_unimported_module_is_not_imported(
    planted_module: Path, tmp_path: Path
) -> None:
    """A session naming a class of a module the process never imported raises and imports nothing."""
    path = tmp_path / "run.json"
    path.write_text(PLANTED_ITEM, encoding="utf-8")
    with pytest.raises(
        CorruptSessionError,
        match=r"'this_module_does_not_exist_yet:Cls' named by item 0 of Session file .* is not defined in this process",
    ):
        Memory.from_file(path)
    assert not planted_module.exists()


def test_item_class_of_unimported_module_loads_as_base_without_import(
    planted_module: Path,
) -> None:
    """on_unknown_class="base" loads the fields of an unknown class without importing its module."""
    memory = Memory.from_json(PLANTED_ITEM, on_unknown_class="base")
    assert memory.content == [MemoryItem(step=1)]
    assert not planted_module.exists()


def test_trusted_import_imports_the_item_class(planted_module: Path) -> None:
    """trusted_import=True imports the module a session names and loads the item as its class."""
    memory = Memory.from_json(PLANTED_ITEM, trusted_import=True)
    assert planted_module.exists()
    assert type(memory[0]).__qualname__ == "Cls"


def test_enum_class_of_unimported_module_is_not_imported(planted_module: Path) -> None:
    """An enum tag naming a class of a module the process never imported raises and imports nothing."""
    with pytest.raises(
        CorruptSessionError,
        match=r"at \$\.fields\.color: enum class 'this_module_does_not_exist_yet:Color' is not defined",
    ):
        Memory.from_json(PLANTED_ENUM)
    assert not planted_module.exists()


def test_enum_of_unknown_class_loads_as_its_value_under_base(planted_module: Path) -> None:
    """on_unknown_class="base" gives an enum member of an unknown class as its plain value."""
    memory = Memory.from_json(PLANTED_ENUM, on_unknown_class="base")
    assert memory[0]["color"] == "red"
    assert not planted_module.exists()


def test_trusted_import_imports_the_enum_class(planted_module: Path) -> None:
    """trusted_import=True imports the module an enum tag names."""
    memory = Memory.from_json(PLANTED_ENUM, trusted_import=True)
    assert planted_module.exists()
    color = memory[0]["color"]
    assert isinstance(color, enum.Enum)
    assert color.value == "red"


def test_jsonl_stream_does_not_import(planted_module: Path) -> None:
    """A JSONL stream naming an unimported module's class raises and imports nothing."""
    line = PLANTED_ITEM[1:-1].encode() + b"\n"
    with pytest.raises(CorruptSessionError, match="line 1 of JSONL input"):
        Memory.read_jsonl(io.BytesIO(line))
    assert not planted_module.exists()


def test_stdlib_program_module_is_not_run_on_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class path naming a stdlib module that runs code on import ('this' prints) imports nothing."""
    monkeypatch.delitem(sys.modules, "this", raising=False)
    data = '[{"$kv":"item","class":"this:Zen","fields":{}}]'
    assert Memory.from_json(data, on_unknown_class="base").content == [MemoryItem()]
    assert "this" not in sys.modules


def test_enum_lookup_does_not_call_module_getattr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding an enum class in an imported module never runs the module's __getattr__."""
    module = types.ModuleType("kv_lazy_module")
    called: list[str] = []

    def lazy(name: str) -> Any:
        called.append(name)
        raise AttributeError(name)

    module.__getattr__ = lazy  # type: ignore[method-assign]  # PEP 562 module hook
    monkeypatch.setitem(sys.modules, "kv_lazy_module", module)
    data = '[{"$kv":"item","fields":{"c":{"$kv":"enum","cls":"kv_lazy_module:Color","v":1}}}]'
    with pytest.raises(CorruptSessionError, match="is not defined in this process"):
        Memory.from_json(data)
    assert called == []


def test_enum_of_an_imported_module_loads_without_registration() -> None:
    """An enum class of a module the process imported is found by name, without importing."""
    data = '[{"$kv":"item","fields":{"c":{"$kv":"enum","cls":"http:HTTPStatus","v":404}}}]'
    import http

    assert Memory.from_json(data)[0]["c"] is http.HTTPStatus.NOT_FOUND


def test_unknown_on_unknown_class_option_is_refused() -> None:
    """An on_unknown_class other than "error" or "base" is a named argument error."""
    with pytest.raises(InvalidArgumentError, match="on_unknown_class must be 'error' or 'base'"):
        Memory.from_json("[]", on_unknown_class="skip")  # type: ignore[arg-type]  # the wrong value under test


# -- malformed and pathological input -------------------------------------------

MALFORMED_TAGS: dict[str, tuple[Any, str]] = {
    "decimal_not_a_number": (
        {"$kv": "decimal", "v": "abc"},
        r"malformed 'decimal' value 'abc' \(InvalidOperation",
    ),
    "complex_overflow": (
        {"$kv": "complex", "v": [{"$kv": "int", "v": "9" * 400}, 0]},
        r"malformed 'complex' value .*OverflowError",
    ),
    "timedelta_overflow": (
        {"$kv": "timedelta", "v": [10**12, 0, 0]},
        r"malformed 'timedelta' value \[1000000000000, 0, 0\] \(OverflowError",
    ),
    "timedelta_of_floats": (
        {"$kv": "timedelta", "v": [1.5, 0, 0]},
        r"the 'timedelta' tag holds \[1\.5, 0, 0\], expected \[days, seconds, microseconds\] as ints",
    ),
    "date_of_a_list": ({"$kv": "date", "v": [2024, 1, 1]}, r"the 'date' tag holds \[2024, 1, 1\]"),
    "datetime_of_a_dict": (
        {"$kv": "datetime", "v": {"y": 1}},
        r"the 'datetime' tag holds \{'y': 1\}",
    ),
    "uuid_of_an_int": ({"$kv": "uuid", "v": 5}, r"the 'uuid' tag holds 5, expected text"),
    "tuple_of_a_string": ({"$kv": "tuple", "v": "ab"}, r"the 'tuple' tag holds 'ab'"),
    "dict_of_bad_pairs": ({"$kv": "dict", "v": [[1]]}, r"the 'dict' tag holds \[1\]"),
    "int_of_letters": ({"$kv": "int", "v": "12a"}, r"the 'int' tag holds '12a'"),
    "path_of_unknown_flavor": ({"$kv": "path", "v": "a", "flavor": []}, r"a flavor among"),
    "tag_without_payload": ({"$kv": "set"}, r"the 'set' tag has no 'v' payload"),
    "tag_that_is_not_text": ({"$kv": 3, "v": 1}, r"unknown type tag 3"),
    "zone_that_does_not_exist": (
        {"$kv": "datetime", "v": "2024-01-01T00:00:00", "tz": "Mars/Olympus"},
        r"ZoneInfoNotFoundError",
    ),
    "set_of_unhashables": ({"$kv": "set", "v": [[1]]}, r"unhashable type: 'list'"),
    "enum_naming_a_non_enum": (
        {"$kv": "enum", "cls": "builtins:dict", "v": 1},
        r"'builtins:dict' named in an enum tag is not an Enum",
    ),
    "npscalar_of_a_huge_void": (
        {"$kv": "npscalar", "dtype": "|V999999999", "v": 10**12},
        r"expected a value that fills dtype \|V999999999",
    ),
    "npscalar_of_a_structured_dtype": (
        {"$kv": "npscalar", "dtype": "(1000000000,)f8", "v": 1},
        r"expected a numpy dtype string such as '<f8'",
    ),
    "ndarray_bigger_than_its_bytes": (
        {"$kv": "ndarray", "dtype": "<f8", "shape": [10**12], "v": ""},
        r"shape \[1000000000000\] and dtype <f8 do not match its 0 bytes",
    ),
    "ndarray_of_objects": (
        {"$kv": "ndarray", "dtype": "|O", "shape": [1], "v": "AAAAAAAAAAA="},
        r"expected a dtype that is not 'object'",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED_TAGS))
def test_malformed_tag_names_item_and_path(name: str) -> None:
    """A malformed tag raises CorruptSessionError naming the item and the field's JSON path."""
    tag, reason = MALFORMED_TAGS[name]
    data = orjson.dumps([{"step": 0}, {"$kv": "item", "fields": {"args": [1, tag]}}])
    with pytest.raises(
        CorruptSessionError,
        match=r"item 1 of JSON input, at \$\.fields\.args\[1\][.v\[\]0]*: .*" + reason,
    ):
        Memory.from_json(data)


def test_malformed_tag_in_a_file_names_the_file_and_line(tmp_path: Path) -> None:
    """In a JSONL file the error names the file, the line and the path inside the item."""
    path = tmp_path / "run.jsonl"
    Memory([MemoryItem(step=1), MemoryItem(step=2, when=dt.date(2024, 1, 1))]).save(path)
    path.write_text(path.read_text().replace("2024-01-01", "soon"))
    with pytest.raises(
        CorruptSessionError, match=r"line 3 of Session file '.*run\.jsonl', at \$\.fields\.when: "
    ):
        Memory.from_file(path)


def test_numpy_tag_without_numpy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """A numpy tag read where numpy is missing raises MissingDependencyError naming item, path and extra."""
    data = Memory([MemoryItem(a=np.arange(3), b=np.float32(1.5))]).to_json_bytes().decode()
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(
        MissingDependencyError,
        match=r"item 0 of JSON input, at \$\.fields\.a: the 'ndarray' tag needs numpy: .*kvmemory\[numpy\]",
    ):
        Memory.from_json(data)
    scalar = data.replace('"a":', '"x":').replace('"$kv":"ndarray"', '"$kv":"npscalar"')
    with pytest.raises(MissingDependencyError, match="the 'npscalar' tag needs numpy"):
        Memory.from_json(scalar)


def test_nesting_deeper_than_written_is_refused() -> None:
    """Values nested deeper than the 255 levels orjson writes are refused, never a RecursionError."""
    depth = 300  # 600 JSON levels: under orjson's 1024, over the 255 kvmemory writes
    deep = '{"$kv":"tuple","v":[' * depth + "]}" * depth
    data = '[{"$kv":"item","fields":{"deep":' + deep + "}}]"
    with pytest.raises(CorruptSessionError, match="nested deeper than the 255 levels"):
        Memory.from_json(data)


def test_deepest_writable_value_reads_back() -> None:
    """A value nested as deep as a session can hold reads back equal."""
    value: Any = []
    for _ in range(250):
        value = [value]
    memory = Memory([MemoryItem(deep=value)])
    assert Memory.from_json(memory.to_json()) == memory


@pytest.mark.parametrize("encode", ["to_json", "to_json_bytes"])
def test_too_deep_value_is_a_serialization_error_naming_the_field(encode: str) -> None:
    """Encoding a value nested beyond what JSON output can hold names the field, in both forms."""
    value: Any = 1
    for _ in range(5000):
        value = [value]
    with pytest.raises(SerializationError, match=r"Field 'deep' of step 3 .*nested too deeply"):
        getattr(Memory([MemoryItem(step=3, deep=value)]), encode)()


def test_integer_with_too_many_digits_is_a_serialization_error() -> None:
    """An int beyond Python's text conversion limit raises SerializationError naming the field."""
    with pytest.raises(
        SerializationError,
        match="Field 'huge' of step 1 holds an integer of about 5000 digits, more than the 4300",
    ):
        Memory([MemoryItem(step=1, huge=10**5000)]).to_json_bytes()
    with pytest.raises(
        SerializationError, match=r"Field 'huge' of step 1 cannot be encoded as JSON .*limit \(4300"
    ):
        Memory([MemoryItem(step=1, huge=10**5000)]).to_json()


def colliding_ints(count: int) -> list[Any]:
    """Return int tags of distinct values that all hash to 0 (multiples of the hash modulus)."""
    modulus = sys.hash_info.modulus
    return [{"$kv": "int", "v": str(k * modulus)} for k in range(1, count + 1)]


@pytest.mark.parametrize("tag", ["set", "frozenset"])
def test_set_of_colliding_ints_is_refused_before_it_is_built(tag: str) -> None:
    """A set tag of 50,000 ints with one hash is refused as hash flooding instead of taking quadratic time."""
    data = orjson.dumps(
        [{"$kv": "item", "fields": {"s": {"$kv": tag, "v": colliding_ints(50_000)}}}]
    )
    with pytest.raises(
        CorruptSessionError, match=r"at \$\.fields\.s: .*refused as a hash-flooding input"
    ):
        Memory.from_json(data)


def test_dict_of_colliding_keys_is_refused() -> None:
    """A dict tag whose keys all share one hash is refused as hash flooding."""
    pairs = [[key, 0] for key in colliding_ints(50_000)]
    data = orjson.dumps([{"$kv": "item", "fields": {"d": {"$kv": "dict", "v": pairs}}}])
    with pytest.raises(CorruptSessionError, match="hash-flooding"):
        Memory.from_json(data)


def test_few_colliding_values_still_load() -> None:
    """A set with a handful of values sharing a hash is real data and loads."""
    values = {k * sys.hash_info.modulus for k in range(1, 20)} | {-1, -2}
    memory = Memory([MemoryItem(s=values)])
    assert Memory.from_json(memory.to_json()) == memory


@pytest.mark.parametrize(
    "value",
    [np.datetime64("2020-01-01T00:00:00.000000001"), np.timedelta64(5, "ns"), np.uint64(2**64 - 1)],
)
def test_numpy_scalar_keeps_its_unit(value: Any) -> None:
    """numpy datetimes in nanoseconds and other units come back with the same unit and value."""
    back = Memory.from_json(Memory([MemoryItem(a=value)]).to_json())[0]["a"]
    assert back.dtype == value.dtype
    assert back == value


def test_numpy_scalar_that_overflows_its_dtype_is_refused() -> None:
    """An npscalar whose value does not fit its dtype raises CorruptSessionError, not a warning."""
    data = '[{"$kv":"item","fields":{"a":{"$kv":"npscalar","v":1e300,"dtype":"<f4"}}}]'
    with pytest.raises(CorruptSessionError, match=r"at \$\.fields\.a: malformed 'npscalar' value"):
        Memory.from_json(data)


def test_trusted_import_of_a_missing_module_is_refused_or_loads_as_base() -> None:
    """With trusted_import, a module that does not exist raises naming it, or loads as base."""
    data = '[{"$kv":"item","class":"nowhere.module:Thing","fields":{"step":1}}]'
    with pytest.raises(CorruptSessionError, match=r"'nowhere\.module:Thing' .* cannot be imported"):
        Memory.from_json(data, trusted_import=True)
    memory = Memory.from_json(data, trusted_import=True, on_unknown_class="base")
    assert memory.content == [MemoryItem(step=1)]


def test_enum_tag_with_a_malformed_class_path_is_refused() -> None:
    """An enum tag whose class path has no colon is refused naming the path."""
    data = '[{"$kv":"item","fields":{"e":{"$kv":"enum","cls":"nocolon","v":1}}}]'
    with pytest.raises(
        CorruptSessionError, match=r"at \$\.fields\.e: .*'nocolon' .*'module:QualName'"
    ):
        Memory.from_json(data)


def test_path_names_keys_that_are_not_identifiers_in_brackets() -> None:
    """A field or nested key that is not an identifier is written as ["key"] in the error's path."""
    data = orjson.dumps(
        [{"$kv": "item", "fields": {"Bounding Box": {"x y": {"$kv": "uuid", "v": 1}}}}]
    )
    with pytest.raises(CorruptSessionError, match=r'at \$\.fields\["Bounding Box"\]\["x y"\]: '):
        Memory.from_json(data)


def test_decode_value_names_where_and_path() -> None:
    """decode_value raises CorruptSessionError naming the value given as where and the path."""
    with pytest.raises(
        CorruptSessionError, match=r"the cell, at \$\[0\]\.a: the 'uuid' tag holds 1"
    ):
        _codec.decode_value([{"a": {"$kv": "uuid", "v": 1}}], where="the cell")


def test_complex_of_text_parts_is_refused() -> None:
    """A complex tag whose parts are not numbers is refused naming them."""
    data = '[{"$kv":"item","fields":{"z":{"$kv":"complex","v":["1","2"]}}}]'
    with pytest.raises(CorruptSessionError, match=r"expected \[real, imag\] as numbers"):
        Memory.from_json(data)


@pytest.mark.parametrize(
    ("path", "error", "reason"),
    [
        (3, "ArgumentTypeError", "must be a str or os.PathLike, got int"),
        (b"run.json", "ArgumentTypeError", "must be text, got bytes"),
        ("", "InvalidArgumentError", "is empty or holds a NUL byte"),
    ],
)
def test_session_path_of_the_wrong_kind_is_refused(path: Any, error: str, reason: str) -> None:
    """A session file path that is not text, or is empty, raises a named argument error."""
    import agents.memory

    with pytest.raises(getattr(agents.memory, error), match=f"session file path .*{reason}"):
        Memory.from_file(path)


def test_nesting_beyond_what_any_json_reader_takes_is_a_corrupt_session() -> None:
    """A document nested thousands of levels deep is CorruptSessionError, not json's RecursionError."""
    with pytest.raises(CorruptSessionError, match="JSON input is not valid JSON"):
        Memory.from_json("[" * 5000 + "]" * 5000)


def test_json_input_that_is_not_text_is_a_corrupt_session() -> None:
    """load_json of something that is not JSON text raises CorruptSessionError, not a bare TypeError."""
    with pytest.raises(CorruptSessionError, match="JSON input is not valid JSON"):
        Memory.from_json(123)  # type: ignore[arg-type]  # the wrong type under test


# -- the lossless export cache against the walking encoder -----------------------


class Shade(str, enum.Enum):
    """A str enum (StrEnum's shape, which Python 3.10 lacks), which orjson would write as a bare string."""

    DARK = "dark"


_plainish = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.uuids()
    | st.sampled_from([Level.LOW, Shade.DARK, Color.RED]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children)
        | st.dictionaries(st.sampled_from(["a", "b", "$kv", "v"]), children, max_size=3)
        | st.dictionaries(st.integers(0, 3), children, max_size=2)
    ),
    max_leaves=10,
)


def _walked(items: list[MemoryItem]) -> bytes:
    """What the walking encoder writes for ``items`` (no cache: every value walked)."""
    return _codec.dumps(
        [
            _codec.encode_fields(
                item.to_dict(), class_name=None, step_key="step", on_unencodable="error"
            )
            for item in items
        ]
    )


def _outcome(encode: Any) -> bytes | str:
    try:
        return bytes(encode())
    except SerializationError as exc:
        return f"{type(exc).__name__}: {exc}"


def _containers(value: Any) -> list[Any]:
    """Every list and dict inside ``value``, itself included."""
    found: list[Any] = []
    if type(value) in (list, dict):
        found.append(value)
        for inner in value.values() if type(value) is dict else value:
            found.extend(_containers(inner))
    return found


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(["step", "x", "y", "$kv"]), _plainish), max_size=4),
    st.data(),
)
def test_property_export_matches_the_walk_after_in_place_changes(
    rows: list[dict[str, Any]], data: st.DataObject
) -> None:
    """to_json_bytes writes what the walking encoder writes, also after nested values change in place."""
    items = [MemoryItem(**row) for row in rows]
    memory = Memory(items)
    assert _outcome(memory.to_json_bytes) == _outcome(lambda: _walked(items))
    for _ in range(data.draw(st.integers(0, 3))):
        containers = [c for item in items for v in item.to_dict().values() for c in _containers(v)]
        if not containers:
            break
        target = data.draw(st.sampled_from(containers))
        new = data.draw(_plainish)
        if type(target) is dict:
            target[data.draw(st.sampled_from(["a", "b", "$kv", 7]))] = new
        else:
            target.append(new)
        assert _outcome(memory.to_json_bytes) == _outcome(lambda: _walked(items))
        assert _outcome(items[0].to_json_bytes) == _outcome(lambda: _walked(items[:1])[1:-1])


# -- the batch export against a copy of the encoder before shared shapes (issue 22) ----------
#
# Until verdicts became shared Shapes, an item's verdict held its containers
# and a batch grouped the n-th container of every item. The copy below is that
# encoder, kept as the oracle: the export must stay byte for byte what it wrote.

_REF_SCALARS = frozenset({str, int, bool, type(None)})


def _reference_verdict(fields: dict[str, Any]) -> Any:
    if "$kv" in fields:
        return False
    values = fields.values()
    if set(map(type, values)) <= _REF_SCALARS:
        return True
    dicts: list[dict[Any, Any]] = []
    lists: list[list[Any]] = []
    for value in values:
        kind = type(value)
        if kind in _REF_SCALARS:
            continue
        if kind is dict:
            dicts.append(value)
        elif kind is list:
            lists.append(value)
        elif kind is not float or value - value != 0.0:
            return False
    if not dicts and not lists:
        return True
    return tuple(dicts), tuple(lists)


def _reference_wire(item: MemoryItem, verdict: Any, *, walk: bool = False) -> Any:
    fields = item.to_dict()
    if not walk and verdict is True:
        return fields
    class_name = None if type(item) is MemoryItem else _codec.class_path(type(item))
    return _codec.encode_fields(
        fields, class_name=class_name, step_key="step", on_unencodable="error"
    )


def _reference_export(items: list[MemoryItem]) -> bytes | str:
    verdicts = [
        _reference_verdict(item.to_dict()) if type(item) is MemoryItem else False for item in items
    ]
    containers = [v for v in verdicts if v is not True and v is not False]
    shared = _codec.containers_plain(
        itertools.zip_longest(*[v[0] for v in containers], fillvalue={}),
        itertools.zip_longest(*[v[1] for v in containers], fillvalue=[]),
    )
    wires = [
        item.to_dict()
        if verdict is True
        or (verdict and (shared or _codec.containers_plain([verdict[0]], [verdict[1]])))
        else _reference_wire(item, verdict)
        for item, verdict in zip(items, verdicts, strict=True)
    ]
    try:
        try:
            return _codec.dumps(wires)
        except _codec.IntegerOutOfRange:
            raise
        except SerializationError:
            return _codec.dumps(
                [_reference_wire(i, v) for i, v in zip(items, verdicts, strict=True)]
            )
    except _codec.IntegerOutOfRange:
        try:
            return _codec.dumps(
                [_reference_wire(i, v, walk=True) for i, v in zip(items, verdicts, strict=True)]
            )
        except SerializationError as exc:
            return f"{type(exc).__name__}: {exc}"
    except SerializationError as exc:
        return f"{type(exc).__name__}: {exc}"


class TypedStep(MemoryItem):
    """A typed item class: always wrapped, whatever its values."""

    step: int = 0


_row_keys = st.sampled_from(["step", "args", "tags", "x", "$kv"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(_row_keys, _plainish, max_size=4), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=12),
    st.data(),
)
def test_property_batch_export_matches_the_encoder_before_shared_shapes(
    templates: list[dict[str, Any]], layout: list[tuple[int, bool]], data: st.DataObject
) -> None:
    """Batches of items sharing shapes (and typed items among them) export byte for byte as before, also after in-place changes."""
    items: list[MemoryItem] = []
    for position, (which, typed) in enumerate(layout):
        row = copy.deepcopy(templates[which % len(templates)])
        row["step"] = position
        items.append(TypedStep(**row) if typed else MemoryItem(**row))
    memory = Memory(items)
    assert _outcome(memory.to_json_bytes) == _reference_export(items)
    for _ in range(data.draw(st.integers(0, 3))):
        containers = [c for item in items for v in item.to_dict().values() for c in _containers(v)]
        if containers:
            target = data.draw(st.sampled_from(containers))
            new = data.draw(_plainish)
            if type(target) is dict:
                target[data.draw(st.sampled_from(["a", "$kv", 7]))] = new
            else:
                target.append(new)
        elif items:
            items[0]["x"] = data.draw(_plainish)
        assert _outcome(memory.to_json_bytes) == _reference_export(items)


def test_batch_export_of_ufo_rows_is_byte_identical_to_the_encoder_before_shared_shapes() -> None:
    """UFO-shaped rows (a dict field, a float) and rows of other shapes export as before, in one batch."""
    rows: list[dict[str, Any]] = [
        {"step": i, "arguments": {"x": i, "y": 2, "button": "left"}, "cost": 0.5, "ok": True}
        for i in range(50)
    ]
    rows += [{"step": 50, "controls": [{"label": "1"}], "arguments": {"x": 1}}, {"step": 51}]
    rows += [{"step": 52, "arguments": {"x": (1, 2)}}, {"step": 53, "cost": math.inf}]
    items = [MemoryItem(**row) for row in rows]
    memory = Memory(items)
    for _ in range(2):  # the first call judges every item, the second reuses the verdicts
        assert memory.to_json_bytes() == _reference_export(items)
    items[3]["arguments"]["z"] = {1, 2}  # a set, tagged, in place: the shape's check catches it
    assert memory.to_json_bytes() == _reference_export(items)


def test_items_of_more_container_layouts_than_the_shape_bound_export_as_before() -> None:
    """Past the bound on shared shapes, each further layout gets a shape of its own and exports byte for byte as before."""
    layouts = _codec._MAX_SHAPES + 50
    items = [MemoryItem(step=n, **{f"args_{n}": {"x": n}, "tags": [n]}) for n in range(layouts)]
    memory = Memory(items)
    for _ in range(2):
        assert memory.to_json_bytes() == _reference_export(items)
    items[-1][f"args_{layouts - 1}"]["x"] = (1, 2)  # in place: a tuple, tagged
    assert memory.to_json_bytes() == _reference_export(items)


def _nested(depth: int, leaf: Any) -> Any:
    """``leaf`` inside ``depth`` containers, alternating lists and dicts."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["step", "x", "y", "z"]), _plainish, max_size=4),
    st.integers(0, 300),
    st.sampled_from([0, "s", math.nan, (1,), {"$kv": 1}, 2**70]),
)
def test_property_one_item_walk_judges_containers_as_the_grouped_check(
    fields: dict[str, Any], depth: int, leaf: Any
) -> None:
    """shape_plain (one item's containers walked) says what containers_plain says of the same containers, at any depth."""
    fields["deep"] = _nested(depth, leaf)
    verdict = _codec.plain_verdict(fields)
    if not isinstance(verdict, _codec.Shape):
        return
    grouped = _codec.containers_plain(
        [[fields[key]] for key in verdict.dicts], [[fields[key]] for key in verdict.lists]
    )
    assert _codec.shape_plain(fields, verdict) is grouped


def test_one_item_walk_finds_a_cycle_and_a_nesting_past_the_writer_not_plain() -> None:
    """A container holding itself, or nested past MAX_DEPTH, is not plain for the one-item walk either (the walk names it)."""
    loop: list[Any] = [1]
    loop.append(loop)
    for fields in (
        {"step": 1, "tags": loop},
        {"step": 1, "tags": _nested(_codec.MAX_DEPTH + 1, 1)},
    ):
        verdict = _codec.plain_verdict(fields)
        assert isinstance(verdict, _codec.Shape)
        assert _codec.shape_plain(fields, verdict) is False
    fields = {"step": 1, "tags": _nested(_codec.MAX_DEPTH, 1)}
    verdict = _codec.plain_verdict(fields)
    assert isinstance(verdict, _codec.Shape)
    assert _codec.shape_plain(fields, verdict) is True  # as deep as the writer writes


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(_row_keys, _plainish, max_size=4), min_size=1, max_size=3),
    st.integers(16, 40),
    st.data(),
)
def test_property_grouped_and_one_by_one_container_checks_encode_alike(
    templates: list[dict[str, Any]], size: int, data: st.DataObject
) -> None:
    """A batch checked in groups (16 items or more) gives each item the bytes it gets checked alone, also after in-place changes."""
    from agents.memory._wire import dumps_each, dumps_item

    items = []
    for position in range(size):
        row = copy.deepcopy(templates[position % len(templates)])
        row["step"] = position
        items.append(MemoryItem(**row))

    def outcome(encode: Any) -> list[bytes] | str:
        try:
            return encode()  # type: ignore[no-any-return]
        except SerializationError as exc:
            return f"{type(exc).__name__}: {exc}"

    def alone() -> list[bytes]:
        return [dumps_item(item, step_key="step", on_unencodable="error") for item in items]

    def grouped() -> list[bytes]:
        return dumps_each(items, step_key="step", on_unencodable="error")

    for _ in range(data.draw(st.integers(1, 3))):
        assert outcome(grouped) == outcome(alone)
        assert _outcome(Memory(items).to_json_bytes) == _reference_export(items)
        containers = [c for item in items for v in item.to_dict().values() for c in _containers(v)]
        if not containers:
            break
        target = data.draw(st.sampled_from(containers))
        new = data.draw(_plainish)
        if type(target) is dict:
            target[data.draw(st.sampled_from(["a", "$kv", 7]))] = new
        else:
            target.append(new)


# -- the collector paused during bulk decoding ---------------------------------------


def test_collector_is_paused_while_many_values_decode_and_restored_after() -> None:
    """A bulk decode runs with the collector off; it is on again afterwards, off if it was off."""
    assert gc.isenabled()
    with _codec.collector_paused(_codec.BULK_VALUES - 1):
        assert gc.isenabled()  # a small decode pauses nothing
    with _codec.collector_paused(_codec.BULK_VALUES):
        assert not gc.isenabled()
        with _codec.collector_paused(10**6):
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still on
    assert gc.isenabled()
    gc.disable()
    try:
        with _codec.collector_paused(10**6):
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's own setting is kept
    finally:
        gc.enable()


def test_collector_resumes_after_a_failed_decode() -> None:
    """An exception inside a pause turns the collector back on."""
    with pytest.raises(CorruptSessionError), _codec.collector_paused(10**6):
        _codec.loads(b"{", source="'x.json'")
    assert gc.isenabled()


def test_pauses_of_several_threads_resume_the_collector_once_all_end() -> None:
    """Threads decoding at once keep the collector off until the last one ends."""
    inside = threading.Barrier(3)
    leave = threading.Event()
    seen: list[bool] = []

    def decode() -> None:
        with _codec.collector_paused(10**6):
            inside.wait(timeout=10)
            leave.wait(timeout=10)
            seen.append(gc.isenabled())

    threads = [threading.Thread(target=decode) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(timeout=10)
    assert not gc.isenabled()
    leave.set()
    for thread in threads:
        thread.join(timeout=10)
    assert gc.isenabled()
    assert seen.count(False) >= 1  # the first to leave left it off for the other


def test_bulk_row_decoding_runs_no_collection() -> None:
    """Decoding a store's rows in bulk allocates without triggering the collector."""
    from agents.memory.stores._core.encoding import decode_pairs

    rows = [(seq, orjson.dumps({"step": seq, "tags": [{"a": [1, 2]}] * 4})) for seq in range(2000)]
    collections: list[str] = []

    def record(phase: str, info: dict[str, int]) -> None:
        collections.append(phase)

    gc.collect()
    gc.callbacks.append(record)
    try:
        pairs = decode_pairs(rows, "a test session")
        during = len(collections)
    finally:
        gc.callbacks.remove(record)
    assert [item["step"] for _, item in pairs] == list(range(2000))
    assert during <= 2, collections  # at most the one collection as the pause ends (start, stop)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(["step", "x", "y", "$kv"]), _plainish), max_size=5),
    st.sampled_from(["error", "repr", "drop"]),
)
def test_property_each_item_of_a_batch_encodes_as_on_its_own(
    rows: list[dict[str, Any]], policy: Any
) -> None:
    """dumps_each (a store's batch) gives each item's dumps_item bytes, or the error the first bad item raises."""
    from agents.memory._wire import dumps_each, dumps_item

    items = [MemoryItem(**row) for row in rows]

    def one_by_one() -> list[bytes]:
        return [dumps_item(item, step_key="step", on_unencodable=policy) for item in items]

    def batch() -> list[bytes]:
        return dumps_each(items, step_key="step", on_unencodable=policy)

    def outcome(encode: Any) -> list[bytes] | str:
        try:
            return encode()  # type: ignore[no-any-return]
        except SerializationError as exc:
            return f"{type(exc).__name__}: {exc}"

    assert outcome(batch) == outcome(one_by_one)


def test_a_long_pause_leaves_its_young_objects_in_the_oldest_generation() -> None:
    """Many objects made during a pause are moved out of the young generation as it ends (no collection walks them), the collector on, nothing frozen."""
    with _codec.collector_paused(10**6):
        kept = [[i] for i in range(2 * _codec._PROMOTE_AT)]
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    oldest = {id(row) for row in gc.get_objects(generation=2)}
    assert id(kept[0]) in oldest
    assert id(kept[-1]) in oldest


def test_a_pause_leaves_the_objects_a_process_froze_frozen() -> None:
    """A process that keeps objects frozen (gc.freeze before forking) still has them frozen after a long pause."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with _codec.collector_paused(10**6):
            kept = [[i] for i in range(2 * _codec._PROMOTE_AT)]
        assert gc.get_freeze_count() == frozen
        assert len(kept) == 2 * _codec._PROMOTE_AT
    finally:
        gc.unfreeze()


def test_garbage_made_before_a_long_pause_is_still_collected() -> None:
    """A cycle left as garbage before a long pause is freed by the next full collection."""

    class Node:
        """One end of a cycle."""

        other: object = None

    node = Node()
    node.other = node
    gone = weakref.ref(node)
    del node
    with _codec.collector_paused(10**6):
        kept = [[i] for i in range(2 * _codec._PROMOTE_AT)]
    assert len(kept) == 2 * _codec._PROMOTE_AT
    gc.collect()
    assert gone() is None
