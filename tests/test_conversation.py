"""Conversations: messages by role, selectors, context keys and the scratchpad."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chat_schema import conversation_errors, conversations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.memory import (
    BudgetExceededError,
    Conversation,
    ConversationInfo,
    EstimateCounter,
    FieldValidationError,
    InvalidArgumentError,
    InvalidSessionIdError,
    LastMessages,
    Memory,
    MemoryItem,
    TokenBudget,
    context_session_id,
    list_conversations,
    message_tokens,
)
from agents.memory.messages import NO_RESULT
from agents.memory.stores import check_session_id, open_memory, open_store


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


def test_orphan_tool_results_follow_the_unanswered_policy() -> None:
    """A tool result without a calling message is refused by default, left out under 'drop' or 'close'."""
    conversation = Conversation(
        Memory(
            [
                MemoryItem(role="tool", content="x", tool_call_id="gone"),
                MemoryItem(role="user", content="y"),
            ]
        )
    )
    assert [item["content"] for item in conversation.select(LastMessages(1))] == ["y"]
    with pytest.raises(FieldValidationError, match=r"call id 'gone' answers no call"):
        conversation.select(LastMessages(2))
    for policy in ("drop", "close"):
        chosen = conversation.select(LastMessages(2, unanswered=policy))
        assert [item["content"] for item in chosen] == ["y"]


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


# -- trimming as LangChain's trim_messages knows it -------------------------------------


def _turns() -> Conversation:
    chat = Conversation()
    chat.add_system("sys")
    chat.add_user("u1")
    chat.add_assistant("a1")
    chat.add_user("u2")
    chat.add_assistant("a2")
    return chat


def _contents(chat: Conversation, selector: Any) -> list[Any]:
    return [item["content"] for item in chat.select(selector)]


def test_start_on_makes_the_history_start_on_a_role() -> None:
    """start_on='user' drops older groups until the first kept message is a user's (after the system message)."""
    chat = _turns()
    assert _contents(chat, LastMessages(3)) == ["sys", "u2", "a2"]
    assert _contents(chat, LastMessages(2)) == ["sys", "a2"]
    assert _contents(chat, LastMessages(2, start_on="user")) == ["sys"]
    assert _contents(chat, LastMessages(4, start_on=["user"])) == ["sys", "u2", "a2"]
    assert _contents(chat, TokenBudget(2000, start_on="user")) == ["sys", "u1", "a1", "u2", "a2"]


def test_end_on_drops_newer_groups_until_a_role() -> None:
    """end_on='user' ends the selection on the newest user message, before counting with 'last'."""
    chat = _turns()
    assert _contents(chat, LastMessages(3, end_on="user")) == ["sys", "a1", "u2"]
    assert _contents(chat, LastMessages(3, end_on=("user", "tool"))) == ["sys", "a1", "u2"]


def test_strategy_first_takes_the_oldest_messages() -> None:
    """strategy='first' takes the oldest groups that fit; end_on then trims its newest end."""
    chat = _turns()
    assert _contents(chat, LastMessages(3, strategy="first")) == ["sys", "u1", "a1"]
    assert _contents(chat, LastMessages(3, strategy="first", end_on="user")) == ["sys", "u1"]
    assert _contents(chat, LastMessages(2, strategy="first", include_system=False)) == [
        "sys",
        "u1",
    ]
    roles = [m["role"] for m in _chat().messages(LastMessages(5, strategy="first"))]
    assert roles == ["system", "user", "assistant", "user"]  # the tool group does not fit


def test_include_system_false_treats_system_messages_like_others() -> None:
    """include_system=False neither keeps nor charges the opening system message."""
    chat = _turns()
    assert _contents(chat, LastMessages(2, include_system=False)) == ["u2", "a2"]
    assert _contents(chat, LastMessages(5, include_system=False)) == ["sys", "u1", "a1", "u2", "a2"]


def test_exclude_prompt_leaves_the_current_user_message_out() -> None:
    """exclude_prompt leaves the newest message out of selection and count when it is a user's."""
    chat = _turns()
    chat.add_user("the question being answered")
    assert _contents(chat, LastMessages(3, exclude_prompt=True)) == ["sys", "u2", "a2"]
    counter = EstimateCounter()
    budget = sum(message_tokens(item, counter) for item in chat.history.content[:-1])
    assert len(chat.select(TokenBudget(budget, exclude_prompt=True))) == 5
    assert len(chat.select(TokenBudget(budget))) < 6
    chat.add_assistant("answer")
    assert _contents(chat, LastMessages(2, exclude_prompt=True)) == ["sys", "answer"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"strategy": "middle"}, r"strategy='middle' must be one of \['last', 'first'\]"),
        ({"start_on": "robot"}, r"start_on=\('robot',\) must be a role"),
        ({"end_on": []}, r"end_on=\(\) must be a role"),
        ({"strategy": "first", "start_on": "user"}, r"start_on applies to strategy='last'"),
        ({"unanswered": "ignore"}, r"unanswered='ignore' must be one of"),
        ({"include_system": 1}, r"include_system must be True or False"),
    ],
)
def test_bad_trimming_options_are_refused(options: dict[str, Any], match: str) -> None:
    """Unknown strategies, roles and policies are refused when the selector is made."""
    with pytest.raises(InvalidArgumentError, match=match):
        LastMessages(3, **options)


_broken_kinds = st.lists(
    st.sampled_from(["user", "assistant", "calls", "half", "unanswered", "orphan", "system"]),
    max_size=12,
)


def _build_broken(kinds: list[str]) -> Conversation:
    """A history as crashes and stray writes leave it: items written as they come, unchecked."""
    memory = Memory()
    for index, kind in enumerate(kinds):
        if kind in ("calls", "half", "unanswered"):
            ids = [f"c{index}a", f"c{index}b"]
            calls = [{**_call(i), "function": {"name": "add", "arguments": "{}"}} for i in ids]
            memory.add_memory_item(MemoryItem(role="assistant", tool_calls=calls))
            answered = {"calls": ids, "half": ids[:1], "unanswered": []}[kind]
            for call_id in answered:
                memory.add_memory_item(MemoryItem(role="tool", content="ok", tool_call_id=call_id))
        elif kind == "orphan":
            memory.add_memory_item(MemoryItem(role="tool", content="late", tool_call_id="c0a"))
        else:
            memory.add_memory_item(MemoryItem(role=kind, content=f"{kind} {index}"))
    return Conversation(memory)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _broken_kinds,
    st.integers(0, 20),
    st.sampled_from(["drop", "close"]),
    st.sampled_from(["last", "first"]),
    st.none() | st.sampled_from(["user", "assistant"]),
    st.booleans(),
)
def test_selections_of_broken_histories_are_valid_under_drop_and_close(
    kinds: list[str],
    k: int,
    policy: str,
    strategy: str,
    end_on: str | None,
    include_system: bool,
) -> None:
    """Every selection, under every trimming option, renders as messages the openai types and tool rules accept, within k."""
    chat = _build_broken(kinds)
    start_on = "user" if strategy == "last" and end_on == "assistant" else None
    selector = LastMessages(
        k,
        strategy=strategy,
        end_on=end_on,
        start_on=start_on,
        include_system=include_system,
        unanswered=policy,
    )
    try:
        chosen = chat.select(selector)
    except BudgetExceededError:
        return
    assert len(chosen) <= k
    assert conversation_errors(to_messages_of(chosen)) == []
    if end_on is not None and len(chosen) > 0 and chosen[-1]["role"] != "system":
        assert chosen[-1]["role"] in (end_on, "tool")


def test_end_on_sees_the_settled_group() -> None:
    """end_on judges a group as it will be sent: a dropped unanswered call does not make it end on 'assistant'."""
    chat = _build_broken(["user", "unanswered"])
    selector = LastMessages(1, end_on="assistant", include_system=False, unanswered="drop")
    assert chat.select(selector) == []
    closing = LastMessages(3, end_on="tool", include_system=False, unanswered="close")
    assert [item["role"] for item in chat.select(closing)] == ["assistant", "tool", "tool"]


def to_messages_of(items: list[MemoryItem]) -> list[dict[str, Any]]:
    from agents.memory import to_messages

    return to_messages(items)


def test_close_in_a_selector_counts_the_closing_message() -> None:
    """A closing no-result message made by a selector is a new item, counted against k."""
    memory = Memory(
        [
            MemoryItem(role="user", content="add"),
            MemoryItem(role="assistant", tool_calls=[_call("c1")]),
        ]
    )
    chat = Conversation(memory)
    with pytest.raises(FieldValidationError, match=r"call id 'c1'\) has no tool result"):
        chat.messages(LastMessages(5))
    chosen = chat.select(LastMessages(2, unanswered="close"))
    assert [item["role"] for item in chosen] == ["assistant", "tool"]
    assert chosen[1]["content"] == NO_RESULT
    assert chosen[0] is memory[1]
    assert [item["role"] for item in chat.select(LastMessages(1, unanswered="close"))] == []


# -- conversations users can find and manage --------------------------------------------


def test_context_is_kept_with_the_conversation(tmp_path: Path) -> None:
    """for_context keeps the context keys in the session metadata; a later open reads them back."""
    url = f"sqlite://{tmp_path / 'chats.db'}"
    with Conversation.for_context(url, {"chat_id": 42, "user": "ann"}) as chat:
        assert chat.context == {"chat_id": 42, "user": "ann"}
        chat.add_user("hi")
    with open_store(url, read_only=True) as store:
        info = store.session_info(context_session_id({"chat_id": 42, "user": "ann"}))
        assert info is not None
        assert info.metadata == {
            "context": {"chat_id": 42, "user": "ann"},
            "context_prefix": "chat",
        }
    assert Conversation().context is None


def test_list_conversations_of_a_context_subset_in_every_store(store_url: str) -> None:
    """list_conversations finds all chats of user 'ann' (and only hers) in every kind of store."""
    with open_store(store_url) as store:
        for chat_id, user in [(1, "ann"), (2, "bob"), (3, "ann"), (4, "ann")]:
            with Conversation.for_context(store, {"chat_id": chat_id, "user": user}) as chat:
                chat.add_user(f"hello from {user}")
        with Conversation.for_context(store, {"chat_id": 5, "user": "ann"}, prefix="bot"):
            pass
        with Conversation.for_context(
            store, {"chat_id": 6, "user": "ann"}, keep_steps=True
        ) as chat:
            chat.scratchpad.add_memory_item(MemoryItem(step=1))
        store.set_metadata("chat-forged", {"context": {"user": "ann"}, "context_prefix": "chat"})
        found = list_conversations(store, {"user": "ann"})
        assert sorted(info.context["chat_id"] for info in found) == [1, 3, 4, 6]
        assert all(isinstance(info, ConversationInfo) for info in found)
        assert found[0].session_id == context_session_id(found[0].context)
        assert [i.context["chat_id"] for i in list_conversations(store, {"user": "bob"})] == [2]
        assert list_conversations(store, {"user": "ann", "chat_id": "1"}) == []
        assert len(list_conversations(store)) == 5
        assert [i.context["chat_id"] for i in list_conversations(store, prefix="bot")] == [5]


def test_list_conversations_opens_a_url_read_only(tmp_path: Path) -> None:
    """Given a URL, list_conversations opens the store read-only and closes it."""
    url = f"sqlite://{tmp_path / 'chats.db'}"
    with Conversation.for_context(url, {"user": "ann", "chat_id": 1}) as chat:
        chat.add_user("x")
    (info,) = list_conversations(url, {"user": "ann"})
    assert info.context == {"user": "ann", "chat_id": 1}
    with pytest.raises(InvalidSessionIdError):
        list_conversations(url, {"user": [1]})


def test_messages_get_ids_and_can_be_found_and_deleted() -> None:
    """Each added message gets an id; get finds it, delete removes it (whole tool groups by default)."""
    chat = _chat()
    ids = [item["id"] for item in chat.history]
    assert len(set(ids)) == len(ids) == 8
    assert chat.get(ids[1]) is chat.history[1]
    assert chat.get("no such id") is None
    assert chat.delete(ids[1]) == 1
    assert chat.get(ids[1]) is None
    call = chat.history[3]  # the assistant message that calls two tools
    assert chat.delete(chat.history[4]) == 3  # one result takes its call and the other result
    assert call not in chat.history.content
    assert conversation_errors(chat.messages()) == []
    assert chat.delete("no such id") == 0


def test_delete_without_whole_groups_and_repair() -> None:
    """whole_groups=False deletes exactly what is named; repair_tool_calls then closes the call."""
    chat = _chat()
    assert chat.delete(chat.history[5], whole_groups=False) == 1
    with pytest.raises(FieldValidationError, match=r"call id 'c1'\) has no tool result"):
        chat.messages()
    assert chat.repair_tool_calls() == 1
    assert chat.repair_tool_calls() == 0
    messages = chat.messages()
    assert conversation_errors(messages) == []
    assert {"role": "tool", "content": NO_RESULT, "tool_call_id": "c1"} in messages


def test_delete_selected_removes_what_a_selector_picks() -> None:
    """delete_selected(LastMessages(2, include_system=False)) deletes the last two messages."""
    chat = _turns()
    assert chat.delete_selected(LastMessages(2, include_system=False)) == 2
    assert [m["content"] for m in chat.messages()] == ["sys", "u1", "a1"]


def test_last_system_message() -> None:
    """last_system_message gives the newest system message, or None."""
    chat = _turns()
    assert chat.last_system_message()["content"] == "sys"  # type: ignore[index]
    chat.add_system("new rules")
    assert chat.last_system_message()["content"] == "new rules"  # type: ignore[index]
    assert Conversation().last_system_message() is None


def test_a_second_handle_sees_new_messages_after_refresh(tmp_path: Path) -> None:
    """Two handles on one stored conversation: the second sees the first's messages after refresh()."""
    url = f"sqlite://{tmp_path / 'chats.db'}"
    with (
        Conversation.for_context(url, {"chat_id": 1}) as first,
        Conversation.for_context(url, {"chat_id": 1}) as second,
    ):
        first.add_user("written by the first handle")
        assert len(second) == 0  # stale until refreshed
        assert second.refresh() == 1
        assert second.last_user_message()["content"] == "written by the first handle"  # type: ignore[index]
        assert second.refresh() == 0
    assert Conversation().refresh() == 0


def test_a_following_handle_is_never_stale(tmp_path: Path) -> None:
    """With follow=True each read first takes in what other handles appended."""
    url = f"sqlite://{tmp_path / 'chats.db'}"
    with (
        Conversation.for_context(url, {"chat_id": 1}) as writer,
        Conversation.for_context(url, {"chat_id": 1}, follow=True) as reader,
    ):
        writer.add_system("rules")
        assert reader.last_system_message()["content"] == "rules"  # type: ignore[index]
        first = writer.add_user("one")
        assert reader.messages() == [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "one"},
        ]
        writer.add_user("two")
        assert reader.last_user_message()["content"] == "two"  # type: ignore[index]
        assert reader.get(first["id"])["content"] == "one"  # type: ignore[index]
        assert len(reader.select(LastMessages(10))) == 3


def test_repair_tool_calls_after_a_crash_is_durable(tmp_path: Path) -> None:
    """A call left unanswered by a killed process is repaired in the store; a new process reads valid messages."""
    url = f"sqlite://{tmp_path / 'chats.db'}"
    code = (
        "import os, signal, sys; from agents.memory import Conversation\n"
        "chat = Conversation.for_context(sys.argv[1], {'chat_id': 1})\n"
        "chat.add_user('add 1 and 1')\n"
        "chat.add_assistant(tool_calls=[{'id': 'c1', 'type': 'function', 'function': {'name': 'add', 'arguments': '{}'}}])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, url], check=False)
    assert done.returncode == -9
    with Conversation.for_context(url, {"chat_id": 1}) as chat:
        with pytest.raises(FieldValidationError, match=r"repair_tool_calls"):
            chat.messages()
        assert len(chat.messages(unanswered="drop")) == 1
        assert chat.repair_tool_calls("drop") == 1
    with Conversation.for_context(url, {"chat_id": 1}) as chat:
        assert chat.messages() == [{"role": "user", "content": "add 1 and 1"}]
    with pytest.raises(FieldValidationError, match=r"takes 'close' or 'drop'"):
        Conversation().repair_tool_calls("refuse")


RICH = [
    {"role": "developer", "content": "Answer in French."},
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {
        "role": "user",
        "name": "ann",
        "content": [
            {"type": "text", "text": "Look"},
            {
                "type": "image_url",
                "image_url": {"url": "HTTPS://example.org/a.png", "detail": "low"},
            },
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "mp3"}},
            {"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            {"id": "c2", "type": "custom", "custom": {"name": "sh", "input": "ls"}},
        ],
    },
    {"role": "tool", "content": [{"type": "text", "text": "2"}], "tool_call_id": "c2"},
    {"role": "tool", "content": "1", "tool_call_id": "c1"},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
    {"role": "assistant", "content": "Voilà.", "audio": {"id": "audio_1"}, "name": "bot"},
]


def test_messages_round_trip_through_every_store(store_url: str) -> None:
    """Every message kind goes into a stored conversation and comes out identical to a new handle, valid for the API."""
    assert conversation_errors(RICH) == []
    with open_store(store_url) as store:
        with Conversation.for_context(store, {"chat_id": 1}) as chat:
            chat.add_messages(RICH)
        with Conversation.for_context(store, {"chat_id": 1}) as chat:
            assert chat.messages() == RICH
            for selector in [
                LastMessages(3),
                TokenBudget(60, start_on="user"),
                LastMessages(4, strategy="first"),
            ]:
                assert conversation_errors(chat.messages(selector)) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(),
    st.integers(0, 12),
    st.integers(0, 300),
    st.sampled_from(["last", "first"]),
    st.none() | st.sampled_from(["user", "assistant", "tool"]),
    st.none() | st.sampled_from(["user", "assistant"]),
    st.booleans(),
    st.booleans(),
)
def test_selections_of_any_valid_conversation_are_valid_and_gapless(
    messages: list[dict[str, Any]],
    k: int,
    tokens: int,
    strategy: str,
    end_on: str | None,
    start_on: str | None,
    include_system: bool,
    exclude_prompt: bool,
) -> None:
    """Over any valid conversation, every trimming option selects a run of whole groups the openai types and tool rules accept."""
    chat = Conversation()
    chat.add_messages(messages)
    history = chat.history.content
    options: dict[str, Any] = {
        "strategy": strategy,
        "end_on": end_on,
        "start_on": start_on if strategy == "last" else None,
        "include_system": include_system,
        "exclude_prompt": exclude_prompt,
    }
    counter = EstimateCounter()
    for selector, cost, limit in [
        (LastMessages(k, **options), lambda item: 1, k),
        (TokenBudget(tokens, **options), lambda item: message_tokens(item, counter), tokens),
    ]:
        try:
            chosen = chat.select(selector)
        except BudgetExceededError:
            continue
        assert sum(cost(item) for item in chosen) <= limit
        sent = chat.messages(selector)
        assert conversation_errors(sent) == []
        positions = [next(i for i, h in enumerate(history) if h is item) for item in chosen]
        assert positions == sorted(positions)
        opening = 0
        while (
            include_system
            and opening < len(history)
            and history[opening]["role"] in ("system", "developer")
        ):
            opening += 1
        rest = positions[opening:] if positions[:opening] == list(range(opening)) else positions
        assert rest == list(range(rest[0], rest[-1] + 1)) if rest else True
        if exclude_prompt and history and history[-1]["role"] == "user" and len(history) > opening:
            assert len(history) - 1 not in positions
        if end_on is not None and rest:
            assert history[rest[-1]]["role"] == end_on
        if start_on is not None and strategy == "last" and rest:
            assert history[rest[0]]["role"] == start_on


def test_token_budget_costs_data_url_images_by_size(tmp_path: Path) -> None:
    """With an image_cost formula, a data: URL image is costed by its size; a path kept as given is never opened and costs the flat rate."""
    import base64

    from agents.memory.prompt import TileImageCost, count_image_tokens

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    counter = EstimateCounter(image_tokens=999, image_cost=TileImageCost())
    text = MemoryItem(role="user", content=[{"type": "text", "text": "look"}])
    for ref, expected in [
        (url, count_image_tokens((1, 1), counter)),
        (str(tmp_path / "no-such.png"), 999),
        ("https://example.org/a.png", 999),
    ]:
        item = MemoryItem(
            role="user",
            content=[
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": ref}},
            ],
        )
        assert message_tokens(item, counter) == message_tokens(text, counter) + expected
    assert count_image_tokens((1, 1), counter) != 999
