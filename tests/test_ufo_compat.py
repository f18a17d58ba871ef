"""UFO drop-in fidelity: what UFO code sends and writes is what UFO sends and writes (issue 8).

No UFO code is used here: the records, enums, subclasses and call sequences
are written in the shapes UFO's documentation and agents use. Each section
pins one point of docs/ufo.md.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from enum import Enum, IntEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.agent import BasicAgent
from agents.memory import Conversation, ReadOnlyViewError
from agents.memory.blackboard import (
    Blackboard,
    ImageMemoryItem,
    ImageMemoryItemNames,
)
from agents.memory.exceptions import (
    ImageReadError,
    ImageReadWarning,
    SerializationError,
    SkippedRecordWarning,
)
from agents.memory.memory import Memory, MemoryItem
from agents.memory.prompt import image_data_url
from agents.memory.stores import open_memory

ROOT = pathlib.Path(__file__).resolve().parent.parent
PNG = pathlib.Path(__file__).parent / "fixtures" / "one_pixel.png"


class TargetKind(str, Enum):
    """A str-based enum, as UFO's host and app records hold."""

    WINDOW = "window"
    CONTROL = "control"


class ResultStatus(str, Enum):
    """Another str-based enum of UFO's shape."""

    SUCCESS = "success"
    FAILURE = "failure"


class Priority(IntEnum):
    """An int-based enum."""

    LOW = 1
    HIGH = 2


def host_record(step: int) -> dict[str, Any]:
    """Return a HostAgent-style step record: enums, tuples, nested lists, non-ASCII text."""
    return {
        "step": step,
        "observation": "Word and Excel are open; the report is 'Résumé.docx'",
        "thought": "Hand the copy task to the app agent",
        "target": {"kind": TargetKind.WINDOW, "name": "WINWORD.EXE", "rect": (0, 0, 1280, 720)},
        "plan": ["open the report", "copy the chart"],
        "status": ResultStatus.SUCCESS,
        "priority": Priority.HIGH,
        "cost": 0.0123,
    }


def app_record(step: int) -> dict[str, Any]:
    """Return an AppAgent-style step record with a list of action results."""
    return {
        "step": step,
        "action": [
            {
                "function": "click_input",
                "target": {"kind": TargetKind.CONTROL, "label": "12", "rect": (10, 20, 110, 60)},
                "result": {"status": ResultStatus.SUCCESS, "error": None},
            }
        ],
        "action_success": [{"action_string": "click_input on [12]Insert"}],
        "control_log": ({"label": "12"}, {"label": "13"}),
    }


def ufo_memory(records: list[dict[str, Any]]) -> Memory:
    """Build a memory the way UFO's agents do: an empty item, then add_values_from_dict."""
    memory = Memory()
    for record in records:
        item = MemoryItem()
        item.add_values_from_dict(record)
        memory.add_memory_item(item)
    return memory


# -- 2. to_json writes UFO's JSON ----------------------------------------------------------


def test_memory_to_json_is_json_dumps_of_enum_and_tuple_records() -> None:
    """Memory.to_json of host and app records equals json.dumps of the same dicts, byte for byte."""
    records = [host_record(1), app_record(2)]
    assert ufo_memory(records).to_json() == json.dumps(records)


def test_item_to_json_is_json_dumps_of_the_record() -> None:
    """MemoryItem.to_json equals json.dumps(item.to_dict())."""
    item = MemoryItem(**host_record(3))
    assert item.to_json() == json.dumps(host_record(3))


def test_blackboard_section_json_is_json_dumps() -> None:
    """requests_to_json and trajectories_to_json equal json.dumps of the sections' records."""
    board = Blackboard()
    board.add_requests({"request": "Copy the chart from 'Résumé.docx'", "round": 0})
    board.add_trajectories(app_record(1))
    assert board.requests_to_json() == json.dumps(
        [{"request": "Copy the chart from 'Résumé.docx'", "round": 0}]
    )
    assert board.trajectories_to_json() == json.dumps([app_record(1)])


def test_ufo_reload_idiom_gives_ufo_values_back() -> None:
    """set_memory_from_list_of_dicts(json.loads(memory.to_json())) gives back what UFO gets: values, not tags."""
    records = [host_record(1), app_record(2)]
    agent = BasicAgent("host")
    agent.set_memory_from_list_of_dicts(json.loads(ufo_memory(records).to_json()))
    restored = agent.memory.to_list_of_dicts()
    assert restored == json.loads(json.dumps(records))
    assert restored[0]["plan"] == ["open the report", "copy the chart"]
    assert restored[0]["status"] == ResultStatus.SUCCESS  # a str enum equals its value
    assert restored[1]["action_success"] == [{"action_string": "click_input on [12]Insert"}]


def test_evaluation_prompt_embeds_requests_as_ufo_does() -> None:
    """A prompt that embeds requests.to_json() gets UFO's text (spacing and escaping)."""
    board = Blackboard()
    board.add_requests("Mettre à jour le résumé")
    prompt = f"The user's requests: {board.requests.to_json()}"
    assert prompt == 'The user\'s requests: [{"text": "Mettre \\u00e0 jour le r\\u00e9sum\\u00e9"}]'


def test_nan_is_written_as_json_dumps_writes_it_and_reads_back() -> None:
    """NaN and infinity are written as json.dumps writes them, and from_json reads them back."""
    memory = Memory([MemoryItem(step=1, score=math.nan, best=math.inf)])
    assert memory.to_json() == '[{"step": 1, "score": NaN, "best": Infinity}]'
    back = Memory.from_json(memory.to_json())[0]
    assert math.isnan(back["score"])
    assert back["best"] == math.inf


def test_value_json_dumps_refuses_is_tagged_not_raised() -> None:
    """A datetime (json.dumps raises) is written as its type tag, in place, and read back."""
    memory = Memory([MemoryItem(step=1, at=dt.datetime(2024, 5, 1, 9, 30), box=(1, 2))])
    text = memory.to_json()
    assert (
        text
        == '[{"step": 1, "at": {"$kv": "datetime", "v": "2024-05-01T09:30:00"}, "box": [1, 2]}]'
    )
    assert Memory.from_json(text)[0].to_dict() == {
        "step": 1,
        "at": dt.datetime(2024, 5, 1, 9, 30),
        "box": [1, 2],
    }


def test_unencodable_value_in_to_json_names_field_and_step() -> None:
    """A value no encoder can write raises SerializationError naming the field and the step."""
    memory = Memory([MemoryItem(step=4, screenshot=object())])
    with pytest.raises(SerializationError, match="Field 'screenshot' of step 4"):
        memory.to_json()


def test_drop_policy_in_to_json_leaves_the_field_out() -> None:
    """on_unencodable="drop" drops the field and writes the rest as json.dumps does."""
    memory = Memory([MemoryItem(step=4, screenshot=object(), note="kept")])
    assert memory.to_json(on_unencodable="drop") == '[{"step": 4, "note": "kept"}]'


def test_tuple_dict_key_is_written_in_the_lossless_form() -> None:
    """A dict with a tuple key (json.dumps raises) is written in the lossless form and read back."""
    memory = Memory([MemoryItem(step=1, grid={(0, 1): "cell"})])
    assert Memory.from_json(memory.to_json())[0]["grid"] == {(0, 1): "cell"}


def test_to_json_bytes_stays_lossless_and_compact() -> None:
    """to_json_bytes keeps tuples and enums, compact and UTF-8, and from_json reads it back equal."""
    memory = ufo_memory([host_record(1)])
    data = memory.to_json_bytes()
    assert b", " not in data.replace(b"Word and Excel", b"")
    assert "Résumé".encode() in data
    assert Memory.from_json(data) == memory


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=True)
    | st.text(max_size=6)
    | st.sampled_from([TargetKind.WINDOW, ResultStatus.FAILURE, Priority.LOW])
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.lists(st.dictionaries(st.text(max_size=5), _json_values, max_size=4), max_size=4))
def test_property_to_json_is_json_dumps(rows: list[dict[str, Any]]) -> None:
    """For any data json.dumps writes (tuples, str/int enums, NaN, non-ASCII), to_json writes the same bytes."""
    memory = Memory([MemoryItem.from_mapping(row) for row in rows])
    assert memory.to_json() == json.dumps(rows)


# -- 3. filter order ----------------------------------------------------------------------


def test_filter_memory_from_keys_keeps_item_order() -> None:
    """filter_memory_from_keys returns fields in each item's order, whatever the order of the keys."""
    memory = ufo_memory([host_record(1)])
    filtered = memory.filter_memory_from_keys(["plan", "thought", "step"])
    assert list(filtered[0]) == ["step", "thought", "plan"]
    assert json.dumps(filtered) == json.dumps(
        [
            {
                "step": 1,
                "thought": "Hand the copy task to the app agent",
                "plan": host_record(1)["plan"],
            }
        ]
    )


def test_item_filter_keeps_item_order() -> None:
    """MemoryItem.filter returns fields in the item's order."""
    item = MemoryItem(**app_record(1))
    assert list(item.filter(["control_log", "step"])) == ["step", "control_log"]


# -- 1. unreadable screenshots ----------------------------------------------------------------


def test_unreadable_screenshot_warns_and_prompt_sends_empty_image() -> None:
    """add_image('', {}) warns, and blackboard_to_prompt sends an empty image as UFO does."""
    board = Blackboard()
    with pytest.warns(ImageReadWarning, match="Image '' cannot be read"):
        board.add_image("", {})
    parts = board.blackboard_to_prompt()
    assert parts[-2:] == [
        {"type": "text", "text": "{}"},
        {"type": "image_url", "image_url": {"url": ""}},
    ]


def test_failed_capture_does_not_stop_later_prompts(tmp_path: pathlib.Path) -> None:
    """After a window capture failed, every later prompt still builds (three app steps, as UFO completes)."""
    board = Blackboard()
    metadata = {"screenshot application": "WINWORD.EXE"}
    with pytest.warns(ImageReadWarning, match="action_step0"):
        board.add_image(str(tmp_path / "action_step0.png"), metadata)  # no file was written
    prompts = [board.blackboard_to_prompt()]
    for step in (1, 2):
        shot = tmp_path / f"action_step{step}.png"
        shot.write_bytes(PNG.read_bytes())
        board.add_image(str(shot), metadata)
        prompts.append(board.blackboard_to_prompt())
    assert [len(parts) for parts in prompts] == [6, 8, 10]
    assert prompts[-1][5]["image_url"]["url"] == ""
    assert prompts[-1][7]["image_url"]["url"] == image_data_url(PNG)


def test_strict_images_raise_on_unreadable_screenshot() -> None:
    """Blackboard(strict_images=True) raises ImageReadError instead of sending an empty image."""
    with pytest.raises(ImageReadError, match=r"Image 'missing\.png' cannot be read"):
        Blackboard(strict_images=True).add_image("missing.png", {})


# -- 7 and 8. screenshot records and their prompt text ----------------------------------------------


def test_screenshot_record_has_ufo_shape() -> None:
    """A screenshot record holds metadata, image_path and image_str, in that order."""
    board = Blackboard()
    board.add_image(str(PNG), {"screenshot application": "WINWORD.EXE", "saving reason": "chart"})
    assert board.screenshots.list_content == [
        {
            "metadata": {"screenshot application": "WINWORD.EXE", "saving reason": "chart"},
            "image_path": str(PNG),
            "image_str": image_data_url(PNG),
        }
    ]


def test_screenshots_to_json_is_json_dumps_of_the_records() -> None:
    """screenshots_to_json writes the records as json.dumps does, without any envelope."""
    board = Blackboard()
    board.add_image(str(PNG), {"saving reason": "chart"})
    assert board.screenshots_to_json() == json.dumps(board.screenshots.list_content)
    assert json.loads(board.screenshots_to_json())[0][ImageMemoryItemNames.IMAGE_STR].startswith(
        "data:image/png;base64,"
    )


def test_screenshot_prompt_text_is_the_whole_metadata() -> None:
    """The declared difference: the text part is the whole metadata dict (UFO sends null)."""
    board = Blackboard()
    board.add_image(
        str(PNG), {"screenshot application": "WINWORD.EXE", "saving reason": "The chart to copy"}
    )
    text, image = board.screenshots_to_prompt()
    assert text == {
        "type": "text",
        "text": '{"screenshot application": "WINWORD.EXE", "saving reason": "The chart to copy"}',
    }
    assert image == {"type": "image_url", "image_url": {"url": image_data_url(PNG)}}


# -- 4. loading what UFO writes ----------------------------------------------------------------


def ufo_blackboard_dict() -> dict[str, Any]:
    """Return a blackboard as UFO's blackboard_to_dict writes it, with an extra key."""
    return {
        "questions": [{"question": "Which file?", "answer": "Résumé.docx"}],
        "requests": [{"text": "Copy the chart"}],
        "trajectories": [{"step": 1, "action": "click_input", "rect": [0, 0, 1, 1]}],
        "screenshots": [
            {"metadata": None, "image_path": "logs/action_step1.png", "image_str": ""},
            {
                "metadata": None,
                "image_path": "logs/action_step2.png",
                "image_str": "data:image/png;base64,AAAA",
            },
        ],
        "session": {"id": "task-1"},
    }


def test_blackboard_from_dict_loads_ufo_shape() -> None:
    """blackboard_from_dict loads metadata None and ignores keys that are not sections."""
    board = Blackboard()
    board.blackboard_from_dict(ufo_blackboard_dict())
    expected = ufo_blackboard_dict()
    del expected["session"]
    assert board.blackboard_to_dict() == expected
    assert all(isinstance(item, ImageMemoryItem) for item in board.screenshots)


def test_ufo_blackboard_file_round_trips_byte_for_byte(tmp_path: pathlib.Path) -> None:
    """A file of json.dumps(blackboard_to_dict()) loads, and blackboard_to_json writes it back unchanged."""
    data = ufo_blackboard_dict()
    del data["session"]
    path = tmp_path / "blackboard.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    board = Blackboard.from_file(path)
    assert board.blackboard_to_json() == path.read_text(encoding="utf-8")


def test_loaded_ufo_screenshots_render_as_ufo_renders_them() -> None:
    """Loaded UFO screenshot records render null metadata and their stored image_str."""
    board = Blackboard()
    board.blackboard_from_dict(ufo_blackboard_dict())
    assert board.screenshots_to_prompt() == [
        {"type": "text", "text": "null"},
        {"type": "image_url", "image_url": {"url": ""}},
        {"type": "text", "text": "null"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]


# -- 5. subclasses in UFO's patterns -------------------------------------------------------------


@dataclasses.dataclass
class UfoStyleImageItem(MemoryItem):
    """UFO's ImageMemoryItem pattern: a @dataclass subclass with a class-level attribute list."""

    _memory_attributes = list(ImageMemoryItemNames.__annotations__)


@dataclasses.dataclass
class DataclassStep(MemoryItem):
    """A @dataclass subclass with annotated fields and defaults."""

    step: int = 0
    thought: str = ""
    tags: list[str] = dataclasses.field(default_factory=list)


class PlainSubclass(MemoryItem):
    """Plain subclassing, as UFO's code does."""


def test_dataclass_subclass_set_value_works() -> None:
    """The ImageMemoryItem pattern takes set_value and add_values_from_dict (it raised AttributeError)."""
    item = UfoStyleImageItem()
    item.add_values_from_dict({"metadata": None, "image_path": "a.png"})
    item.set_value("image_str", "")
    assert item.to_dict() == {"metadata": None, "image_path": "a.png", "image_str": ""}
    assert item.to_json() == '{"metadata": null, "image_path": "a.png", "image_str": ""}'


def test_dataclass_subclass_with_fields_keeps_its_defaults() -> None:
    """A @dataclass subclass's own __init__ sets its fields, defaults included, as item fields."""
    item = DataclassStep(step=2)
    item.set_value("observation", "the dialog is open")
    assert item.to_dict() == {
        "step": 2,
        "thought": "",
        "tags": [],
        "observation": "the dialog is open",
    }
    assert item.step == 2
    assert dataclasses.asdict(item)["tags"] == []


def test_dataclass_subclass_items_work_in_a_memory() -> None:
    """Dataclass items are indexed by step and survive the lossless round trip with their class."""
    memory = Memory([DataclassStep(step=1), DataclassStep(step=2, thought="t")])
    assert memory.filter_memory_from_steps([2]) == [{"step": 2, "thought": "t", "tags": []}]
    back = Memory.from_json(memory.to_json_bytes())
    assert [type(item) for item in back] == [DataclassStep, DataclassStep]
    assert back.to_list_of_dicts() == memory.to_list_of_dicts()


def test_frozen_dataclass_subclass_is_refused() -> None:
    """A frozen @dataclass subclass raises TypeError on first use, saying why."""

    @dataclasses.dataclass(frozen=True)
    class Frozen(MemoryItem):
        step: int = 0

    with pytest.raises(TypeError, match="Frozen is a frozen @dataclass"):
        Frozen(step=1)


def test_plain_subclass_works_as_in_ufo() -> None:
    """A plain subclass takes fields with set_value and writes UFO's JSON."""
    item = PlainSubclass()
    item.set_value("step", 1)
    item.add_values_from_dict({"status": ResultStatus.FAILURE})
    assert item.to_json() == '{"step": 1, "status": "failure"}'


# -- 6. UFO's names ------------------------------------------------------------------------------


def test_image_memory_item_names_are_ufos() -> None:
    """ImageMemoryItemNames holds UFO's field names, as constants and as annotations."""
    assert (
        ImageMemoryItemNames.METADATA,
        ImageMemoryItemNames.IMAGE_PATH,
        ImageMemoryItemNames.IMAGE_STR,
    ) == ("metadata", "image_path", "image_str")
    assert list(ImageMemoryItemNames.__annotations__) == ["METADATA", "IMAGE_PATH", "IMAGE_STR"]


def test_image_memory_item_is_a_memory_item() -> None:
    """ImageMemoryItem is a MemoryItem that UFO code can build and fill."""
    item = ImageMemoryItem()
    item.add_values_from_dict({"metadata": None, "image_path": "a.png", "image_str": ""})
    assert isinstance(item, MemoryItem)
    assert item.to_dict() == {"metadata": None, "image_path": "a.png", "image_str": ""}


def test_read_json_file_counts_lines_as_ufo_does(tmp_path: pathlib.Path) -> None:
    """read_json_file's last_k counts lines, invalid ones included, and skips those with a warning."""
    path = tmp_path / "qa.jsonl"
    path.write_text('{"q": 1}\n{"q": 2}\nnot json\n{"q": 3}\n', encoding="utf-8")
    with pytest.warns(SkippedRecordWarning, match=r"skipped lines \[3\]"):
        assert Blackboard.read_json_file(path, last_k=2) == [{"q": 3}]
    with pytest.warns(SkippedRecordWarning):
        assert Blackboard.read_json_file(str(path)) == [{"q": 1}, {"q": 2}, {"q": 3}]


def test_read_json_file_of_missing_file_is_empty(tmp_path: pathlib.Path) -> None:
    """read_json_file of a file that does not exist returns [], as UFO's does."""
    assert Blackboard.read_json_file(tmp_path / "none.jsonl") == []


def test_read_json_file_last_k_zero_reads_nothing(tmp_path: pathlib.Path) -> None:
    """The declared difference: last_k=0 reads no line (UFO's lines[-0:] read every line)."""
    path = tmp_path / "qa.jsonl"
    path.write_text('{"q": 1}\n', encoding="utf-8")
    assert Blackboard.read_json_file(path, last_k=0) == []


def test_read_json_file_refuses_bad_last_k(tmp_path: pathlib.Path) -> None:
    """A last_k below -1 raises ValueError saying what is allowed."""
    with pytest.raises(ValueError, match="last_k must be -1"):
        Blackboard.read_json_file(tmp_path / "qa.jsonl", last_k=-2)


# -- 9. the switch-over files of docs/ufo.md, run against stand-ins of each UFO's configuration -------
#
# Each stand-in has the module paths, names, config objects and defaults of one UFO generation's
# configuration (read from UFO's code); the values, and the code, are the test's own. A stand-in's
# settings come from the test instead of YAML files, so no YAML parser is needed.


SWITCH_OVER = re.compile(
    r"^```py\n# (ufo/agents/memory/\w+\.py)\n(.*?)^```", re.DOTALL | re.MULTILINE
)

# UFO 2.0.0: ufo/config/config.py holds the singleton; ufo/config/__init__.py exports nothing.
UFO2_CONFIG = """
import os

SETTINGS = {settings!r}


class Config:
    _instance = None

    def __init__(self):
        self.config_data = self.load_config()

    @staticmethod
    def get_instance():
        if Config._instance is None:
            Config._instance = Config()
        return Config._instance

    def load_config(self):
        merged = dict(os.environ)
        merged.update(SETTINGS)
        return merged
"""

# UFO 3: a top-level config package with a typed loader; ufo/config/__init__.py keeps a legacy
# Config whose YAML file (ufo/config/config.yaml) is gone, so it sees the environment only.
UFO3_LEGACY_CONFIG = """
import os

LEGACY_SETTINGS = {legacy!r}


class Config:
    _instance = None

    def __init__(self):
        self.config_data = dict(os.environ)
        self.config_data.update(LEGACY_SETTINGS)

    @staticmethod
    def get_instance():
        if Config._instance is None:
            Config._instance = Config()
        return Config._instance
"""

UFO3_SCHEMAS = """
from dataclasses import dataclass, field
from typing import Any, Dict


@dataclass
class SystemConfig:
    max_step: int = 50
    ask_question: bool = False
    use_customization: bool = False
    qa_pair_file: str = "customization/global_memory.jsonl"
    qa_pair_num: int = 20
    _extras: Dict[str, Any] = field(default_factory=dict, repr=False)

    NAMES = {"MAX_STEP": "max_step", "ASK_QUESTION": "ask_question",
             "USE_CUSTOMIZATION": "use_customization", "QA_PAIR_FILE": "qa_pair_file",
             "QA_PAIR_NUM": "qa_pair_num"}

    @classmethod
    def from_dict(cls, data):
        known = {cls.NAMES[k]: v for k, v in data.items() if k in cls.NAMES}
        made = cls(**known)
        made._extras = {k: v for k, v in data.items() if k not in cls.NAMES}
        return made


@dataclass
class UFOConfig:
    system: SystemConfig
    _raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def __getitem__(self, key):
        return self._raw[key]

    def get(self, key, default=None):
        return self._raw.get(key, default)

    @classmethod
    def from_dict(cls, data):
        return cls(system=SystemConfig.from_dict(data), _raw=data)
"""

UFO3_LOADER = """
import os

from config.config_schemas import UFOConfig

SETTINGS = {settings!r}
_cached = None


def get_ufo_config(reload=False):
    global _cached
    if _cached is None or reload:
        merged = dict(os.environ)
        merged.update(SETTINGS)
        _cached = UFOConfig.from_dict(merged)
    return _cached
"""

UFO3_PACKAGE = """
from config.config_loader import get_ufo_config
from config.config_schemas import SystemConfig, UFOConfig

__all__ = ["SystemConfig", "UFOConfig", "get_ufo_config"]
"""

GENERATIONS = ("ufo2.0", "ufo2.x", "ufo3")


def ufo_checkout(
    root: pathlib.Path,
    settings: dict[str, Any],
    *,
    generation: str = "ufo3",
    legacy: dict[str, Any] | None = None,
) -> pathlib.Path:
    """Write a stand-in UFO checkout of one generation whose memory module is docs/ufo.md's switch-over files."""
    files = SWITCH_OVER.findall((ROOT / "docs" / "ufo.md").read_text(encoding="utf-8"))
    assert [name for name, _ in files] == [
        "ufo/agents/memory/memory.py",
        "ufo/agents/memory/blackboard.py",
    ]

    def write(name: str, code: str) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code), encoding="utf-8")

    for package in ("ufo", "ufo/agents", "ufo/agents/memory"):
        write(f"{package}/__init__.py", "")
    config = UFO2_CONFIG.replace("{settings!r}", repr(settings))
    if generation == "ufo2.0":
        write("ufo/config/__init__.py", "")
        write("ufo/config/config.py", config)
    elif generation == "ufo2.x":
        write("ufo/config/__init__.py", config)
    else:
        write(
            "ufo/config/__init__.py", UFO3_LEGACY_CONFIG.replace("{legacy!r}", repr(legacy or {}))
        )
        write("config/__init__.py", UFO3_PACKAGE)
        write("config/config_schemas.py", UFO3_SCHEMAS)
        write("config/config_loader.py", UFO3_LOADER.replace("{settings!r}", repr(settings)))
    for name, code in files:
        write(name, code)
    return root


def run_in_checkout(root: pathlib.Path, code: str, *, warnings_as_errors: bool = True) -> str:
    """Run ``code`` in a fresh Python process in the stand-in checkout, as UFO runs from its root."""
    env = {"PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    if warnings_as_errors:
        env["PYTHONWARNINGS"] = "error"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


QUESTIONS_PROMPT = (
    "from ufo.agents.memory.blackboard import Blackboard\n"
    "print(Blackboard().blackboard_to_prompt()[1]['text'])"
)


def write_questions(path: pathlib.Path, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"question": f"Q{n}", "answer": f"A{n}"}) for n in range(1, count + 1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("generation", GENERATIONS)
def test_switch_over_blackboard_loads_saved_questions(
    tmp_path: pathlib.Path, generation: str
) -> None:
    """With USE_CUSTOMIZATION on, the switched-over Blackboard() loads the last QA_PAIR_NUM lines, on every UFO."""
    qa = tmp_path / "qa.jsonl"
    write_questions(qa, 2)
    settings = {"USE_CUSTOMIZATION": True, "QA_PAIR_FILE": str(qa), "QA_PAIR_NUM": 1}
    root = ufo_checkout(tmp_path / "checkout", settings, generation=generation)
    assert (
        run_in_checkout(root, QUESTIONS_PROMPT)
        == '[Questions & Answers:]\n [{"question": "Q2", "answer": "A2"}]'
    )


def test_switch_over_on_ufo3_applies_its_typed_defaults(tmp_path: pathlib.Path) -> None:
    """On UFO 3 only USE_CUSTOMIZATION is set: the typed defaults give the file and its last 20 lines."""
    root = tmp_path / "checkout"
    write_questions(root / "customization" / "global_memory.jsonl", 25)
    ufo_checkout(root, {"USE_CUSTOMIZATION": True}, generation="ufo3")
    code = (
        "from ufo.agents.memory.blackboard import Blackboard\n"
        "board = Blackboard()\n"
        "print(board.questions.length, board.questions.content[0]['question'])"
    )
    assert run_in_checkout(root, code) == "20 Q6"


def test_switch_over_on_ufo3_reads_the_typed_configuration_not_the_legacy_one(
    tmp_path: pathlib.Path,
) -> None:
    """UFO 3's legacy ufo.config.Config is not what its blackboard reads: customization off there wins."""
    qa = tmp_path / "qa.jsonl"
    write_questions(qa, 3)
    legacy = {"USE_CUSTOMIZATION": True, "QA_PAIR_FILE": str(qa), "QA_PAIR_NUM": -1}
    root = ufo_checkout(tmp_path / "checkout", {}, generation="ufo3", legacy=legacy)
    code = "from ufo.agents.memory.blackboard import Blackboard\nprint(Blackboard().is_empty())"
    assert run_in_checkout(root, code) == "True"


@pytest.mark.parametrize("generation", GENERATIONS)
def test_switch_over_blackboard_with_missing_question_file_is_empty(
    tmp_path: pathlib.Path, generation: str
) -> None:
    """A QA_PAIR_FILE that does not exist yet adds nothing, as in UFO."""
    settings = {"USE_CUSTOMIZATION": True, "QA_PAIR_FILE": str(tmp_path / "none.jsonl")}
    root = ufo_checkout(tmp_path / "checkout", settings, generation=generation)
    code = (
        "from ufo.agents.memory.blackboard import Blackboard\nprint(Blackboard().questions.length)"
    )
    assert run_in_checkout(root, code) == "0"


@pytest.mark.parametrize("generation", ["ufo2.0", "ufo2.x"])
def test_switch_over_on_ufo2_without_a_question_file_setting_starts(
    tmp_path: pathlib.Path, generation: str
) -> None:
    """Customization on and no QA_PAIR_FILE: UFO 2 reads "" (nothing), and so does the switch-over."""
    root = ufo_checkout(tmp_path / "checkout", {"USE_CUSTOMIZATION": True}, generation=generation)
    code = "from ufo.agents.memory.blackboard import Blackboard\nprint(Blackboard().is_empty())"
    assert run_in_checkout(root, code) == "True"


@pytest.mark.parametrize("generation", GENERATIONS)
def test_switch_over_without_customization_reads_no_file(
    tmp_path: pathlib.Path, generation: str
) -> None:
    """With USE_CUSTOMIZATION off, the question file is not read."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "Q1"}\n', "utf-8")
    settings = {"USE_CUSTOMIZATION": False, "QA_PAIR_FILE": str(qa)}
    root = ufo_checkout(tmp_path / "checkout", settings, generation=generation)
    code = "from ufo.agents.memory.blackboard import Blackboard\nprint(Blackboard().is_empty())"
    assert run_in_checkout(root, code) == "True"


def test_switch_over_skips_question_lines_that_are_not_objects(tmp_path: pathlib.Path) -> None:
    """JSON lines that are arrays, numbers, booleans or null are skipped with a warning; UFO starts."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        '{"question": "Q1"}\n[1, 2]\n7\ntrue\nnull\n"plain text"\n{"question": "Q2"}\n', "utf-8"
    )
    settings = {"USE_CUSTOMIZATION": True, "QA_PAIR_FILE": str(qa), "QA_PAIR_NUM": -1}
    root = ufo_checkout(tmp_path / "checkout", settings, generation="ufo3")
    code = (
        "import warnings\n"
        "from ufo.agents.memory.blackboard import Blackboard\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    board = Blackboard()\n"
        "print(board.questions_to_json())\n"
        "print([type(w.message).__name__ for w in caught], 'skipped 4 values' in str(caught[0].message))"
    )
    assert run_in_checkout(root, code, warnings_as_errors=False).splitlines() == [
        '[{"question": "Q1"}, {"text": "plain text"}, {"question": "Q2"}]',
        "['SkippedRecordWarning'] True",
    ]


def test_switch_over_qa_pair_num_zero_reads_every_line_as_ufo_does(tmp_path: pathlib.Path) -> None:
    """QA_PAIR_NUM 0 reads every line, as UFO's lines[-0:] does."""
    qa = tmp_path / "qa.jsonl"
    write_questions(qa, 3)
    settings = {"USE_CUSTOMIZATION": True, "QA_PAIR_FILE": str(qa), "QA_PAIR_NUM": 0}
    root = ufo_checkout(tmp_path / "checkout", settings, generation="ufo2.0")
    code = (
        "from ufo.agents.memory.blackboard import Blackboard\nprint(Blackboard().questions.length)"
    )
    assert run_in_checkout(root, code) == "3"


def test_switch_over_without_any_ufo_configuration_names_what_it_looked_for(
    tmp_path: pathlib.Path,
) -> None:
    """Outside a UFO checkout the settings reader raises MissingDependencyError naming both modules."""
    code = (
        "from agents.integrations.ufo import ufo_question_settings\n"
        "try:\n    ufo_question_settings()\n"
        "except ImportError as exc:\n    print(type(exc).__name__, 'get_ufo_config' in str(exc))"
    )
    assert run_in_checkout(tmp_path, code) == "MissingDependencyError True"


@pytest.mark.parametrize("generation", GENERATIONS)
def test_switch_over_memory_module_serves_kvmemory(tmp_path: pathlib.Path, generation: str) -> None:
    """UFO's imports (memory, blackboard names) resolve to kvmemory's classes."""
    root = ufo_checkout(tmp_path / "checkout", {}, generation=generation)
    code = (
        "import agents.memory as kv\n"
        "from ufo.agents.memory.memory import Memory, MemoryItem\n"
        "from ufo.agents.memory.blackboard import ImageMemoryItem, ImageMemoryItemNames\n"
        "print(Memory is kv.Memory, MemoryItem is kv.MemoryItem, ImageMemoryItem is kv.ImageMemoryItem)"
    )
    assert run_in_checkout(root, code) == "True True True"


def test_read_json_file_of_an_empty_name_is_empty() -> None:
    """read_json_file("") returns [], as UFO's (no QA_PAIR_FILE configured)."""
    assert Blackboard.read_json_file("") == []


def test_load_questions_returns_a_count_and_the_difference_is_declared(
    tmp_path: pathlib.Path,
) -> None:
    """load_questions returns how many records it added (UFO: None); docs/ufo.md declares it."""
    qa = tmp_path / "qa.jsonl"
    write_questions(qa, 2)
    assert Blackboard().load_questions(qa) == 2
    assert "load_questions` returns" in (ROOT / "docs" / "ufo.md").read_text(encoding="utf-8")


def test_screenshot_over_the_cap_is_sent_empty_and_the_cap_is_declared(
    tmp_path: pathlib.Path,
) -> None:
    """A screenshot over 20 MiB is sent as an empty image with a warning, as docs/ufo.md declares."""
    big = tmp_path / "big.png"
    big.write_bytes(PNG.read_bytes() + b"\0" * (20 * 1024 * 1024))
    board = Blackboard()
    with pytest.warns(ImageReadWarning, match="larger than max_bytes=20971520"):
        board.add_image(str(big), {"step": 1})
    assert board.screenshots_to_prompt()[1] == {"type": "image_url", "image_url": {"url": ""}}
    assert "20 MiB" in (ROOT / "docs" / "ufo.md").read_text(encoding="utf-8")


def test_screenshot_is_sent_as_the_files_own_bytes_labelled_by_content(
    tmp_path: pathlib.Path,
) -> None:
    """A screenshot's data: URL holds the file's own bytes (no re-encoding); the label comes from its content."""
    shot = tmp_path / "shot.jpg"  # a PNG under a JPEG name: the one case where UFO's label differs
    shot.write_bytes(PNG.read_bytes())
    board = Blackboard()
    board.add_image(str(shot), {"step": 1})
    url = board.screenshots_to_prompt()[1]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(PNG.read_bytes()).decode()
    assert "data:image/jpeg;base64,iVBORw0KGgo" in (ROOT / "docs" / "ufo.md").read_text(
        encoding="utf-8"
    )


def test_install_instructions_do_not_name_a_package_index_release() -> None:
    """docs/ufo.md installs from a source checkout or a built wheel, not a bare `pip install kvmemory`."""
    text = (ROOT / "docs" / "ufo.md").read_text(encoding="utf-8")
    installs = re.findall(r"pip install [^\n`]*", text)
    assert installs
    assert not [line for line in installs if line.strip() == "pip install kvmemory"]
    assert "pip install /path/to/kvmemory" in text
    assert "python -m build --wheel" in text


# -- properties that return containers: read-only snapshots, never a silent loss -----------------

CHANGES = {
    "append": lambda view, value: view.append(value),
    "extend": lambda view, value: view.extend([value]),
    "insert": lambda view, value: view.insert(0, value),
    "+=": lambda view, value: view.__iadd__([value]),
    "assign": lambda view, value: view.__setitem__(0, value),
    "del": lambda view, value: view.__delitem__(0),
    "pop": lambda view, value: view.pop(),
    "remove": lambda view, value: view.remove(view[0]),
    "clear": lambda view, value: view.clear(),
    "sort": lambda view, value: view.sort(),
    "reverse": lambda view, value: view.reverse(),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES)
def test_changing_memory_content_raises_naming_add_memory_item(change: Any) -> None:
    """memory.content.append(item) and every other change through content raise, naming the method; nothing is lost."""
    memory = Memory([MemoryItem(step=1, action="click")])
    seen: list[Any] = []
    memory.add_callback(seen.append)
    with pytest.raises(
        ReadOnlyViewError, match=r"Memory\.content is a read-only snapshot.*add_memory_item\(item\)"
    ):
        change(memory.content, MemoryItem(step=2, action="type"))
    assert memory.to_list_of_dicts() == [{"step": 1, "action": "click"}]
    assert seen == []


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES)
def test_changing_list_content_raises_naming_the_methods(change: Any) -> None:
    """memory.list_content.append({...}) raises, naming add_memory_item and to_list_of_dicts."""
    memory = Memory([MemoryItem(step=1, action="click")])
    with pytest.raises(
        ReadOnlyViewError, match=r"Memory\.list_content .*add_memory_item.*to_list_of_dicts\(\)"
    ):
        change(memory.list_content, {"step": 2})
    assert len(memory) == 1


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES)
def test_changing_item_attributes_raises_naming_set_value(change: Any) -> None:
    """item.attributes.append(key) raises, naming set_value and delete_value; the item keeps its fields."""
    item = MemoryItem(step=1, action="click")
    with pytest.raises(
        ReadOnlyViewError,
        match=r"MemoryItem\.attributes .*set_value\(key, value\).*delete_value\(key\)",
    ):
        change(item.attributes, "thought")
    assert item.to_dict() == {"step": 1, "action": "click"}


def test_blackboard_memories_refuse_changes_through_content() -> None:
    """A Blackboard's memories (questions, requests, ...) are Memory objects: their content refuses changes too."""
    board = Blackboard()
    with pytest.raises(ReadOnlyViewError, match="add_memory_item"):
        board.requests.content.append(MemoryItem(request="open the file"))
    assert board.requests.length == 0


def test_stored_memory_content_refuses_changes_and_the_store_is_unchanged(
    tmp_path: pathlib.Path,
) -> None:
    """On a memory written through to a store, content.append raises and nothing reaches the store."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_memory(url, "run-1") as memory:
        memory.add_memory_item(MemoryItem(step=1, action="click"))
        with pytest.raises(ReadOnlyViewError, match="add_memory_item"):
            memory.content.append(MemoryItem(step=2, action="type"))
    with open_memory(url, "run-1") as memory:
        assert memory.to_list_of_dicts() == [{"step": 1, "action": "click"}]


def test_conversation_context_refuses_changes(tmp_path: pathlib.Path) -> None:
    """Conversation.context is a read-only copy; changing it raises, naming Conversation.for_context."""
    chat = Conversation.for_context(f"sqlite:///{tmp_path / 'chat.db'}", {"user": "ada"})
    with pytest.raises(
        ReadOnlyViewError, match=r"Conversation\.context .*Conversation\.for_context"
    ):
        chat.context["user"] = "bob"  # type: ignore[index]  # the refusal is tested
    assert chat.context == {"user": "ada"}


def test_snapshots_read_as_lists_and_their_copies_change_freely() -> None:
    """A snapshot reads as a plain list (equality, index, JSON); its copies are lists of your own, it refuses changes."""
    memory = Memory([MemoryItem(step=1, action="click"), MemoryItem(step=2, action="type")])
    content = memory.content
    assert content == list(memory)
    assert content[-1].action == "type"
    assert json.loads(json.dumps(memory.list_content)) == memory.to_list_of_dicts()
    for copied in (content[:], list(content), copy.copy(content), copy.deepcopy(content)):
        copied.append(MemoryItem(step=3))
        assert type(copied) is list
    with pytest.raises(ReadOnlyViewError):
        content.append(MemoryItem(step=3))
    assert len(memory) == 2
