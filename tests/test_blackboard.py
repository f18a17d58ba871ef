"""Tests for agents.memory.blackboard: UFO's Blackboard, its prompt text and its fixes."""

from __future__ import annotations

import copy
import datetime as dt
import json
import pathlib
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agents.memory.blackboard import SECTIONS, Blackboard, ImageMemoryItem
from agents.memory.exceptions import (
    ArgumentTypeError,
    BudgetExceededError,
    CorruptSessionError,
    ImageReadError,
    ImageReadWarning,
    InvalidArgumentError,
    InvalidKeyError,
    SkippedRecordWarning,
    UnsupportedVersionError,
)
from agents.memory.memory import Memory, MemoryItem
from agents.memory.prompt import EstimateCounter, image_data_url

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PNG = FIXTURES / "one_pixel.png"


def fixture_board() -> Blackboard:
    """Return the blackboard whose UFO prompt is tests/fixtures/ufo_blackboard_prompt.json."""
    board = Blackboard()
    board.add_questions({"question": "Which file should I open?", "answer": "Rapport café.docx"})
    board.add_requests("Open the quarterly report")
    board.add_requests({"request": "Add a summary", "round": 2})
    board.add_trajectories({"step": 1, "action": "click", "target": ["File", "Open"]})
    board.add_image(str(PNG), {"label": "after open"})
    return board


def text_of(part: dict[str, Any]) -> str:
    """Return the text of a text part."""
    assert part["type"] == "text"
    return str(part["text"])


# -- UFO's names --------------------------------------------------------------------


def test_sections_are_memories() -> None:
    """questions, requests, trajectories and screenshots are each a Memory."""
    board = Blackboard()
    assert all(isinstance(getattr(board, name), Memory) for name in SECTIONS)


def test_add_data_accepts_dict_item_and_string() -> None:
    """add_data() stores a dict as an item, an item as is, and a string as {'text': ...}."""
    board = Blackboard()
    item = MemoryItem(x=1)
    board.add_data({"a": 1}, board.requests)
    board.add_data(item, board.requests)
    board.add_data("hello", board.requests)
    assert board.requests.list_content == [{"a": 1}, {"x": 1}, {"text": "hello"}]
    assert board.requests[1] is item


def test_add_data_refuses_other_types() -> None:
    """add_data() refuses a value that is not an item, dict or string, naming its type."""
    board = Blackboard()
    with pytest.raises(TypeError, match="got int"):
        board.add_data(3, board.requests)  # type: ignore[arg-type]  # the wrong type is the point
    assert board.requests.is_empty()


def test_add_methods_fill_their_sections() -> None:
    """add_questions, add_requests and add_trajectories each fill their own section."""
    board = Blackboard()
    board.add_questions({"q": 1})
    board.add_requests({"r": 1})
    board.add_trajectories({"t": 1})
    assert board.blackboard_to_dict() == {
        "questions": [{"q": 1}],
        "requests": [{"r": 1}],
        "trajectories": [{"t": 1}],
        "screenshots": [],
    }


def test_add_image_keeps_metadata_path_and_image() -> None:
    """add_image() stores the metadata, the path and the image as a data: URL, as an ImageMemoryItem."""
    board = Blackboard()
    board.add_image(str(PNG), {"step": 3, "app": "Word"})
    item = board.screenshots[0]
    assert isinstance(item, ImageMemoryItem)
    assert item.attributes == ["metadata", "image_path", "image_str"]
    assert item["metadata"] == {"step": 3, "app": "Word"}
    assert item["image_path"] == str(PNG)
    assert item["image_str"] == image_data_url(PNG)


def test_add_image_without_metadata_stores_none() -> None:
    """add_image() works without metadata and stores None (UFO raised)."""
    board = Blackboard(lazy_images=True)
    board.add_image("shot.png")
    assert board.screenshots.list_content == [{"metadata": None, "image_path": "shot.png"}]


def test_lazy_add_image_does_not_read_the_file(tmp_path: pathlib.Path) -> None:
    """With lazy_images, add_image() accepts a path that does not exist yet; the prompt reads it."""
    board = Blackboard(lazy_images=True)
    board.add_image(tmp_path / "later.png")
    (tmp_path / "later.png").write_bytes(PNG.read_bytes())
    assert board.screenshots_to_prompt()[1]["image_url"]["url"] == image_data_url(PNG)


def test_add_image_refuses_non_mapping_metadata() -> None:
    """add_image() refuses metadata that is not a dict."""
    with pytest.raises(TypeError, match="metadata must be a dict or None, got str"):
        Blackboard().add_image("a.png", "label")  # type: ignore[arg-type]  # the wrong type is the point


def test_section_to_json_methods() -> None:
    """questions_to_json() and friends return each section's JSON array."""
    board = fixture_board()
    assert json.loads(board.requests_to_json()) == board.requests.list_content
    assert json.loads(board.questions_to_json()) == board.questions.list_content
    assert json.loads(board.trajectories_to_json()) == board.trajectories.list_content
    assert json.loads(board.screenshots_to_json()) == board.screenshots.list_content


def test_is_empty_and_clear() -> None:
    """is_empty() is true only when every section is empty; clear() empties them all."""
    board = fixture_board()
    assert not board.is_empty()
    board.clear()
    assert board.is_empty()


# -- load_questions -------------------------------------------------------------------


def test_load_questions_reads_valid_records_and_warns() -> None:
    """load_questions() adds the valid records and warns naming the skipped lines."""
    board = Blackboard()
    with pytest.warns(SkippedRecordWarning, match=r"questions\.jsonl.*\[2, 4\]"):
        added = board.load_questions(FIXTURES / "questions.jsonl")
    assert added == 3
    assert [q["question"] for q in board.questions] == ["Q1", "Q2", "Q3"]


def test_load_questions_last_k_counts_valid_records_only() -> None:
    """last_k=2 gives the last two valid records, not the last two lines."""
    board = Blackboard()
    with pytest.warns(SkippedRecordWarning):
        board.load_questions(FIXTURES / "questions.jsonl", last_k=2)
    assert [q["question"] for q in board.questions] == ["Q2", "Q3"]


def test_load_questions_last_k_zero_adds_nothing() -> None:
    """last_k=0 adds no record."""
    board = Blackboard()
    with pytest.warns(SkippedRecordWarning):
        assert board.load_questions(FIXTURES / "questions.jsonl", last_k=0) == 0
    assert board.questions.is_empty()


def test_load_questions_refuses_bad_last_k() -> None:
    """last_k below -1 is refused with the value in the message."""
    with pytest.raises(ValueError, match="got -2"):
        Blackboard().load_questions(FIXTURES / "questions.jsonl", last_k=-2)


def test_load_questions_missing_file_adds_nothing(tmp_path: pathlib.Path) -> None:
    """A missing questions file adds nothing and returns 0, as UFO's start-up expects."""
    board = Blackboard()
    board.add_questions({"question": "Q0"})
    assert board.load_questions(tmp_path / "none.jsonl") == 0
    assert board.questions.list_content == [{"question": "Q0"}]


def test_constructor_with_missing_questions_file(tmp_path: pathlib.Path) -> None:
    """Blackboard(questions_file=...) naming a file not yet written starts with no questions."""
    assert Blackboard(questions_file=tmp_path / "none.jsonl").questions.is_empty()


def test_load_questions_unreadable_path_raises(tmp_path: pathlib.Path) -> None:
    """A path that exists but is not a readable file (a directory) still raises."""
    board = Blackboard()
    with pytest.raises(IsADirectoryError):
        board.load_questions(tmp_path)
    assert board.questions.is_empty()


def test_constructor_loads_questions_file(tmp_path: pathlib.Path) -> None:
    """Blackboard(questions_file=..., questions_last_k=...) loads that file, and nothing else."""
    path = tmp_path / "qa.jsonl"
    path.write_text('{"q": 1}\n{"q": 2}\n{"q": 3}\n')
    board = Blackboard(questions_file=path, questions_last_k=2)
    assert board.questions.list_content == [{"q": 2}, {"q": 3}]


def test_import_reads_no_files() -> None:
    """Importing the module and creating a Blackboard open no file (no configuration is read)."""
    code = (
        "import builtins\n"
        "opened = []\n"
        "real_open = builtins.open\n"
        "def spy(*args, **kwargs):\n"
        "    opened.append(args[0] if args else kwargs.get('file'))\n"
        "    return real_open(*args, **kwargs)\n"
        "builtins.open = spy\n"
        "from agents.memory.blackboard import Blackboard\n"
        "Blackboard()\n"
        "print(opened)\n"
    )
    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# -- prompts ---------------------------------------------------------------------------


def test_blackboard_to_prompt_matches_ufo_fixture_byte_for_byte() -> None:
    """The default prompt equals the hand-written UFO fixture exactly."""
    expected = json.loads((FIXTURES / "ufo_blackboard_prompt.json").read_text("utf-8"))
    assert fixture_board().blackboard_to_prompt() == expected


def test_empty_blackboard_prompt() -> None:
    """An empty blackboard still gives the title and one empty list per text section."""
    assert Blackboard().blackboard_to_prompt() == [
        {"type": "text", "text": "[Blackboard:]"},
        {"type": "text", "text": "[Questions & Answers:]\n []"},
        {"type": "text", "text": "[Request History:]\n []"},
        {"type": "text", "text": "[Step Trajectories Completed Previously:]\n []"},
    ]


def test_texts_to_prompt_is_json_dumps_of_list_content() -> None:
    """texts_to_prompt() writes prefix, newline, space and json.dumps(list_content)."""
    board = fixture_board()
    part = board.texts_to_prompt(board.requests, "[R:]")
    assert part == [{"type": "text", "text": "[R:]\n " + json.dumps(board.requests.list_content)}]


def test_texts_to_prompt_tags_values_json_cannot_hold() -> None:
    """A datetime in a section is written as a codec tag instead of failing."""
    board = Blackboard()
    board.add_requests({"at": dt.date(2024, 5, 1)})
    text = text_of(board.texts_to_prompt(board.requests, "[R:]")[0])
    assert text == '[R:]\n [{"at": {"$kv": "date", "v": "2024-05-01"}}]'


def test_texts_to_prompt_last_k() -> None:
    """texts_to_prompt(last_k=1) writes only the newest item."""
    board = fixture_board()
    text = text_of(board.texts_to_prompt(board.requests, "[R:]", last_k=1)[0])
    assert text == '[R:]\n [{"request": "Add a summary", "round": 2}]'


def test_screenshots_to_prompt_passes_urls_through() -> None:
    """An https screenshot reference is used as the image URL unchanged."""
    board = Blackboard()
    board.add_image("https://example.invalid/s.png", {"n": 1})
    assert board.screenshots_to_prompt() == [
        {"type": "text", "text": '{"n": 1}'},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/s.png"}},
    ]


def test_strict_add_image_of_missing_file_raises_and_adds_nothing(tmp_path: pathlib.Path) -> None:
    """With strict_images, a file that cannot be read raises ImageReadError naming it; nothing is added."""
    board = Blackboard(strict_images=True)
    with pytest.raises(ImageReadError, match=r"gone\.png"):
        board.add_image(tmp_path / "gone.png")
    assert board.screenshots.is_empty()


def test_strict_lazy_prompt_of_missing_file_raises(tmp_path: pathlib.Path) -> None:
    """With strict_images and lazy_images, the prompt raises ImageReadError naming the file."""
    board = Blackboard(strict_images=True, lazy_images=True)
    board.add_image(tmp_path / "gone.png")
    with pytest.raises(ImageReadError, match=r"gone\.png"):
        board.screenshots_to_prompt()


def test_lazy_prompt_of_missing_file_warns_and_sends_empty_image(tmp_path: pathlib.Path) -> None:
    """With lazy_images, a file gone by prompt time is sent as an empty image with a warning."""
    board = Blackboard(lazy_images=True)
    board.add_image(tmp_path / "gone.png", {"n": 1})
    with pytest.warns(ImageReadWarning, match=r"gone\.png"):
        parts = board.screenshots_to_prompt()
    assert parts[1] == {"type": "image_url", "image_url": {"url": ""}}


def test_screenshots_to_prompt_max_images_keeps_newest() -> None:
    """max_images keeps the newest screenshots."""
    board = Blackboard()
    for n in range(3):
        board.add_image(f"https://example.invalid/{n}.png", {"n": n})
    parts = board.screenshots_to_prompt(max_images=1)
    assert [text_of(p) for p in parts[::2]] == ['{"n": 2}']


def test_blackboard_to_prompt_last_k_per_section() -> None:
    """last_k as a mapping trims only the sections it names."""
    board = fixture_board()
    parts = board.blackboard_to_prompt(last_k={"requests": 1, "screenshots": 0})
    assert text_of(parts[2]) == '[Request History:]\n [{"request": "Add a summary", "round": 2}]'
    assert text_of(parts[1]).startswith("[Questions & Answers:]\n [{")
    assert len(parts) == 4


def test_blackboard_to_prompt_last_k_int_applies_to_all() -> None:
    """last_k as an int applies to every section."""
    board = fixture_board()
    board.add_questions({"question": "second"})
    parts = board.blackboard_to_prompt(last_k=1)
    assert text_of(parts[1]) == '[Questions & Answers:]\n [{"question": "second"}]'
    assert text_of(parts[2]) == '[Request History:]\n [{"request": "Add a summary", "round": 2}]'


def test_blackboard_to_prompt_refuses_unknown_section() -> None:
    """last_k naming an unknown section raises ValueError naming it."""
    with pytest.raises(ValueError, match=r"unknown sections \['steps'\]"):
        Blackboard().blackboard_to_prompt(last_k={"steps": 1})


def test_blackboard_to_prompt_max_images() -> None:
    """max_images=0 leaves screenshots out."""
    parts = fixture_board().blackboard_to_prompt(max_images=0)
    assert [p["type"] for p in parts] == ["text"] * 4


def test_blackboard_to_prompt_max_tokens_drops_oldest_of_costliest() -> None:
    """Under max_tokens the costliest section loses its oldest items first."""
    board = Blackboard(counter=EstimateCounter(image_tokens=0))
    board.add_questions({"q": "short"})
    for n in range(10):
        board.add_trajectories({"step": n, "note": "x" * 40})
    full = board.blackboard_to_prompt()
    budget = sum(board.counter.count(text_of(p)) for p in full) - 30
    parts = board.blackboard_to_prompt(max_tokens=budget)
    assert sum(board.counter.count(text_of(p)) for p in parts) <= budget
    assert text_of(parts[1]) == text_of(full[1])
    kept = json.loads(text_of(parts[3]).split("\n ", 1)[1])
    assert [t["step"] for t in kept] == list(range(10 - len(kept), 10))


def test_blackboard_to_prompt_budget_counts_images() -> None:
    """Each screenshot costs the counter's image_tokens against max_tokens."""
    board = Blackboard(counter=EstimateCounter(image_tokens=1000))
    board.add_image("https://example.invalid/a.png")
    parts = board.blackboard_to_prompt(max_tokens=500)
    assert all(p["type"] == "text" for p in parts)


def test_blackboard_to_prompt_budget_below_titles_raises() -> None:
    """A budget smaller than the section titles raises BudgetExceededError."""
    with pytest.raises(BudgetExceededError, match="max_tokens=5"):
        Blackboard().blackboard_to_prompt(max_tokens=5)


# -- dicts and files -----------------------------------------------------------------------


def test_blackboard_to_dict_returns_fresh_dicts() -> None:
    """Changing the dict from blackboard_to_dict() leaves the blackboard unchanged."""
    board = fixture_board()
    data = board.blackboard_to_dict()
    data["requests"][0]["text"] = "changed"
    assert board.requests[0]["text"] == "Open the quarterly report"


def test_blackboard_to_json_is_json_dumps_of_the_dict() -> None:
    """blackboard_to_json() writes json.dumps(blackboard_to_dict()), as UFO does."""
    board = Blackboard()
    board.add_questions({"answer": "café"})
    board.add_trajectories({"step": 1, "box": (1, 2)})
    assert board.blackboard_to_json() == json.dumps(
        {
            "questions": [{"answer": "café"}],
            "requests": [],
            "trajectories": [{"step": 1, "box": [1, 2]}],
            "screenshots": [],
        }
    )


def test_blackboard_from_dict_round_trip_keeps_image_items() -> None:
    """blackboard_from_dict(blackboard_to_dict()) restores sections, screenshots as ImageMemoryItem."""
    board = fixture_board()
    copy = Blackboard()
    copy.blackboard_from_dict(board.blackboard_to_dict())
    assert copy.blackboard_to_dict() == board.blackboard_to_dict()
    assert isinstance(copy.screenshots[0], ImageMemoryItem)


def test_blackboard_from_dict_is_all_or_nothing() -> None:
    """A bad record in the last section leaves every section as it was."""
    board = fixture_board()
    before = board.blackboard_to_dict()
    bad = {"questions": [{"q": 1}], "screenshots": ["shot.png"]}
    with pytest.raises(TypeError, match="Record 0 of section 'screenshots' is a str"):
        board.blackboard_from_dict(bad)
    assert board.blackboard_to_dict() == before


def test_blackboard_from_dict_ignores_keys_that_are_not_sections() -> None:
    """Keys other than the four sections are ignored, as UFO ignores them."""
    board = fixture_board()
    board.blackboard_from_dict({"notes": [{"n": 1}], "requests": [{"text": "r"}]})
    assert board.requests.list_content == [{"text": "r"}]
    assert board.questions.is_empty()


def test_blackboard_from_dict_refuses_non_list_section() -> None:
    """A section that is not a list is refused naming it."""
    with pytest.raises(TypeError, match="Section 'requests' must be a list"):
        Blackboard().blackboard_from_dict({"requests": {"a": 1}})


def test_blackboard_from_dict_refuses_non_dict_record() -> None:
    """A record that is not a dict is refused naming its position and section."""
    with pytest.raises(TypeError, match="Record 1 of section 'questions' is a str"):
        Blackboard().blackboard_from_dict({"questions": [{"a": 1}, "x"]})


def test_save_and_load_round_trip(tmp_path: pathlib.Path) -> None:
    """save() then Blackboard.from_file() gives equal sections, typed values and image items."""
    board = fixture_board()
    board.add_trajectories({"step": 2, "at": dt.datetime(2024, 5, 1, 12, 0), "pos": (3, 4)})
    path = tmp_path / "board.json"
    board.save(path)
    loaded = Blackboard.from_file(path)
    for name in SECTIONS:
        assert getattr(loaded, name) == getattr(board, name)
    assert isinstance(loaded.screenshots[0], ImageMemoryItem)


def test_load_corrupt_file_changes_nothing(tmp_path: pathlib.Path) -> None:
    """Loading a file with a bad item raises CorruptSessionError and keeps the old content."""
    path = tmp_path / "board.json"
    doc = {
        "format": "kvmemory.blackboard",
        "version": 1,
        "sections": {"questions": [{"q": 1}], "requests": [7]},
    }
    path.write_text(json.dumps(doc))
    board = fixture_board()
    with pytest.raises(CorruptSessionError, match="item 0 of section 'requests'"):
        board.load(path)
    assert board.blackboard_to_dict() == fixture_board().blackboard_to_dict()


def test_load_refuses_other_documents(tmp_path: pathlib.Path) -> None:
    """A JSON file that is not a saved blackboard is refused naming the file."""
    path = tmp_path / "other.json"
    path.write_text("[]")
    with pytest.raises(CorruptSessionError, match=r"other\.json' is not a saved blackboard"):
        Blackboard().load(path)


def test_load_refuses_newer_version(tmp_path: pathlib.Path) -> None:
    """A file from a newer format version raises UnsupportedVersionError."""
    path = tmp_path / "new.json"
    path.write_text('{"format": "kvmemory.blackboard", "version": 99, "sections": {}}')
    with pytest.raises(UnsupportedVersionError, match="version 99"):
        Blackboard().load(path)


def test_load_invalid_json_names_position(tmp_path: pathlib.Path) -> None:
    """Invalid JSON raises CorruptSessionError with line and column."""
    path = tmp_path / "broken.json"
    path.write_text('{"format": ')
    with pytest.raises(CorruptSessionError, match="line 1, column"):
        Blackboard().load(path)


# -- threads ------------------------------------------------------------------------------------


def test_concurrent_adds_from_threads_are_all_kept() -> None:
    """Eight threads adding to one blackboard lose no item."""
    board = Blackboard()
    barrier = threading.Barrier(8)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(200):
            board.add_trajectories({"thread": n, "i": i})
            board.add_image(f"https://example.invalid/{n}/{i}.png")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(board.trajectories), len(board.screenshots)) == (1600, 1600)


def test_load_does_not_import_a_module_the_file_names(
    planted_module: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A blackboard file naming an unimported module's class raises, imports nothing, changes nothing."""
    path = tmp_path / "board.json"
    wire = {"$kv": "item", "class": "this_module_does_not_exist_yet:Cls", "fields": {"step": 1}}
    doc = {"format": "kvmemory.blackboard", "version": 1, "sections": {"trajectories": [wire]}}
    path.write_text(json.dumps(doc))
    board = fixture_board()
    before = board.blackboard_to_dict()
    with pytest.raises(CorruptSessionError, match="is not defined in this process"):
        board.load(path)
    assert board.blackboard_to_dict() == before
    assert not planted_module.exists()
    assert Blackboard.from_file(path, on_unknown_class="base").trajectories[0] == MemoryItem(step=1)
    assert not planted_module.exists()
    assert type(Blackboard.from_file(path, trusted_import=True).trajectories[0]).__name__ == "Cls"
    assert planted_module.exists()


def test_blackboard_from_dict_bad_key_is_invalid_key_error() -> None:
    """A record with a non-string key raises InvalidKeyError naming the record; nothing changes."""
    board = fixture_board()
    before = board.blackboard_to_dict()
    with pytest.raises(InvalidKeyError, match="Record 0 of section 'requests'"):
        board.blackboard_from_dict({"requests": [{1: "x"}]})
    assert board.blackboard_to_dict() == before


def test_blackboard_argument_errors_are_library_errors() -> None:
    """Wrong argument types and values raise ArgumentTypeError and InvalidArgumentError."""
    board = Blackboard()
    with pytest.raises(ArgumentTypeError, match="must be a MemoryItem, a dict or a string"):
        board.add_requests(3)  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(ArgumentTypeError, match="metadata must be a dict or None"):
        board.add_image("a.png", metadata=[1])  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(InvalidArgumentError, match="last_k names unknown sections"):
        board.blackboard_to_prompt(last_k={"nope": 1})


def test_screenshot_of_a_device_is_refused_without_reading() -> None:
    """A screenshot path naming /dev/zero fails at once (a warning, or ImageReadError when strict)."""
    with pytest.warns(ImageReadWarning, match="'/dev/zero' is not a regular file"):
        Blackboard().add_image("/dev/zero")
    with pytest.raises(ImageReadError, match="'/dev/zero' is not a regular file"):
        Blackboard(strict_images=True).add_image("/dev/zero")


def test_load_refuses_a_nul_byte_in_the_path(tmp_path: pathlib.Path) -> None:
    """A blackboard path with a NUL byte is refused by name, not cut short."""
    (tmp_path / "board.json").write_text("{}")
    with pytest.raises(InvalidArgumentError, match="holds a NUL byte"):
        Blackboard().load(str(tmp_path / "board.json") + "\0.bak")


def test_read_json_file_skips_a_line_nested_too_deeply(tmp_path: pathlib.Path) -> None:
    """A line nested deeper than json.loads recurses is skipped with a warning, not a RecursionError."""
    path = tmp_path / "q.jsonl"
    path.write_text('{"a": 1}\n' + "[" * 100_000 + "\n", encoding="utf-8")
    with pytest.warns(SkippedRecordWarning, match=r"skipped lines \[2\]"):
        assert Blackboard.read_json_file(path) == [{"a": 1}]


def test_ufo_blackboard_file_with_a_bad_tag_names_the_path(tmp_path: pathlib.Path) -> None:
    """A blackboard_to_json file with a malformed tag names the file and the value's path; nothing changes."""
    path = tmp_path / "board.json"
    path.write_text('{"requests": [{"when": {"$kv": "date", "v": 5}}]}', encoding="utf-8")
    board = fixture_board()
    before = board.blackboard_to_dict()
    with pytest.raises(
        CorruptSessionError,
        match=r"board\.json', at \$\.requests\[0\]\.when: the 'date' tag holds 5",
    ):
        board.load(path)
    assert board.blackboard_to_dict() == before


def test_ufo_blackboard_file_of_the_wrong_shape_is_not_a_blackboard(tmp_path: pathlib.Path) -> None:
    """A JSON object whose sections are not lists is refused as not a blackboard; nothing changes."""
    path = tmp_path / "board.json"
    path.write_text('{"requests": "open the report"}', encoding="utf-8")
    board = fixture_board()
    before = board.blackboard_to_dict()
    with pytest.raises(
        CorruptSessionError, match=r"board\.json' is not a blackboard: Section 'requests'"
    ):
        board.load(path)
    assert board.blackboard_to_dict() == before


@pytest.mark.parametrize(
    "clone",
    [copy.deepcopy, lambda b: pickle.loads(pickle.dumps(b))],
    ids=["deepcopy", "pickle"],
)
def test_deepcopy_and_pickle_give_an_independent_equal_blackboard(
    clone: Callable[[Blackboard], Blackboard],
) -> None:
    """Regression (TypeError: cannot pickle '_thread.RLock'): a copy has every section, its own lock, and changes alone."""
    board = fixture_board()
    copied = clone(board)
    assert copied.blackboard_to_json() == board.blackboard_to_json()
    assert copied.blackboard_to_prompt() == board.blackboard_to_prompt()
    assert copied.lock is not board.lock
    assert copied.trajectories.lock is not board.trajectories.lock
    copied.add_trajectories({"step": 2})
    assert (len(copied.trajectories), len(board.trajectories)) == (2, 1)
    with copied.lock:
        copied.add_requests("reentrant")
