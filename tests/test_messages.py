"""Chat messages out of memories, and messages in and out again."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from chat_schema import conversation_errors, message_errors
from hypothesis import given
from hypothesis import strategies as st

from agents.memory import (
    FieldValidationError,
    ImageReadError,
    Memory,
    MemoryItem,
    Window,
    from_messages,
    select_window,
    to_messages,
)
from agents.memory.messages import check_message, image_count, is_message, message_text

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer in one line."},
    {"role": "user", "content": "What is 2 + 3?", "name": "ann"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            }
        ],
    },
    {"role": "tool", "content": "5", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "2 + 3 = 5."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "And this picture?"},
            {
                "type": "image_url",
                "image_url": {"url": "https://example.org/cat.png", "detail": "low"},
            },
        ],
    },
]


def test_schema_checker_rejects_invalid_messages() -> None:
    """The schema check used by these tests finds the faults the API reference rules out."""
    assert message_errors({"role": "robot", "content": "x"})
    assert message_errors({"role": "tool", "content": "x"})
    assert message_errors({"role": "user", "content": "x", "tags": []})
    assert message_errors(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": {}}}
            ],
        }
    )
    assert conversation_errors([{"role": "tool", "content": "5", "tool_call_id": "nope"}])
    assert conversation_errors(CHAT) == []


def test_messages_round_trip_identical() -> None:
    """Messages in, messages out: the same list."""
    assert to_messages(from_messages(CHAT)) == CHAT


def test_messages_out_are_valid_chat_messages() -> None:
    """A memory of message and step items renders as messages the API schema accepts."""
    memory = Memory(from_messages(CHAT))
    memory.add_memory_item(
        MemoryItem(step=7, action="click", screenshot="https://example.org/s.png")
    )
    messages = to_messages(memory)
    assert conversation_errors(messages) == []


_text = st.text(max_size=20)
_role_message = st.one_of(
    st.builds(lambda c: {"role": "system", "content": c}, _text),
    st.builds(
        lambda c, n: {"role": "user", "content": c, "name": n},
        _text,
        st.sampled_from(["ann", "bob"]),
    ),
    st.builds(
        lambda t, u: {
            "role": "user",
            "content": [
                {"type": "text", "text": t},
                {"type": "image_url", "image_url": {"url": u}},
            ],
        },
        _text,
        st.sampled_from(["https://example.org/a.png", "data:image/png;base64,AAAA"]),
    ),
    st.builds(lambda c: {"role": "assistant", "content": c}, _text),
)


@st.composite
def _conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for index in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            messages.append(draw(_role_message))
        else:
            ids = [f"call_{index}_{n}" for n in range(draw(st.integers(1, 3)))]
            calls = [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": draw(_text)}}
                for i in ids
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages.extend(
                {"role": "tool", "content": draw(_text), "tool_call_id": i} for i in ids
            )
    return messages


@given(_conversations())
def test_any_valid_conversation_round_trips(messages: list[dict[str, Any]]) -> None:
    """Any valid conversation comes back identical and passes the schema check."""
    out = to_messages(from_messages(messages))
    assert out == messages
    assert conversation_errors(out) == []


@given(_conversations())
def test_round_trip_through_a_session_file(messages: list[dict[str, Any]]) -> None:
    """Messages kept in a session document come back identical."""
    memory = Memory(from_messages(messages))
    assert to_messages(Memory.from_json(memory.to_json())) == messages


def test_image_path_becomes_data_url(tmp_path: Path) -> None:
    """An image part naming a file is sent as a data: URL; the item keeps the path."""
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    items = from_messages(
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(shot)}}]}]
    )
    (message,) = to_messages(items)
    assert message["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert items[0]["content"][0]["image_url"]["url"] == str(shot)
    assert message_errors(message) == []


def test_images_keep_passes_paths(tmp_path: Path) -> None:
    """images='keep' sends references as they are."""
    items = [MemoryItem(step=1, screenshot="shots/1.png")]
    (message,) = to_messages(items, images="keep")
    assert message["content"][1] == {"type": "image_url", "image_url": {"url": "shots/1.png"}}


def test_missing_image_file_is_named() -> None:
    """A path that cannot be read raises ImageReadError naming it."""
    items = [MemoryItem(step=1, screenshot="no/such.png")]
    with pytest.raises(ImageReadError, match=r"no/such\.png"):
        to_messages(items)


def test_step_items_use_the_mapping() -> None:
    """Step items take the given role and text keys."""
    items = [MemoryItem(step=1, thought="look", action="click", cost=0.1)]
    (message,) = to_messages(items, role="assistant", text_keys=["step", "action"])
    assert message == {"role": "assistant", "content": '{"step":1,"action":"click"}'}


def test_step_role_may_depend_on_the_item() -> None:
    """A role function picks each step item's role; a role it gives that is not a chat role is refused."""
    items = [MemoryItem(step=1, agent="host"), MemoryItem(step=2, agent="app")]
    messages = to_messages(items, role=lambda r: "assistant" if r["agent"] == "app" else "user")
    assert [m["role"] for m in messages] == ["user", "assistant"]
    with pytest.raises(
        FieldValidationError, match=r"role\(\{'step': 1, 'agent': 'host'\}\) gave 'bot'"
    ):
        to_messages(items, role=lambda r: "bot")


def test_step_items_with_a_text_function() -> None:
    """A text function renders a step item's fields."""
    items = [MemoryItem(step=2, action="save")]
    (message,) = to_messages(items, text=lambda r: f"Step {r['step']}: {r['action']}")
    assert message == {"role": "user", "content": "Step 2: save"}


def test_convert_maps_an_item_to_several_messages() -> None:
    """A convert function may turn one record into several messages; None falls back."""

    def convert(record: dict[str, Any]) -> Any:
        if "question" in record:
            return [
                {"role": "user", "content": record["question"]},
                {"role": "assistant", "content": record["answer"]},
            ]
        return None

    items = [MemoryItem(question="Q?", answer="A."), MemoryItem(role="user", content="more")]
    assert to_messages(items, convert=convert) == [
        {"role": "user", "content": "Q?"},
        {"role": "assistant", "content": "A."},
        {"role": "user", "content": "more"},
    ]


def test_custom_fields_stay_behind() -> None:
    """Fields that are not message keys are kept in the item and left out of the message."""
    (item,) = from_messages([{"role": "user", "content": "hi", "tags": ["greeting"], "user_id": 7}])
    assert item["tags"] == ["greeting"]
    assert to_messages([item]) == [{"role": "user", "content": "hi"}]


def test_window_result_renders_its_records() -> None:
    """to_messages on a WindowResult sends the window's records only."""
    memory = Memory(from_messages(CHAT[:2]))
    memory.add_memory_item(MemoryItem(role="assistant", content="x" * 400))
    result = select_window(memory, Window(max_tokens=40))
    assert to_messages(result) == []
    result = select_window(memory, Window(max_items=2))
    assert to_messages(result) == [CHAT[1], {"role": "assistant", "content": "x" * 400}]


def test_orphan_tool_result_is_refused() -> None:
    """A tool result whose call is not among the earlier messages is refused, naming the id."""
    with pytest.raises(FieldValidationError, match=r"tool call 'call_1'"):
        to_messages(from_messages(CHAT[3:]))


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"role": "robot", "content": "x"}, r"role 'robot'"),
        ({"role": "user"}, r"has no content"),
        ({"role": "user", "content": 3}, r"content 3"),
        ({"role": "tool", "content": "x"}, r"tool_call_id"),
        ({"role": "user", "content": "x", "tool_calls": []}, r"only assistant messages call tools"),
        ({"role": "assistant", "tool_calls": [{"id": 1}]}, r"tool call 0"),
        ({"role": "user", "content": [{"text": "no type"}]}, r"content part 0"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}, r"image part 0"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, r"only tool results carry one"),
        ({"role": "user", "content": "x", "name": 5}, r"has name 5"),
    ],
)
def test_invalid_messages_are_refused(message: dict[str, Any], match: str) -> None:
    """check_message names what is wrong with a message."""
    with pytest.raises(FieldValidationError, match=match):
        check_message(message)


def test_from_messages_is_all_or_nothing() -> None:
    """One bad message refuses the whole list, naming its position."""
    with pytest.raises(FieldValidationError, match=r"Message 1 has role 'bot'"):
        from_messages([{"role": "user", "content": "ok"}, {"role": "bot", "content": "no"}])


def test_bad_options_are_refused() -> None:
    """An unknown role or image mode for to_messages is refused."""
    with pytest.raises(FieldValidationError, match=r"role gave 'robot'"):
        to_messages([], role="robot")
    with pytest.raises(FieldValidationError, match=r"images='inline'"):
        to_messages([], images="inline")


def test_message_helpers() -> None:
    """is_message, message_text and image_count read messages and items alike."""
    item = from_messages([CHAT[5]])[0]
    assert is_message(item)
    assert not is_message(MemoryItem(step=1))
    assert message_text(item) == "And this picture?"
    assert message_text(CHAT[1]) == "What is 2 + 3?"
    assert message_text(CHAT[2]) == ""
    assert image_count(item) == 1
    assert image_count(CHAT[1]) == 0
