"""Conversations: messages by role, selectors, context keys and the scratchpad."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chat_schema import conversation_errors
from hypothesis import given
from hypothesis import strategies as st

from agents.memory import (
    BudgetExceededError,
    Conversation,
    EstimateCounter,
    FieldValidationError,
    InvalidSessionIdError,
    LastMessages,
    Memory,
    MemoryItem,
    TokenBudget,
    context_session_id,
    message_tokens,
)
from agents.memory.stores import check_session_id, open_memory


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}


def _chat() -> Conversation:
    conversation = Conversation()
    conversation.add_system("Answer briefly.")
    conversation.add_user("hi")
    conversation.add_assistant("hello")
    conversation.add_user("add 1")
    conversation.add_assistant(tool_calls=[_call("c1"), _call("c2")])
    conversation.add_tool("1", tool_call_id="c1")
    conversation.add_tool("1", tool_call_id="c2")
    conversation.add_assistant("1 and 1")
    return conversation


def test_add_by_role_writes_message_items() -> None:
    """add_user, add_assistant and add_tool append message items with the given fields."""
    conversation = _chat()
    assert [item["role"] for item in conversation.history] == [
        "system", "user", "assistant", "user", "assistant", "tool", "tool", "assistant",
    ]  # fmt: skip
    assert conversation.history[4]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert conversation.history[5]["tool_call_id"] == "c1"


def test_add_with_images_and_custom_fields() -> None:
    """Images become image_url parts after the text; custom fields and tags stay in the item only."""
    conversation = Conversation()
    item = conversation.add_user(
        "look", images=["https://example.org/a.png"], tags=["vision"], user_id=3
    )
    assert item["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
    ]
    assert item["user_id"] == 3
    assert item["tags"] == ["vision"]
    assert conversation.messages() == [{"role": "user", "content": item["content"]}]


def test_add_with_parts_images_and_name() -> None:
    """Content parts and images combine; a name is sent with the message."""
    conversation = Conversation()
    parts = [{"type": "text", "text": "two pictures"}]
    item = conversation.add_user(parts, images=["https://example.org/a.png"], name="ann")
    assert item["content"][0] == parts[0]
    assert conversation.messages()[0]["name"] == "ann"
    image_only = conversation.add_user(None, images=["https://example.org/b.png"])  # type: ignore[arg-type]
    assert image_only["content"] == [
        {"type": "image_url", "image_url": {"url": "https://example.org/b.png"}}
    ]


def test_add_messages_is_all_or_nothing() -> None:
    """add_messages appends checked chat messages, or none of them."""
    conversation = Conversation()
    conversation.add_messages(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    with pytest.raises(FieldValidationError, match=r"Message 1"):
        conversation.add_messages(
            [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]
        )
    assert len(conversation) == 2


def test_orphan_tool_results_stand_alone() -> None:
    """Tool results without a calling assistant message are their own groups."""
    conversation = Conversation(
        Memory(
            [
                MemoryItem(role="tool", content="x", tool_call_id="gone"),
                MemoryItem(role="user", content="y"),
            ]
        )
    )
    assert [item["content"] for item in conversation.select(LastMessages(1))] == ["y"]
    assert len(conversation.select(LastMessages(2))) == 2


def test_selector_bounds_are_checked() -> None:
    """A negative or non-int bound is refused."""
    with pytest.raises(ValueError, match=r"k must be an int >= 0, got -1"):
        LastMessages(-1)
    with pytest.raises(ValueError, match=r"max_tokens must be an int >= 0, got 1.5"):
        TokenBudget(1.5)  # type: ignore[arg-type]


def test_invalid_message_adds_nothing() -> None:
    """A message the chat schema refuses raises and leaves the history unchanged."""
    conversation = _chat()
    with pytest.raises(FieldValidationError, match=r"role 'robot'"):
        conversation.add("robot", "beep")
    with pytest.raises(FieldValidationError, match=r"tool_call_id"):
        conversation.add("tool", "5")
    assert len(conversation) == 8


def test_last_user_message() -> None:
    """last_user_message gives the newest user message, or None."""
    assert _chat().last_user_message()["content"] == "add 1"  # type: ignore[index]
    assert Conversation().last_user_message() is None


def test_tags() -> None:
    """tag adds each tag once; tagged finds the messages."""
    conversation = _chat()
    first = conversation.history[1]
    conversation.tag(first, "greeting", "greeting", "smalltalk")
    conversation.tag(first, "greeting")
    assert first["tags"] == ["greeting", "smalltalk"]
    assert conversation.tagged("smalltalk") == [first]


def test_messages_are_valid_chat_messages() -> None:
    """Every selection renders as messages the API schema accepts."""
    conversation = _chat()
    for selector in [None, LastMessages(3), LastMessages(5), TokenBudget(30), TokenBudget(1000)]:
        assert conversation_errors(conversation.messages(selector)) == []


def test_last_messages_keeps_tool_groups_whole() -> None:
    """LastMessages stops before a tool group that does not fit, instead of splitting it."""
    conversation = _chat()
    roles = [m["role"] for m in conversation.messages(LastMessages(4))]
    assert roles == ["system", "assistant"]
    roles = [m["role"] for m in conversation.messages(LastMessages(5))]
    assert roles == ["system", "assistant", "tool", "tool", "assistant"]


def test_last_messages_without_system() -> None:
    """include_system=False does not pin the opening system message."""
    conversation = _chat()
    assert [m["content"] for m in conversation.messages(LastMessages(1, include_system=False))] == [
        "1 and 1"
    ]


def test_system_messages_over_the_limit_raise() -> None:
    """Opening system messages that alone break the bound raise BudgetExceededError."""
    with pytest.raises(
        BudgetExceededError, match=r"1 opening system messages alone cost 1 messages"
    ):
        _chat().select(LastMessages(0))


def test_token_budget_charges_images() -> None:
    """An image part costs the counter's image tokens."""
    counter = EstimateCounter(image_tokens=100)
    plain = MemoryItem(role="user", content=[{"type": "text", "text": "look"}])
    with_image = MemoryItem(
        role="user",
        content=[
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4000}},
        ],
    )
    assert message_tokens(with_image, counter) == message_tokens(plain, counter) + 100


def test_user_written_selector() -> None:
    """Any function of the memory is a selector."""
    conversation = _chat()

    def user_only(memory: Memory) -> list[MemoryItem]:
        return memory.select(lambda item: item["role"] == "user")

    assert [m["content"] for m in conversation.messages(user_only)] == ["hi", "add 1"]


_kinds = st.lists(st.sampled_from(["user", "assistant", "calls", "system"]), max_size=12)


def _build(kinds: list[str]) -> Conversation:
    conversation = Conversation()
    for index, kind in enumerate(kinds):
        if kind == "calls":
            ids = [f"c{index}a", f"c{index}b"]
            conversation.add_assistant(tool_calls=[_call(i) for i in ids])
            for call_id in ids:
                conversation.add_tool("ok", tool_call_id=call_id)
        else:
            conversation.add(kind, f"{kind} {index} " * index)
    return conversation


@given(_kinds, st.integers(0, 20), st.integers(0, 400))
def test_selectors_take_a_gapless_suffix_within_bounds(
    kinds: list[str], k: int, tokens: int
) -> None:
    """Selections are the opening system messages plus a whole-group suffix, within the bound, valid for the API."""
    conversation = _build(kinds)
    history = conversation.history.content
    opening = 0
    while opening < len(history) and history[opening]["role"] == "system":
        opening += 1
    counter = EstimateCounter()
    for selector, cost, limit in [
        (LastMessages(k), lambda item: 1, k),
        (TokenBudget(tokens), lambda item: message_tokens(item, counter), tokens),
    ]:
        try:
            chosen = conversation.select(selector)
        except BudgetExceededError:
            assert sum(cost(item) for item in history[:opening]) > limit
            continue
        assert sum(cost(item) for item in chosen) <= limit
        rest = chosen[opening:]
        assert chosen[:opening] == history[:opening]
        assert rest == history[len(history) - len(rest) :] or not rest
        assert conversation_errors(conversation.messages(selector)) == []


def test_context_session_id_is_stable_and_valid() -> None:
    """The id of a context ignores key order, is a valid session id, and depends on value types."""
    one = context_session_id({"chat_id": 42, "user": "ann"})
    assert one == context_session_id({"user": "ann", "chat_id": 42})
    assert check_session_id(one) == one
    assert one.startswith("chat-")
    assert one != context_session_id({"chat_id": "42", "user": "ann"})
    assert one != context_session_id({"chat_id": 42, "user": "ann"}, prefix="bot")


def test_context_session_id_follows_the_documented_mapping() -> None:
    """The id is the prefix and the SHA-256 of the sorted compact JSON, as documented."""
    digest = hashlib.sha256(b'{"chat_id":42,"user":"ann"}').hexdigest()
    assert context_session_id({"user": "ann", "chat_id": 42}) == f"chat-{digest}"


def test_context_session_id_matches_in_another_process() -> None:
    """A new interpreter computes the same id (no hash randomisation)."""
    code = "from agents.memory import context_session_id; print(context_session_id({'chat_id': 42, 'user': 'ann'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == context_session_id({"chat_id": 42, "user": "ann"})


@given(
    st.dictionaries(
        st.text(max_size=5),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
        min_size=1,
        max_size=3,
    ),
    st.dictionaries(
        st.text(max_size=5),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
        min_size=1,
        max_size=3,
    ),
)
def test_different_contexts_get_different_ids(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two contexts share an id exactly when they are the same keys with the same typed values."""
    same = a.keys() == b.keys() and all(type(a[k]) is type(b[k]) and a[k] == b[k] for k in a)
    assert (context_session_id(a) == context_session_id(b)) == same


@pytest.mark.parametrize(
    ("context", "prefix", "match"),
    [
        ({}, "chat", r"non-empty dict"),
        ({1: "x"}, "chat", r"Context key 1 is a int"),
        ({"a": [1]}, "chat", r"Context key 'a' has value \[1\]"),
        ({"a": float("nan")}, "chat", r"has value nan"),
        ({"a": 1}, "", r"prefix=''"),
        ({"a": 1}, "a b", r"characters a store does not accept"),
    ],
)
def test_bad_contexts_are_refused(context: Any, prefix: str, match: str) -> None:
    """Contexts and prefixes that cannot make a stable id are refused with the reason."""
    with pytest.raises(InvalidSessionIdError, match=match):
        context_session_id(context, prefix=prefix)


def test_for_context_gives_the_same_conversation_back(tmp_path: Path) -> None:
    """The same context keys reopen the same history in a store; other keys get another."""
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    with Conversation.for_context(url, {"chat_id": 42, "user": "ann"}) as chat:
        chat.add_user("remember 7")
    with Conversation.for_context(url, {"user": "ann", "chat_id": 42}) as chat:
        assert chat.last_user_message()["content"] == "remember 7"  # type: ignore[index]
    with Conversation.for_context(url, {"chat_id": 43, "user": "ann"}) as chat:
        assert len(chat) == 0


def test_for_context_in_another_process(tmp_path: Path) -> None:
    """A conversation written by one process is read back by another."""
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    code = (
        "import sys; from agents.memory import Conversation\n"
        "with Conversation.for_context(sys.argv[1], {'chat_id': 42}) as chat:\n"
        "    chat.add_user('from the child')\n"
    )
    subprocess.run([sys.executable, "-c", code, url], check=True)
    with Conversation.for_context(url, {"chat_id": 42}) as chat:
        assert chat.messages() == [{"role": "user", "content": "from the child"}]


def test_scratchpad_is_apart_and_cleared_per_request() -> None:
    """Steps go to the scratchpad, never into the messages, and a new request clears them."""
    conversation = _chat()
    conversation.scratchpad.add_memory_item(MemoryItem(step=1, action="search"))
    assert all(m["role"] != "user" or m["content"] != "search" for m in conversation.messages())
    assert len(conversation.messages()) == 8
    conversation.new_request()
    assert len(conversation.scratchpad) == 0


def test_kept_steps_survive_requests_and_processes(tmp_path: Path) -> None:
    """With keep_steps the scratchpad is stored beside the history and not cleared."""
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    with Conversation.for_context(url, {"chat_id": 1}, keep_steps=True) as chat:
        chat.scratchpad.add_memory_item(MemoryItem(step=1, action="search"))
        chat.new_request()
        assert len(chat.scratchpad) == 1
        steps_session = chat.scratchpad.session_id
    assert steps_session == context_session_id({"chat_id": 1}) + ".steps"
    with open_memory(url, steps_session) as steps:
        assert steps[0]["action"] == "search"


def test_for_context_closes_the_store_it_opened_on_failure(tmp_path: Path) -> None:
    """An open store given to for_context is left open; a bad context opens nothing."""
    with pytest.raises(InvalidSessionIdError):
        Conversation.for_context(tmp_path / "c.db", {"a": object()})
    from agents.memory.stores import open_store

    with open_store(tmp_path / "c.db") as store:
        with Conversation.for_context(store, {"a": 1}) as chat:
            chat.add_user("x")
        assert store.count(context_session_id({"a": 1})) == 1


def test_repr_names_the_session() -> None:
    """The repr shows the session id and the counts."""
    assert repr(Conversation()) == "Conversation(session_id=None, messages=0, steps=0)"


def test_search_finds_messages_by_their_text(tmp_path: Path) -> None:
    """Conversation.search ranks messages by their text, text parts included, on a stored history too."""
    with Conversation.for_context(f"sqlite://{tmp_path / 'chats.db'}", {"chat_id": 1}) as chat:
        chat.add_user("Where is the quarterly report saved?")
        chat.add_assistant("In the shared drive, folder Finance.")
        chat.add_user([{"type": "text", "text": "Open the quarterly budget too"}])
        chat.add_assistant("Done.", tool_hint="quarterly")
        hits = chat.search("quarterly", k=5)
        assert [hit.item["role"] for hit in hits] == ["user", "user"]
        everywhere = chat.search("quarterly", keys=None, k=5)
        assert sorted(hit.item["role"] for hit in everywhere) == ["assistant", "user", "user"]
