"""Chat messages out of memories, and messages in and out again."""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import Any

import pytest
from chat_schema import (
    ASSISTANT_PART,
    TEXT,
    URL,
    USER_PART,
    conversation_errors,
    conversations,
    message_errors,
    tool_call,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import (
    Conversation,
    FieldValidationError,
    ImageReadError,
    Memory,
    MemoryItem,
    Window,
    from_messages,
    select_window,
    to_messages,
)
from agents.memory.messages import (
    MESSAGE_KEYS,
    NO_RESULT,
    check_message,
    image_count,
    is_message,
    message_text,
    settle_tool_calls,
)

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
    """The checker derived from the openai package's types finds what the schema and the tool rules refuse."""
    assert message_errors({"role": "robot", "content": "x"})
    assert message_errors({"role": "tool", "content": "x"})
    assert message_errors({"role": "user", "content": "x", "tags": []})
    assert message_errors({"role": "user", "content": "x", "refusal": "no"})
    assert message_errors({"role": "tool", "content": "x", "tool_call_id": "c", "name": "n"})
    assert message_errors(
        {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://a"}}]}
    )
    assert message_errors({"role": "user", "content": [{"type": "video", "video": "v"}]})
    assert message_errors(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": {}}}
            ],
        }
    )
    assert conversation_errors([{"role": "tool", "content": "5", "tool_call_id": "nope"}])
    assert conversation_errors(CHAT[2:3])  # a call never answered
    assert conversation_errors([*CHAT[2:3], CHAT[0], CHAT[3]])  # a result after another message
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


@PROPERTY
@given(conversations())
def test_any_valid_conversation_round_trips(messages: list[dict[str, Any]]) -> None:
    """Any valid conversation comes back identical and passes the openai types and the tool rules."""
    assert conversation_errors(messages) == []
    out = to_messages(from_messages(messages))
    assert out == messages
    assert conversation_errors(out) == []


@PROPERTY
@given(conversations())
def test_round_trip_through_a_session_file(messages: list[dict[str, Any]]) -> None:
    """Messages kept in a session document come back identical."""
    memory = Memory(from_messages(messages))
    assert to_messages(Memory.from_json(memory.to_json())) == messages


@PROPERTY
@given(conversations())
def test_round_trip_through_a_stored_conversation(messages: list[dict[str, Any]]) -> None:
    """Messages added to a conversation in a store come out identical."""
    with Conversation.for_context("memory://", {"chat": 1}) as chat:
        chat.add_messages(messages)
        assert chat.messages() == messages


_step_item = st.builds(
    lambda step, shots, action: MemoryItem(step=step, action=action, screenshots=shots),
    st.integers(0, 99),
    st.lists(URL, max_size=2),
    TEXT,
)


@PROPERTY
@given(
    st.lists(st.one_of(conversations(), st.lists(_step_item, max_size=2)), max_size=4),
    st.sampled_from(["system", "developer", "user", "assistant"]),
)
def test_mixed_memories_render_valid_messages(chunks: list[list[Any]], role: str) -> None:
    """Message items and steps of any role render as messages the openai types and tool rules accept."""
    items: list[MemoryItem] = []
    for chunk in chunks:
        items.extend(item if isinstance(item, MemoryItem) else MemoryItem(**item) for item in chunk)
    messages = to_messages(items, role=role)
    assert conversation_errors(messages) == []


_loose_value = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), TEXT, st.just([]), st.just({})
)
_loose_part = st.one_of(
    USER_PART,
    ASSISTANT_PART,
    TEXT,
    st.dictionaries(
        st.sampled_from(["type", "text", "image_url", "refusal", "file", "input_audio", "x"]),
        st.one_of(_loose_value, st.sampled_from(["text", "image_url", "refusal", "file"])),
        max_size=3,
    ),
)
_loose_message = st.dictionaries(
    st.sampled_from([*MESSAGE_KEYS, "function_call", "tags"]),
    st.one_of(
        _loose_value,
        st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot"]),
        st.lists(_loose_part, max_size=2),
        st.lists(
            st.builds(tool_call, st.sampled_from(["a", "b"]), st.booleans(), TEXT), max_size=2
        ),
        st.just({"id": "audio_1"}),
    ),
    max_size=5,
)


@PROPERTY
@given(_loose_message)
def test_what_check_message_accepts_the_openai_types_accept(message: dict[str, Any]) -> None:
    """check_message accepts a message only if the openai package's types accept what is sent of it."""
    try:
        check_message(message)
    except FieldValidationError:
        return
    sent = {key: message[key] for key in MESSAGE_KEYS if key in message}
    assert message_errors(sent) == []


def test_local_image_path_in_incoming_messages_is_refused_and_never_read(tmp_path: Path) -> None:
    """An incoming message naming a local file is refused at input, naming read_paths=True; nothing is kept."""
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    incoming = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(secret)}}]}
    ]
    with pytest.raises(
        FieldValidationError,
        match=r"Message 0 \(user\) content part 0 .*local path.*read_paths=True",
    ):
        from_messages(incoming)
    chat = Conversation()
    with pytest.raises(FieldValidationError, match="read_paths=True"):
        chat.add_messages(incoming)
    assert len(chat) == 0


def test_path_string_in_images_is_refused_naming_read_paths(tmp_path: Path) -> None:
    """add_user(images=["shot.png"]) is refused at that call (a string may come from a client), naming read_paths=True."""
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    chat = Conversation()
    with pytest.raises(
        FieldValidationError, match=r"local path.*pathlib\.Path in images= or pass read_paths=True"
    ):
        chat.add_user("Compare", images=[str(shot)])
    assert len(chat) == 0


def test_path_object_in_images_is_sent_as_its_data(tmp_path: Path) -> None:
    """add_user(images=[Path(...)]) reads the file the program names: messages() sends a data: URL, never the path."""
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    chat = Conversation()
    chat.add_user("Compare", images=[shot])
    (message,) = chat.messages()
    assert message["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{base64.b64encode(PNG).decode()}"},
    }
    assert str(shot) not in repr(chat.messages()) + chat.history.to_json()


def test_unreadable_path_object_in_images_is_named(tmp_path: Path) -> None:
    """A Path in images= that is not an image file raises ImageReadError naming it; nothing is added."""
    chat = Conversation()
    with pytest.raises(ImageReadError, match=r"nothing\.png"):
        chat.add_user("Compare", images=[tmp_path / "nothing.png"])
    assert len(chat) == 0


@pytest.mark.parametrize(
    "url",
    [
        "data:text/html;base64,PGI+aGk8L2I+",
        "data:image/png,rawbytes",
        "https://",
        "http://example.org/a b.png",
        "file:///etc/passwd",
        "ftp://example.org/a.png",
        "javascript:alert(1)",
        "shot.png",
    ],
)
def test_image_url_a_chat_api_refuses_is_refused_at_input(url: str) -> None:
    """Only http(s) URLs with a host and data:image/...;base64 URLs come in as image URLs."""
    incoming = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    with pytest.raises(FieldValidationError, match=r"content part 0 has an image URL that"):
        from_messages(incoming)


def test_stored_message_item_with_a_path_is_refused_on_the_way_out() -> None:
    """A message item holding a path (stored by an older version) is refused by to_messages, never sent as a URL."""
    item = MemoryItem(
        role="user", content=[{"type": "image_url", "image_url": {"url": "shots/1.png"}}]
    )
    with pytest.raises(FieldValidationError, match=r"Message 0 \(user\) .*local path"):
        to_messages([item])


SENDABLE_PREFIXES = ("http://", "https://", "data:image/")


@PROPERTY
@given(
    st.one_of(
        st.text(max_size=30),
        st.builds(
            lambda p, t: p + t,
            st.sampled_from(["https://", "data:", "data:image/png;base64,", "/", "file://"]),
            st.text(max_size=20),
        ),
    )
)
def test_messages_out_never_carry_an_image_url_a_chat_api_refuses(url: str) -> None:
    """Whatever string comes in as an image URL, it is refused or goes out as http(s) or data:image URL."""
    incoming = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    try:
        items = from_messages(incoming)
    except FieldValidationError:
        return
    (message,) = to_messages(items)
    sent = message["content"][0]["image_url"]["url"]
    assert sent.lower().startswith(SENDABLE_PREFIXES)
    assert not any(char.isspace() for char in sent) or sent.lower().startswith("data:")


def test_read_paths_reads_local_images_into_data_urls(tmp_path: Path) -> None:
    """With read_paths=True an image path is read on input and stored as a data: URL."""
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    items = from_messages(
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(shot)}}]}],
        read_paths=True,
    )
    url = items[0]["content"][0]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(PNG).decode()
    chat = Conversation()
    item = chat.add_user("look", images=[shot], read_paths=True)
    assert item["content"][1]["image_url"]["url"] == url
    (message,) = chat.messages()
    assert message_errors(message) == []


def test_read_paths_failure_adds_nothing(tmp_path: Path) -> None:
    """An unreadable path under read_paths raises ImageReadError and adds nothing."""
    chat = Conversation()
    with pytest.raises(ImageReadError, match=r"no/such\.png"):
        chat.add_user("look", images=["no/such.png"], read_paths=True)
    assert len(chat) == 0


def test_upper_case_url_schemes_are_urls() -> None:
    """HTTPS:// and DATA: are URLs in any case: passed through, never read as paths."""
    items = [MemoryItem(step=1, screenshot="HTTPS://example.org/A.PNG")]
    (message,) = to_messages(items)
    assert message["content"][1]["image_url"]["url"] == "HTTPS://example.org/A.PNG"


def test_assistant_step_images_follow_in_a_user_message() -> None:
    """A step rendered as an assistant message sends its images in a user message that names whose they are."""
    memory = Memory([MemoryItem(step=3, action="click", screenshot="https://example.org/s3.png")])
    messages = to_messages(memory, role="assistant", text_keys=["step", "action"])
    assert messages == [
        {"role": "assistant", "content": '{"step":3,"action":"click"}'},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "The images of the assistant message above (step 3)."},
                {"type": "image_url", "image_url": {"url": "https://example.org/s3.png"}},
            ],
        },
    ]
    assert conversation_errors(messages) == []


def test_image_path_of_a_step_becomes_data_url(tmp_path: Path) -> None:
    """A step's screenshot path (the agent's own data) is sent as a data: URL."""
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    (message,) = to_messages([MemoryItem(step=1, screenshot=str(shot))])
    assert message["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert message_errors(message) == []


def test_images_keep_passes_urls_and_refuses_paths() -> None:
    """images='keep' sends URLs as they are; a path, which a chat API refuses, is named with the fix."""
    items = [MemoryItem(step=1, screenshot="https://example.org/1.png")]
    (message,) = to_messages(items, images="keep")
    assert message["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://example.org/1.png"},
    }
    with pytest.raises(
        FieldValidationError, match=r"Image 'shots/1\.png' of step 1 .*images='data'"
    ):
        to_messages([MemoryItem(step=1, screenshot="shots/1.png")], images="keep")


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
    with pytest.raises(FieldValidationError, match=r"call id 'call_1'"):
        to_messages(from_messages(CHAT[3:]))


def _fn(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "add", "arguments": "{}"}}


ASK = {"role": "user", "content": "add"}
CALLS = {"role": "assistant", "content": None, "tool_calls": [_fn("a"), _fn("b")]}
RESULT_A = {"role": "tool", "content": "1", "tool_call_id": "a"}
RESULT_B = {"role": "tool", "content": "2", "tool_call_id": "b"}
LATER = {"role": "user", "content": "and?"}

BROKEN = {
    "never answered": [ASK, CALLS, LATER],
    "one of two answered": [ASK, CALLS, RESULT_A, LATER],
    "result after another message": [ASK, CALLS, RESULT_A, LATER, RESULT_B],
    "answered twice": [ASK, CALLS, RESULT_A, RESULT_B, RESULT_A],
    "duplicate call ids": [ASK, {**CALLS, "tool_calls": [_fn("a"), _fn("a")]}, RESULT_A],
    "crash before the result": [ASK, CALLS],
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_tool_pairing_is_refused_by_default(case: str) -> None:
    """Each break of the tool-call rules is refused with FieldValidationError naming the fix."""
    items = [MemoryItem(**message) for message in BROKEN[case]]  # as a stored history holds them
    assert conversation_errors(BROKEN[case])
    with pytest.raises(FieldValidationError, match=r"refuses the request.*unanswered="):
        to_messages(items)


@pytest.mark.parametrize("case", list(BROKEN))
@pytest.mark.parametrize("policy", ["drop", "close"])
def test_drop_and_close_give_messages_the_api_accepts(case: str, policy: str) -> None:
    """unanswered='drop' and 'close' turn each broken history into messages the tool rules accept."""
    items = [MemoryItem(**message) for message in BROKEN[case]]
    messages = to_messages(items, unanswered=policy)
    assert conversation_errors(messages) == []
    assert messages[0] == ASK
    assert (LATER in messages) == (LATER in BROKEN[case])


def test_close_answers_each_unanswered_call_with_a_stated_no_result() -> None:
    """'close' adds a tool message holding NO_RESULT after the group's results, one per unanswered call."""
    messages = to_messages(
        [MemoryItem(**m) for m in BROKEN["one of two answered"]], unanswered="close"
    )
    assert messages == [
        ASK,
        CALLS,
        RESULT_A,
        {"role": "tool", "content": NO_RESULT, "tool_call_id": "b"},
        LATER,
    ]


def test_drop_leaves_unanswered_calls_out() -> None:
    """'drop' takes unanswered calls out of their message, and the message when nothing is left of it."""
    messages = to_messages(
        [MemoryItem(**m) for m in BROKEN["one of two answered"]], unanswered="drop"
    )
    assert messages == [ASK, {**CALLS, "tool_calls": [_fn("a")]}, RESULT_A, LATER]
    messages = to_messages([MemoryItem(**m) for m in BROKEN["never answered"]], unanswered="drop")
    assert messages == [ASK, LATER]
    spoken = {**CALLS, "content": "Let me add."}
    assert to_messages([MemoryItem(**m) for m in [ASK, spoken]], unanswered="drop") == [
        ASK,
        {"role": "assistant", "content": "Let me add."},
    ]


def test_settle_keeps_the_very_objects_it_does_not_change() -> None:
    """settle_tool_calls returns unchanged messages as the objects given, changed ones as new dicts."""
    given_messages = [dict(m) for m in BROKEN["one of two answered"]]
    settled = settle_tool_calls(given_messages, unanswered="close")
    assert settled[0] is given_messages[0]
    assert settled[2] is given_messages[2]
    with pytest.raises(FieldValidationError, match=r"unanswered='maybe'"):
        settle_tool_calls(given_messages, unanswered="maybe")


_pairing_message = st.one_of(
    st.sampled_from([ASK, LATER, RESULT_A, RESULT_B, CALLS, {**CALLS, "tool_calls": [_fn("a")]}]),
    st.just({**CALLS, "tool_calls": [_fn("a"), _fn("a")]}),
)


@PROPERTY
@given(st.lists(_pairing_message, max_size=10), st.sampled_from(["drop", "close"]))
def test_any_history_settles_into_valid_messages(
    history: list[dict[str, Any]], policy: str
) -> None:
    """Under 'drop' or 'close' any mix of calls and results renders as messages the tool rules accept; valid ones stay the same."""
    items = [MemoryItem(**message) for message in history]
    messages = to_messages(items, unanswered=policy)
    assert conversation_errors(messages) == []
    if not conversation_errors(history):
        assert messages == history
        assert to_messages(items) == history


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"role": "robot", "content": "x"}, r"role 'robot'"),
        ({"role": "user"}, r"has no content"),
        ({"role": "user", "content": 3}, r"content 3"),
        ({"role": "user", "content": []}, r"non-empty list"),
        ({"role": "tool", "content": "x"}, r"tool_call_id"),
        ({"role": "user", "content": "x", "tool_calls": []}, r"only assistant messages call tools"),
        ({"role": "assistant", "tool_calls": [{"id": 1}]}, r"tool call 0"),
        ({"role": "assistant", "tool_calls": [_fn("a"), _fn("a")]}, r"two tool calls with id 'a'"),
        (
            {"role": "assistant", "tool_calls": [{**_fn("a"), "extra": 1}]},
            r"with no other keys",
        ),
        ({"role": "user", "content": [{"text": "no type"}]}, r"content part 0 has type None"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": "u"}]},
            r"content part 0 needs a dict 'image_url'",
        ),
        (
            {"role": "user", "content": [{"type": "video", "video": {}}]},
            r"part 0 has type 'video'",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "x", "cache": True}]},
            r"unknown keys 'cache'",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}],
            },
            r"detail 'max'",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "ogg"}}],
            },
            r"audio format 'ogg'",
        ),
        ({"role": "user", "content": [{"type": "file", "file": {}}]}, r"needs 'file'"),
        (
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            r"\(system\) content part 0 has type 'image_url'; a system message takes parts of type 'text'",
        ),
        (
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            r"\(assistant\) content part 0 has type 'image_url'",
        ),
        (
            {
                "role": "tool",
                "tool_call_id": "c",
                "content": [{"type": "image_url", "image_url": {"url": "u"}}],
            },
            r"\(tool\) content part 0 has type 'image_url'",
        ),
        (
            {"role": "user", "content": "x", "refusal": "no"},
            r"only an assistant message carries a refusal",
        ),
        (
            {"role": "tool", "content": "x", "tool_call_id": "c", "name": "add"},
            r"a tool result carries no name",
        ),
        ({"role": "user", "content": "x", "audio": {"id": "a"}}, r"input_audio"),
        ({"role": "assistant", "content": "x", "audio": {"id": 5}}, r"has audio"),
        (
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            r"deprecated",
        ),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, r"only tool results carry one"),
        ({"role": "user", "content": "x", "name": 5}, r"has name 5"),
        ({"role": "user", "content": "x", 3: "y"}, r"non-string keys 3"),
    ],
)
def test_invalid_messages_are_refused(message: dict[str, Any], match: str) -> None:
    """from_messages refuses what the chat schema refuses, naming what is wrong."""
    with pytest.raises(FieldValidationError, match=match):
        from_messages([message])


def test_conversation_refuses_images_on_system_assistant_and_tool_messages() -> None:
    """add_system(..., images=...) and friends raise FieldValidationError and add nothing."""
    chat = Conversation()
    url = "https://example.org/a.png"
    with pytest.raises(FieldValidationError, match=r"system message takes parts of type 'text'"):
        chat.add_system("x", images=[url])
    with pytest.raises(FieldValidationError, match=r"assistant message takes parts"):
        chat.add_assistant("x", images=[url])
    with pytest.raises(FieldValidationError, match=r"tool message takes parts"):
        chat.add_tool("x", tool_call_id="c", images=[url])
    assert len(chat) == 0


def test_developer_role_and_assistant_audio_round_trip() -> None:
    """A developer message and an assistant message's audio are kept and sent back."""
    messages = [
        {"role": "developer", "content": "Answer in French."},
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
            ],
        },
        {"role": "assistant", "content": None, "audio": {"id": "audio_abc"}},
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]},
    ]
    assert to_messages(from_messages(messages)) == messages
    assert conversation_errors(messages) == []


def test_from_messages_is_all_or_nothing() -> None:
    """One bad message refuses the whole list, naming its position."""
    with pytest.raises(FieldValidationError, match=r"Message 1 has role 'bot'"):
        from_messages([{"role": "user", "content": "ok"}, {"role": "bot", "content": "no"}])


def test_bad_options_are_refused() -> None:
    """An unknown role or image mode for to_messages is refused."""
    with pytest.raises(FieldValidationError, match=r"role gave 'robot'"):
        to_messages([], role="robot")
    with pytest.raises(FieldValidationError, match=r"role gave 'tool'"):
        to_messages([], role="tool")
    with pytest.raises(FieldValidationError, match=r"unanswered='ignore'"):
        to_messages([], unanswered="ignore")
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


_hostile_value = st.one_of(
    st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2), st.just({})
)
_hostile_item = st.one_of(
    st.builds(
        lambda cid: MemoryItem(role="tool", content="r", tool_call_id=cid),
        st.one_of(st.sampled_from(["a", "b"]), _hostile_value),
    ),
    st.builds(
        lambda ids: MemoryItem(
            role="assistant",
            tool_calls=[
                {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for i in ids
            ],
        ),
        st.lists(st.one_of(st.sampled_from(["a", "b"]), _hostile_value), min_size=1, max_size=3),
    ),
    st.builds(lambda calls: MemoryItem(role="assistant", tool_calls=calls), _hostile_value),
    st.just(MemoryItem(role="user", content="u")),
)


@PROPERTY
@given(st.lists(_hostile_item, max_size=8), st.sampled_from(["refuse", "drop", "close"]))
def test_damaged_stored_tool_calls_raise_only_library_errors(
    items: list[MemoryItem], policy: str
) -> None:
    """Tool calls and results as a damaged store row may hold them: to_messages and the selectors raise only FieldValidationError."""
    from agents.memory import LastMessages

    memory = Memory(items)
    for render in (
        lambda: to_messages(memory, unanswered=policy),
        lambda: LastMessages(len(items), unanswered=policy)(memory),
        lambda: settle_tool_calls(memory.content, unanswered=policy),
    ):
        with contextlib.suppress(FieldValidationError):
            render()
