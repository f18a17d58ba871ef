"""Chat-message benchmark: schema checks and selectors against plain dict copies.

Builds a chat of 20,000 messages (user turns, assistant replies, assistant
tool calls with their results) and times, best of several runs, in one
process:

* ``from_messages`` (each message checked against the chat schema) against
  copying the dicts (``[dict(m) for m in messages]``): the price of the
  checks;
* ``to_messages`` of the whole history (checks and tool-call rules) against
  copying the message keys of each item: the price of sending checked
  messages;
* ``LastMessages(50)`` and ``TokenBudget(2000, start_on="user")`` with their
  ``to_messages``, against ``to_messages`` of the whole history, and per
  message kept against per message of the whole: a selection should cost in
  proportion to what it keeps, not to the history (a small constant per
  message: grouping, and for ``TokenBudget`` counting tokens, cost a few
  microseconds more than rendering alone).

Prints one line per case: both times and their ratio.

Run: .venv/bin/python benchmarks/bench_messages.py [--messages N] [--repeat R]
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import best

from agents.memory import Conversation, LastMessages, TokenBudget, from_messages, to_messages
from agents.memory.messages import MESSAGE_KEYS


def make_messages(n: int) -> list[dict[str, Any]]:
    """Return about ``n`` chat messages: user turns, replies, and tool calls with their results."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You answer briefly."}]
    turn = 0
    while len(messages) < n:
        messages.append({"role": "user", "content": f"Question {turn}: what is {turn} + {turn}?"})
        if turn % 3 == 0:
            call = {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": "add", "arguments": f'{{"a": {turn}, "b": {turn}}}'},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "content": str(2 * turn), "tool_call_id": call["id"]})
        messages.append({"role": "assistant", "content": f"{turn} + {turn} = {2 * turn}."})
        turn += 1
    return messages


def line(name: str, ours: float, raw: float) -> None:
    """Print one case: both times in microseconds and their ratio."""
    ratio = ours / raw
    print(f"{name:<46} {ours * 1e6:10.1f} us  vs {raw * 1e6:10.1f} us  ratio {ratio:8.3f}")


def main() -> None:
    """Run the cases and print their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    messages = make_messages(args.messages)
    chat = Conversation()
    chat.add_messages(messages)
    items = chat.history.content

    checked = best(lambda: from_messages(messages), args.repeat)
    copied = best(lambda: [dict(m) for m in messages], args.repeat)
    line("from_messages / dict copies", checked, copied)

    sent = best(lambda: to_messages(items), args.repeat)
    keys = best(
        lambda: [{k: item[k] for k in MESSAGE_KEYS if k in item} for item in items], args.repeat
    )
    line("to_messages (whole history) / key copies", sent, keys)

    last = LastMessages(50)
    budget = TokenBudget(2_000, start_on="user")
    for name, selector in [
        ("LastMessages(50)", last),
        ("TokenBudget(2000, start_on='user')", budget),
    ]:
        chosen = best(lambda selector=selector: chat.messages(selector), args.repeat)
        line(f"{name} + to_messages / whole", chosen, sent)
        # Per message kept against per message of the whole history: near 1
        # when a selection costs in proportion to what it keeps.
        kept = len(chat.messages(selector))
        line(f"  per message ({kept} kept) / per message", chosen / kept, sent / len(items))


if __name__ == "__main__":
    main()
