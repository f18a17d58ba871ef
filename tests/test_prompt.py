"""Tests for agents.memory.prompt: projections, windows, counters and renderers."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import pathlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.memory.exceptions import (
    ArgumentTypeError,
    BudgetExceededError,
    FieldNotFoundError,
    ImageReadError,
    InvalidArgumentError,
    MissingDependencyError,
    TokenizerUnavailableError,
    UnmatchedKeyError,
    UnmatchedKeyWarning,
)
from agents.memory.memory import Memory, MemoryItem
from agents.memory.prompt import (
    AreaImageCost,
    EstimateCounter,
    Key,
    PromptCost,
    TiktokenCounter,
    TileImageCost,
    Window,
    count_image_tokens,
    count_tokens,
    estimate_cost,
    image_data_url,
    image_refs,
    image_size,
    latest_value,
    project,
    prompt_cost,
    render_json,
    render_parts,
    render_text,
    select_window,
    ufo_json,
    values_of,
)

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def steps_memory(n: int = 5) -> Memory:
    """Return a memory of ``n`` simple steps."""
    return Memory([MemoryItem(step=i, action=f"click {i}", cost=0.5) for i in range(n)])


# -- projections ----------------------------------------------------------------


def test_project_keeps_chosen_keys_in_memory_order() -> None:
    """project() returns the chosen keys of every item, oldest first."""
    memory = steps_memory(3)
    assert project(memory, ["step", "action"]) == [
        {"step": 0, "action": "click 0"},
        {"step": 1, "action": "click 1"},
        {"step": 2, "action": "click 2"},
    ]


def test_project_returns_fresh_dicts() -> None:
    """Changing a projected record leaves the memory's item unchanged."""
    memory = steps_memory(1)
    record = project(memory, ["action"])[0]
    record["action"] = "changed"
    assert memory[0]["action"] == "click 0"


def test_project_without_keys_keeps_every_field() -> None:
    """keys=None gives all fields of each item."""
    memory = steps_memory(1)
    assert project(memory) == [{"step": 0, "action": "click 0", "cost": 0.5}]


def test_project_key_aliases_match_both_styles() -> None:
    """A Key with aliases reads old 'Step' and new 'step' items under one name."""
    memory = Memory([MemoryItem(Step=1, Action="a"), MemoryItem(step=2, action="b")])
    keys = [Key("step", aliases=("Step",)), Key("action", aliases=("Action",))]
    assert project(memory, keys) == [{"step": 1, "action": "a"}, {"step": 2, "action": "b"}]


def test_project_mapping_renames_and_aliases() -> None:
    """A mapping {output: (source, alias)} renames and falls back in order."""
    memory = Memory([MemoryItem(Step=1, Observation="x"), MemoryItem(step=2, Observation="y")])
    got = project(memory, {"n": ("step", "Step"), "seen": "Observation"})
    assert got == [{"n": 1, "seen": "x"}, {"n": 2, "seen": "y"}]


def test_project_key_rename() -> None:
    """Key(rename=...) writes the value under the new name."""
    memory = steps_memory(1)
    assert project(memory, [Key("action", rename="Action")]) == [{"Action": "click 0"}]


def test_project_skips_items_without_any_key() -> None:
    """With keys, an item that holds none of them gives no record."""
    memory = Memory([MemoryItem(step=0, action="a"), MemoryItem(note="x"), MemoryItem(action="b")])
    assert project(memory, ["action"]) == [{"action": "a"}, {"action": "b"}]


def test_project_by_steps() -> None:
    """steps= keeps only items of the given steps, in memory order."""
    memory = steps_memory(5)
    assert project(memory, ["step"], steps=[3, 1]) == [{"step": 1}, {"step": 3}]


def test_project_by_steps_uses_the_memory_step_key() -> None:
    """steps= matches the memory's own step_key (UFO's 'Step')."""
    memory = Memory([MemoryItem(Step=1), MemoryItem(Step=2)], step_key="Step")
    assert project(memory, ["Step"], steps=[2]) == [{"Step": 2}]


def test_project_last_n() -> None:
    """last= keeps the newest n items."""
    memory = steps_memory(5)
    assert project(memory, ["step"], last=2) == [{"step": 3}, {"step": 4}]


def test_project_last_zero_is_empty() -> None:
    """last=0 selects nothing."""
    assert project(steps_memory(3), ["step"], last=0) == []


def test_project_rejects_negative_last() -> None:
    """A negative last= is refused with the value in the message."""
    with pytest.raises(ValueError, match="last must be an int >= 0, got -1"):
        project(steps_memory(3), ["step"], last=-1)


def test_project_with_predicate() -> None:
    """where= keeps only items the predicate accepts."""
    memory = steps_memory(6)
    got = project(memory, ["step"], where=lambda item: item["step"] % 2 == 0)
    assert got == [{"step": 0}, {"step": 2}, {"step": 4}]


def test_project_on_a_plain_list_of_items() -> None:
    """Any iterable of items works as a source, with steps and last."""
    items = [MemoryItem(step=i) for i in range(4)]
    assert project(items, ["step"], steps=[0, 2, 3], last=2) == [{"step": 2}, {"step": 3}]


def test_project_warns_about_unmatched_key() -> None:
    """A key no item holds is reported with UnmatchedKeyWarning naming it and a close match."""
    memory = Memory([MemoryItem(Step=1, action="a")])
    with pytest.warns(UnmatchedKeyWarning, match=r"Key 'step' matches none.*did you mean 'Step'"):
        project(memory, ["step", "action"])


def test_project_strict_raises_on_unmatched_key() -> None:
    """strict=True raises UnmatchedKeyError naming the key and the keys present."""
    memory = Memory([MemoryItem(action="a")])
    with pytest.raises(UnmatchedKeyError, match=r"Key 'thought' .*\['action'\]"):
        project(memory, ["thought", "action"], strict=True)


def test_project_does_not_warn_on_empty_memory() -> None:
    """An empty memory yields no records and no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert project(Memory(), ["step"]) == []


def test_project_alias_counts_as_match() -> None:
    """A key found only under its alias is not reported as unmatched."""
    memory = Memory([MemoryItem(Step=1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert project(memory, [Key("step", aliases=("Step",))], strict=True) == [{"step": 1}]


def test_project_optional_key_is_not_reported() -> None:
    """A Key marked optional that matches nothing raises no warning, even in strict mode."""
    memory = Memory([MemoryItem(action="a")])
    got = project(memory, ["action", Key("error", optional=True)], strict=True)
    assert got == [{"action": "a"}]


def test_project_refuses_bad_key_types() -> None:
    """A key that is not a string or Key is refused naming it."""
    with pytest.raises(TypeError, match=r"got 3 \(int\)"):
        project(steps_memory(1), ["step", 3])  # type: ignore[list-item]  # the wrong type is the point


def test_project_refuses_empty_alias_list() -> None:
    """A mapping to an empty sequence of names is refused naming the output key."""
    with pytest.raises(TypeError, match="Key 'x' maps to"):
        project(steps_memory(1), {"x": []})


def test_project_with_int_budget_keeps_newest() -> None:
    """budget=<int> keeps the newest items that fit and returns them in order."""
    memory = steps_memory(10)
    one = count_tokens(render_json([{"step": 9, "action": "click 9"}])[1:-1]) + 1
    got = project(memory, ["step", "action"], budget=1 + 2 * one)
    assert got == [{"step": 8, "action": "click 8"}, {"step": 9, "action": "click 9"}]


def test_latest_value_returns_newest() -> None:
    """latest_value() returns the value from the newest item holding the key."""
    memory = Memory([MemoryItem(plan="a"), MemoryItem(plan="b"), MemoryItem(step=3)])
    assert latest_value(memory, "plan") == "b"


def test_latest_value_default() -> None:
    """latest_value() returns the default when no item holds the key."""
    assert latest_value(steps_memory(2), "plan", default="none") == "none"


def test_latest_value_with_alias() -> None:
    """latest_value() accepts a Key with aliases."""
    memory = Memory([MemoryItem(Plan="old style")])
    assert latest_value(memory, Key("plan", aliases=("Plan",))) == "old style"


def test_latest_value_on_list() -> None:
    """latest_value() works on a list of items."""
    assert latest_value([MemoryItem(plan=1), MemoryItem(plan=2)], "plan") == 2


def test_values_of_flattens_lists() -> None:
    """values_of() splices list values in, one level deep."""
    memory = Memory([MemoryItem(tags=["a"]), MemoryItem(x=1), MemoryItem(tags=["b", ["c"]])])
    assert values_of(memory, "tags") == ["a", "b", ["c"]]


def test_values_of_without_flatten() -> None:
    """values_of(flatten=False) keeps each value as it is."""
    memory = Memory([MemoryItem(tags=["a"]), MemoryItem(tags="b")])
    assert values_of(memory, "tags", flatten=False) == [["a"], "b"]


# -- token counters ---------------------------------------------------------------


def test_estimate_counts_ascii_by_four_characters() -> None:
    """The estimate charges one token per four ASCII characters, rounded up."""
    counter = EstimateCounter()
    assert [counter.count(t) for t in ("", "abcd", "abcde", "a" * 12)] == [0, 1, 2, 3]


def test_estimate_counts_non_ascii_characters_one_each() -> None:
    """Each non-ASCII character costs one token on top of the ASCII estimate."""
    assert EstimateCounter().count("abcd日本") == 3


def test_estimate_counter_validates_chars_per_token() -> None:
    """chars_per_token must be a positive int."""
    with pytest.raises(ValueError, match="chars_per_token must be a positive int, got 0"):
        EstimateCounter(chars_per_token=0)


def test_count_tokens_uses_given_counter() -> None:
    """count_tokens() uses the counter it is given."""
    assert count_tokens("abcdef", EstimateCounter(chars_per_token=2)) == 3


def test_estimate_cost_adds_images() -> None:
    """estimate_cost() charges the counter's per-image cost for each image field."""
    counter = EstimateCounter(image_tokens=100)
    records = [{"screenshot": "a.png"}]
    assert estimate_cost(records, counter) == counter.count(render_json(records)) + 100


def test_tiktoken_counter_without_tiktoken_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without tiktoken installed, TiktokenCounter names the extra to install."""
    # A None entry in sys.modules makes `import tiktoken` fail, as if it were not installed.
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'kvmemory\[tiktoken\]'"):
        TiktokenCounter()


@pytest.mark.skipif(importlib.util.find_spec("tiktoken") is None, reason="tiktoken missing")
def test_tiktoken_counter_without_encoding_files_says_so(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With tiktoken but no encoding files reachable, the error says how to provide them."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(TokenizerUnavailableError, match=r"cl100k_base.*TIKTOKEN_CACHE_DIR"):
        TiktokenCounter("cl100k_base")


# -- windows ----------------------------------------------------------------------


def item_cost(record: dict[str, Any]) -> int:
    """Return what the default window charges for one record without images."""
    return count_tokens(render_json([record])[1:-1]) + 1


def test_window_by_count_keeps_newest_in_order() -> None:
    """max_items keeps the newest items, returned oldest first."""
    result = select_window(steps_memory(6), Window(max_items=2), keys=["step"])
    assert result.records == ({"step": 4}, {"step": 5})


def test_window_reports_dropped_count() -> None:
    """dropped counts the selected items left out."""
    assert select_window(steps_memory(6), Window(max_items=2), keys=["step"]).dropped == 4


def test_window_by_tokens_exact_fit() -> None:
    """A token budget that fits exactly three items keeps exactly three."""
    memory = steps_memory(10)
    per_item = item_cost({"step": 9})
    result = select_window(memory, Window(max_tokens=1 + 3 * per_item), keys=["step"])
    assert [r["step"] for r in result.records] == [7, 8, 9]
    assert result.tokens == 1 + 3 * per_item


def test_window_rendered_json_fits_budget() -> None:
    """The rendered JSON of a window's records costs no more than max_tokens."""
    memory = steps_memory(50)
    result = select_window(memory, Window(max_tokens=40), keys=["step", "action"])
    assert count_tokens(render_json(result.records)) <= 40


def test_window_keeps_pinned_first_item() -> None:
    """pin_first=1 keeps the first item even when newer ones fill the budget."""
    memory = Memory([MemoryItem(task="book a flight")] + [MemoryItem(step=i) for i in range(10)])
    result = select_window(memory, Window(max_items=3, pin_first=1))
    assert result.records == ({"task": "book a flight"}, {"step": 8}, {"step": 9})


def test_window_keeps_pinned_by_predicate() -> None:
    """pinned= keeps every item the predicate accepts."""
    memory = Memory([MemoryItem(step=i, system=(i == 2)) for i in range(8)])
    window = Window(max_items=3, pinned=lambda item: bool(item["system"]))
    result = select_window(memory, window, keys=["step"])
    assert result.records == ({"step": 2}, {"step": 6}, {"step": 7})


def test_window_pinned_over_budget_raises() -> None:
    """Pinned items that alone break the budget raise BudgetExceededError naming their steps."""
    memory = Memory([MemoryItem(step=0, task="x" * 400), MemoryItem(step=1)])
    with pytest.raises(BudgetExceededError, match=r"steps \[0\]"):
        select_window(memory, Window(max_tokens=20, pin_first=1))


def test_window_never_splits_a_group() -> None:
    """A group (consecutive items with the same step) is kept whole or dropped whole."""
    items = [
        MemoryItem(step=1, kind="call"),
        MemoryItem(step=1, kind="result"),
        MemoryItem(step=2, kind="call"),
        MemoryItem(step=2, kind="result"),
        MemoryItem(step=3, kind="call"),
        MemoryItem(step=3, kind="result"),
    ]
    result = select_window(Memory(items), Window(max_items=3, group_by="step"))
    assert [(r["step"], r["kind"]) for r in result.records] == [(3, "call"), (3, "result")]


def test_window_group_by_function() -> None:
    """group_by may be a function of the item."""
    items = [MemoryItem(round=r, i=i) for r in range(3) for i in range(2)]
    window = Window(max_items=5, group_by=lambda item: item.get_value("round"))
    result = select_window(Memory(items), window, keys=["round", "i"])
    assert [r["round"] for r in result.records] == [1, 1, 2, 2]


def test_window_pinned_item_pins_its_group() -> None:
    """Pinning one item of a group keeps the whole group."""
    items = [MemoryItem(step=0, part=1), MemoryItem(step=0, part=2), MemoryItem(step=1, part=1)]
    result = select_window(Memory(items), Window(max_items=3, pin_first=1, group_by="step"))
    assert [(r["step"], r["part"]) for r in result.records] == [(0, 1), (0, 2), (1, 1)]


def test_window_items_without_group_key_stand_alone() -> None:
    """Items lacking the group_by field are single-item groups."""
    items = [MemoryItem(note="a"), MemoryItem(note="b"), MemoryItem(note="c")]
    result = select_window(Memory(items), Window(max_items=2, group_by="step"))
    assert result.records == ({"note": "b"}, {"note": "c"})


def test_window_max_images_strips_older_images() -> None:
    """max_images keeps the newest images; older items keep their text only."""
    items = [MemoryItem(step=i, screenshot=f"s{i}.png") for i in range(4)]
    result = select_window(Memory(items), Window(max_images=2))
    assert result.records == (
        {"step": 0},
        {"step": 1},
        {"step": 2, "screenshot": "s2.png"},
        {"step": 3, "screenshot": "s3.png"},
    )
    assert result.images == 2


def test_window_charges_per_image_tokens() -> None:
    """Each attached image costs the counter's image_tokens, and its path is not charged as text."""
    counter = EstimateCounter(image_tokens=50)
    memory = Memory([MemoryItem(screenshot="a.png")])
    result = select_window(memory, Window(max_tokens=1000, counter=counter))
    assert (result.text_tokens, result.image_tokens) == (1 + item_cost({}), 50)
    assert result.tokens == 1 + item_cost({}) + 50


def test_window_image_cost_can_exclude_item() -> None:
    """An item whose image does not fit the token budget is left out."""
    counter = EstimateCounter(image_tokens=500)
    memory = Memory([MemoryItem(step=0), MemoryItem(step=1, screenshot="a.png")])
    result = select_window(memory, Window(max_tokens=100, counter=counter))
    assert result.records == ()


def test_window_is_lazy_on_long_memories() -> None:
    """A small window over a long memory reads only the newest items, through iter_newest."""
    yielded: list[MemoryItem] = []
    indexed: list[int] = []

    class Spy(Memory):
        def iter_newest(self) -> Iterator[MemoryItem]:
            for item in super().iter_newest():
                yielded.append(item)
                yield item

        def __getitem__(self, index: Any) -> Any:
            indexed.append(index)
            return super().__getitem__(index)

    spy = Spy([MemoryItem(step=i) for i in range(10_000)])
    result = select_window(spy, Window(max_items=5), keys=["step"])
    assert [r["step"] for r in result.records] == [9995, 9996, 9997, 9998, 9999]
    assert (len(yielded), indexed) == (6, [])  # five kept, one that did not fit


def test_window_validates_bounds() -> None:
    """Negative bounds are refused with the field name in the message."""
    with pytest.raises(ValueError, match="max_tokens must be an int >= 0, got -5"):
        Window(max_tokens=-5)


def test_window_refuses_non_counter() -> None:
    """A counter without count() and image_tokens is refused naming its type."""
    with pytest.raises(TypeError, match=r"counter must have count.*got str"):
        Window(counter="cl100k_base")  # type: ignore[arg-type]  # the wrong type is the point


def test_window_strict_unmatched_key_raises() -> None:
    """select_window(strict=True) raises for a key that no kept item holds."""
    with pytest.raises(UnmatchedKeyError, match="'plan'"):
        select_window(steps_memory(3), Window(max_items=2), keys=["plan"], strict=True)


def test_window_with_custom_measure() -> None:
    """measure= decides what text an item is charged for."""
    window = Window(max_tokens=1 + 2 * 2, measure=lambda record: "abcd")
    result = select_window(steps_memory(5), window, keys=["step"])
    assert [r["step"] for r in result.records] == [3, 4]


group_lists = st.lists(
    st.tuples(st.integers(0, 4), st.text(alphabet="ab日 ", max_size=30), st.booleans()),
    max_size=25,
)


def memory_from(spec: list[tuple[int, str, bool]]) -> Memory:
    """Build a memory where consecutive entries with equal numbers form groups."""
    return Memory(
        [
            MemoryItem(
                group=g, text=t, **({"screenshot": "https://example.invalid/x.png"} if img else {})
            )
            for g, t, img in spec
        ]
    )


@settings(max_examples=150, deadline=None)
@given(spec=group_lists, budget=st.integers(1, 400), images=st.none() | st.integers(0, 3))
def test_property_window_never_exceeds_budget(
    spec: list[tuple[int, str, bool]], budget: int, images: int | None
) -> None:
    """What render_parts() sends for a window never costs more than the window says, nor than max_tokens."""
    counter = EstimateCounter(image_tokens=7)
    window = Window(max_tokens=budget, max_images=images, group_by="group", counter=counter)
    result = select_window(memory_from(spec), window)
    sent = prompt_cost(render_parts(result.records), counter)
    assert result.tokens == result.text_tokens + result.image_tokens <= budget
    assert sent.text_tokens <= result.text_tokens
    assert (sent.images, sent.image_tokens) == (result.images, result.image_tokens)
    if images is not None:
        assert result.images <= images


@settings(max_examples=150, deadline=None)
@given(spec=group_lists, budget=st.integers(1, 300), max_items=st.none() | st.integers(0, 8))
def test_property_window_never_splits_group(
    spec: list[tuple[int, str, bool]], budget: int, max_items: int | None
) -> None:
    """Every run of consecutive same-group items is entirely in or entirely out."""
    memory = memory_from(spec)
    window = Window(max_tokens=budget, max_items=max_items, group_by="group")
    kept = {id(item) for item in select_window(memory, window).items}
    items = memory.content
    runs: list[list[MemoryItem]] = []
    for item in items:
        if runs and runs[-1][0]["group"] == item["group"]:
            runs[-1].append(item)
        else:
            runs.append([item])
    for run in runs:
        assert len({id(i) in kept for i in run}) == 1


@settings(max_examples=100, deadline=None)
@given(spec=group_lists, budget=st.integers(1, 300))
def test_property_window_is_a_suffix_in_memory_order(
    spec: list[tuple[int, str, bool]], budget: int
) -> None:
    """Without pins, the kept items are the newest ones, in memory order."""
    memory = memory_from(spec)
    kept = select_window(memory, Window(max_tokens=budget, group_by="group")).items
    assert list(kept) == (memory.content[len(memory) - len(kept) :] if kept else [])


# -- renderers --------------------------------------------------------------------


def test_render_json_is_compact_utf8() -> None:
    """render_json() writes compact JSON and keeps non-ASCII characters."""
    assert render_json([{"step": 1, "text": "café"}]) == '[{"step":1,"text":"café"}]'


def test_render_json_accepts_items_and_tags_values() -> None:
    """render_json() takes items too and writes non-JSON values as codec tags."""
    assert render_json([MemoryItem(t=(1, 2))]) == '[{"t":{"$kv":"tuple","v":[1,2]}}]'


def test_ufo_json_uses_json_dumps_defaults() -> None:
    """ufo_json() matches json.dumps with default separators and ASCII escapes."""
    value = [{"a": 1, "b": "é"}]
    assert ufo_json(value) == json.dumps(value) == '[{"a": 1, "b": "\\u00e9"}]'


def test_render_text_with_template() -> None:
    """render_text() fills the template per record and joins with the separator."""
    records = [{"step": 1, "action": "open"}, {"step": 2, "action": "save"}]
    text = render_text(records, "### Step {step}\n{action}", header="# History")
    assert text == "# History\n\n### Step 1\nopen\n\n### Step 2\nsave"


def test_render_text_default_lines() -> None:
    """Without a template each field becomes a '- key: value' line."""
    text = render_text([{"step": 1, "args": {"x": 2}, "note": "ok"}])
    assert text == '- step: 1\n- args: {"x": 2}\n- note: ok'


def test_render_text_callable_template() -> None:
    """A callable template renders each record."""
    assert render_text([{"a": 1}, {"a": 2}], lambda r: f"a={r['a']}", separator="|") == "a=1|a=2"


def test_render_text_missing_field_names_key_and_step() -> None:
    """A template field the record lacks raises FieldNotFoundError naming it and the step."""
    with pytest.raises(FieldNotFoundError, match=r"field 'thought'.*record 0 \(step 4\)"):
        render_text([{"step": 4}], "{thought}")


def test_render_parts_with_image_path(tmp_path: pathlib.Path) -> None:
    """render_parts() emits a text part then a PNG data URL part for the screenshot."""
    path = tmp_path / "shot.png"
    path.write_bytes(PNG_1X1)
    parts = render_parts([{"step": 1, "screenshot": str(path)}], header="[History]")
    url = "data:image/png;base64," + base64.b64encode(PNG_1X1).decode("ascii")
    assert parts == [
        {"type": "text", "text": "[History]"},
        {"type": "text", "text": '{"step":1}'},
        {"type": "image_url", "image_url": {"url": url}},
    ]


def test_render_parts_passes_urls_through() -> None:
    """An http(s) image reference is used as the URL unchanged."""
    parts = render_parts([{"images": ["https://example.invalid/a.jpg"]}])
    assert parts == [{"type": "image_url", "image_url": {"url": "https://example.invalid/a.jpg"}}]


def test_render_parts_reads_images_only_when_built(tmp_path: pathlib.Path) -> None:
    """Projecting an item with a missing image path succeeds; building parts names the file."""
    memory = Memory([MemoryItem(step=2, screenshot=str(tmp_path / "gone.png"))])
    records = project(memory)
    with pytest.raises(ImageReadError, match=r"gone\.png"):
        render_parts(records)


def test_image_data_url_uses_mime_from_content(tmp_path: pathlib.Path) -> None:
    """A JPEG saved with a .png suffix gets image/jpeg from its bytes."""
    path = tmp_path / "photo.png"
    path.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 8)
    assert image_data_url(path).startswith("data:image/jpeg;base64,")


def test_image_data_url_falls_back_to_suffix(tmp_path: pathlib.Path) -> None:
    """Unrecognised bytes with an image suffix use the suffix's MIME type."""
    path = tmp_path / "pic.svg"
    path.write_bytes(b"<svg/>")
    assert image_data_url(path).startswith("data:image/svg+xml;base64,")


def test_image_data_url_refuses_non_images(tmp_path: pathlib.Path) -> None:
    """A file that is not an image raises ImageReadError naming it."""
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ImageReadError, match=r"notes\.txt' is not a recognised image"):
        image_data_url(path)


def test_image_refs_reads_strings_and_lists() -> None:
    """image_refs() returns paths from a string or a list and ignores other values."""
    assert (image_refs("a.png"), image_refs(["a", 3, "b"]), image_refs(None)) == (
        ["a.png"],
        ["a", "b"],
        [],
    )


# -- step_key ---------------------------------------------------------------------


def test_steps_filter_uses_the_memory_step_key() -> None:
    """project(steps=...) on a memory keyed by 'Step' finds its steps."""
    memory = Memory(
        [MemoryItem(Step=1, action="a"), MemoryItem(Step=2, action="b")], step_key="Step"
    )
    assert project(memory, ["action"], steps=[2]) == [{"action": "b"}]
    assert select_window(memory, Window(), keys=["action"], steps=[1]).records == ({"action": "a"},)


def test_steps_filter_of_plain_items_takes_step_key() -> None:
    """A list of items is filtered by the step_key given (default 'step')."""
    items = [MemoryItem(Step=1, action="a"), MemoryItem(Step=2, action="b")]
    assert project(items, ["action"], steps=[2], step_key="Step") == [{"action": "b"}]
    assert project(items, ["action"], steps=[2]) == []


def test_budget_error_names_steps_by_the_memory_step_key() -> None:
    """Pinned items too large for the window are named by the memory's step key."""
    memory = Memory([MemoryItem(Step=7, text="x" * 400)], step_key="Step")
    with pytest.raises(BudgetExceededError, match=r"steps \[7\]"):
        select_window(memory, Window(max_tokens=10, pin_first=1))


def test_template_error_names_the_step_by_step_key() -> None:
    """render_text's missing-field error names the record's step under step_key."""
    with pytest.raises(FieldNotFoundError, match=r"record 0 \(step 5\)"):
        render_text([{"Step": 5}], "{thought}", step_key="Step")


def test_image_data_url_refuses_a_device_without_reading() -> None:
    """/dev/zero as an image path fails at once, naming the path, instead of reading until memory runs out."""
    with pytest.raises(ImageReadError, match="'/dev/zero' is not a regular file"):
        image_data_url("/dev/zero")


def test_image_data_url_refuses_a_pipe_without_blocking(tmp_path: pathlib.Path) -> None:
    """A named pipe as an image path fails at once instead of waiting for a writer."""
    fifo = tmp_path / "shot.png"
    os.mkfifo(fifo)
    with pytest.raises(ImageReadError, match=r"shot\.png' is not a regular file"):
        image_data_url(fifo)


def test_image_data_url_refuses_a_file_over_the_cap(tmp_path: pathlib.Path) -> None:
    """An image larger than max_bytes raises ImageReadError naming the path and the cap."""
    path = tmp_path / "big.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    assert image_data_url(path, max_bytes=108).startswith("data:image/png;base64,")
    with pytest.raises(ImageReadError, match=r"big\.png' is larger than max_bytes=107 bytes"):
        image_data_url(path, max_bytes=107)


def test_image_path_with_a_nul_byte_is_refused() -> None:
    """An image path with a NUL byte raises ImageReadError naming it, not a bare ValueError."""
    with pytest.raises(ImageReadError, match="holds a NUL byte"):
        image_data_url("shot.png\0.txt")


# -- prompt economy: budgets, image sizes, prompt_cost ------------------------------


def png_of(width: int, height: int) -> bytes:
    """Return a real PNG of ``width`` x ``height`` gray pixels."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = zlib.compress((b"\x00" + b"\x80" * width) * height)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def ufo_steps(n: int, shots: pathlib.Path | None = None) -> Memory:
    """Return a pinned task and ``n`` steps of about 40 tokens, each with a screenshot."""
    items = [MemoryItem(task="save the report as PDF")]
    for i in range(n):
        shot = f"https://example.invalid/{i}.png"
        if shots is not None:
            path = shots / f"{i}.png"
            path.write_bytes(png_of(320, 200))
            shot = str(path)
        items.append(
            MemoryItem(
                step=i,
                action="click_input",
                observation=f"The dialog {i} is open and the OK button is enabled now.",
                screenshot=shot,
            )
        )
    return Memory(items)


def test_text_budget_and_image_cap_are_separate() -> None:
    """max_text_tokens plus max_images holds 2,000 tokens of text and 2 images; max_tokens would hold far less."""
    memory = ufo_steps(200)
    keys = ["task", "step", "action", "observation", "screenshot"]
    split = select_window(
        memory, Window(max_text_tokens=2000, max_images=2, pin_first=1), keys=keys
    )
    total = select_window(memory, Window(max_tokens=2000, max_images=2, pin_first=1), keys=keys)
    assert split.text_tokens <= 2000 < split.text_tokens + 30
    assert (split.images, split.image_tokens) == (2, 2 * 765)
    assert split.tokens == split.text_tokens + split.image_tokens
    assert len(split.records) > 4 * len(total.records)


def test_max_tokens_still_bounds_text_and_images_together() -> None:
    """max_tokens keeps its meaning: text and image tokens together stay under it."""
    memory = ufo_steps(50)
    result = select_window(memory, Window(max_tokens=3000, max_images=2), keys=None)
    assert result.text_tokens + result.image_tokens == result.tokens <= 3000
    assert result.images == 2


def test_max_image_tokens_strips_older_images() -> None:
    """max_image_tokens keeps the newest images within it; older items keep their text only."""
    result = select_window(ufo_steps(10), Window(max_image_tokens=1600, max_items=6))
    assert (result.images, result.image_tokens) == (2, 1530)
    assert [("screenshot" in r) for r in result.records] == [False] * 4 + [True] * 2


def test_window_costs_text_without_the_image_paths() -> None:
    """The text cost of an item with a screenshot is the cost of its other fields."""
    memory = Memory([MemoryItem(step=1, screenshot="/very/long/path/" + "x" * 400 + ".png")])
    result = select_window(memory, Window(max_text_tokens=100), keys=None)
    assert result.text_tokens == 1 + item_cost({"step": 1})


def test_window_cost_matches_what_render_parts_sends(tmp_path: pathlib.Path) -> None:
    """prompt_cost(render_parts(records)) equals the window's image cost, and its text is within the window's."""
    counter = EstimateCounter(image_cost=TileImageCost())
    memory = ufo_steps(30, tmp_path)
    result = select_window(
        memory, Window(max_text_tokens=500, max_images=2, pin_first=1, counter=counter)
    )
    sent = prompt_cost(render_parts(result.records), counter)
    assert (sent.images, sent.image_tokens) == (2, 2 * 255)
    assert sent.image_tokens == result.image_tokens
    # The window also charges the list brackets and a separator per record.
    assert sent.text_tokens <= result.text_tokens <= sent.text_tokens + 1 + len(result.records)


def test_first_prompt_with_only_pinned_items_does_not_warn() -> None:
    """A memory that holds only the pinned task gives no UnmatchedKeyWarning for the step keys."""
    memory = Memory([MemoryItem(task="book a flight")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = select_window(
            memory, Window(max_tokens=500, pin_first=1), keys=["task", "step", "action"]
        )
        records = project(
            memory, ["task", "step", "action"], budget=Window(max_tokens=500, pin_first=1)
        )
    assert result.records == ({"task": "book a flight"},)
    assert records == [{"task": "book a flight"}]


def test_unmatched_key_still_warns_once_steps_exist() -> None:
    """With an unpinned step present, a key no item holds is still reported."""
    memory = Memory([MemoryItem(task="t"), MemoryItem(step=0, action="a")])
    with pytest.warns(UnmatchedKeyWarning, match="'actoin'"):
        select_window(memory, Window(max_tokens=500, pin_first=1), keys=["step", "actoin"])


@pytest.mark.parametrize(
    ("size", "tokens"),
    [((1024, 1024), 765), ((2048, 4096), 1105), ((320, 200), 255), ((4096, 8192), 1105)],
)
def test_tile_image_cost_follows_openai_formula(size: tuple[int, int], tokens: int) -> None:
    """TileImageCost gives the token counts of OpenAI's published examples."""
    assert TileImageCost().tokens(*size) == tokens


def test_tile_image_cost_low_detail_is_flat() -> None:
    """detail='low' costs the base tokens whatever the size."""
    assert TileImageCost(detail="low").tokens(4000, 3000) == 85


@pytest.mark.parametrize(
    ("size", "tokens"), [((320, 200), 86), ((1000, 1000), 1334), ((4000, 3000), 1600)]
)
def test_area_image_cost_follows_anthropic_formula(size: tuple[int, int], tokens: int) -> None:
    """AreaImageCost is width x height / 750, long edge scaled to 1568, at most 1600 tokens."""
    assert AreaImageCost().tokens(*size) == tokens


def test_image_cost_refuses_a_bad_size() -> None:
    """A size that is not two positive ints is refused naming it."""
    with pytest.raises(InvalidArgumentError, match="0 x 5"):
        TileImageCost().tokens(0, 5)


def test_counter_refuses_an_image_cost_without_tokens() -> None:
    """image_cost must be an ImageCost; a number is refused naming the fix."""
    with pytest.raises(ArgumentTypeError, match="TileImageCost"):
        EstimateCounter(image_cost=765)  # type: ignore[arg-type]  # the wrong type on purpose


def test_image_size_reads_headers_of_common_formats(tmp_path: pathlib.Path) -> None:
    """image_size reads PNG, GIF, BMP, JPEG and WebP headers, from files and data URLs."""
    import struct

    gif = b"GIF89a" + struct.pack("<HH", 33, 44) + b"\x00" * 10
    bmp = b"BM" + b"\x00" * 16 + struct.pack("<ii", 55, -66) + b"\x00" * 30
    jpeg = (
        b"\xff\xd8\xff\xe0"
        + struct.pack(">H", 16)
        + b"JFIF\x00" * 2
        + b"\x00\x00\x00\x00"
        + b"\xff\xc0"
        + struct.pack(">HBHH", 17, 8, 77, 88)
        + b"\x00" * 12
    )
    webp = b"RIFF" + b"\x00" * 4 + b"WEBPVP8X" + b"\x00" * 8 + (98).to_bytes(3, "little")
    webp += (87).to_bytes(3, "little")
    cases = {"a.png": png_of(320, 200), "a.gif": gif, "a.bmp": bmp, "a.jpg": jpeg, "a.webp": webp}
    sizes = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        sizes[name] = image_size(tmp_path / name)
    assert sizes == {
        "a.png": (320, 200),
        "a.gif": (33, 44),
        "a.bmp": (55, 66),
        "a.jpg": (88, 77),
        "a.webp": (99, 88),
    }
    data_url = "data:image/png;base64," + base64.b64encode(png_of(7, 9)).decode()
    assert image_size(data_url) == (7, 9)


@pytest.mark.parametrize(
    "ref", ["https://example.invalid/a.png", "HTTP://x/y.png", "missing.png", "data:,text"]
)
def test_image_size_unknown_is_none(ref: str) -> None:
    """URLs are not fetched and unreadable images have no size: None."""
    assert image_size(ref) is None


def test_image_of_unknown_size_costs_the_flat_tokens() -> None:
    """With an image_cost formula, an image whose size cannot be read costs image_tokens."""
    counter = EstimateCounter(image_tokens=99, image_cost=AreaImageCost())
    assert count_image_tokens("https://example.invalid/a.png", counter) == 99
    assert count_image_tokens((320, 200), counter) == 86


def test_prompt_cost_counts_text_and_image_parts(tmp_path: pathlib.Path) -> None:
    """prompt_cost sums text parts and prices image parts by size from their data URLs."""
    path = tmp_path / "shot.png"
    path.write_bytes(png_of(320, 200))
    parts = render_parts([{"step": 1, "screenshot": str(path)}], header="[History]")
    counter = EstimateCounter(image_cost=AreaImageCost())
    cost = prompt_cost(parts, counter)
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert cost == PromptCost(sum(counter.count(t) for t in texts), 86, 1)
    assert cost.tokens == cost.text_tokens + 86
    assert prompt_cost("abcd" * 10) == PromptCost(10, 0, 0)
    assert prompt_cost(parts, counter) + prompt_cost("abcd") == PromptCost(
        cost.text_tokens + 1, 86, 1
    )


@pytest.mark.parametrize(
    ("content", "error", "match"),
    [
        ([{"type": "audio", "audio": {}}], InvalidArgumentError, "part 0 has type 'audio'"),
        ([{"type": "text"}], InvalidArgumentError, "part 0 is a text part"),
        ([{"type": "image_url", "image_url": {}}], InvalidArgumentError, "without a URL"),
        (["hello"], ArgumentTypeError, "part 0 is a str"),
        ({"type": "text", "text": "x"}, ArgumentTypeError, "a list of content parts"),
    ],
)
def test_prompt_cost_names_what_it_cannot_count(content: Any, error: type, match: str) -> None:
    """Content prompt_cost cannot count is refused, naming the part and what it takes."""
    with pytest.raises(error, match=match):
        prompt_cost(content)
