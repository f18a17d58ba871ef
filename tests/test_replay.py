"""Tests for replay's terminal safety: control characters in session data print as text."""

from __future__ import annotations

import io
import json
import re

from hypothesis import given
from hypothesis import strategies as st

from agents.agent import escape_controls, format_replay, replay
from agents.memory import Memory, MemoryItem

# An OSC 52 clipboard write (ESC ] 52 ; c ; base64 BEL), a 7-bit CSI that clears
# the screen and an 8-bit CSI (0x9b) that does the same.
OSC52 = "\x1b]52;c;aGVsbG8=\x07"
CSI = "\x1b[2J\x9b2J"
OSC52_SHOWN = "\\x1b]52;c;aGVsbG8=\\x07"
CSI_SHOWN = "\\x1b[2J\\x9b2J"
# What a terminal acts on: C0 but tab and newline, DEL, C1.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def hostile_session() -> Memory:
    """A session whose id, keys and values (also label, error and image fields) hold sequences."""
    memory = Memory(session_id=f"run{OSC52}{CSI}")
    memory.add_memory_item(
        MemoryItem(
            step=1,
            agent=f"host{OSC52}",
            error=f"boom{CSI}",
            screenshot=f"shot{OSC52}.png",
            **{f"key{OSC52}{CSI}": f"value{OSC52}{CSI}", "cost": 0.5},
        )
    )
    return memory


def test_escape_controls_writes_c0_del_and_c1_as_hex() -> None:
    """ESC, BEL, CR, NUL, DEL and the 8-bit CSI print as \\xNN; other text is unchanged."""
    assert escape_controls("a\x1b\x07\r\x00\x7f\x9bz é ✓") == "a\\x1b\\x07\\x0d\\x00\\x7f\\x9bz é ✓"


def test_escape_controls_keeps_tab_and_newline() -> None:
    """Tab and newline stay: the layout of the output uses them."""
    assert escape_controls("a\tb\nc") == "a\tb\nc"


def test_escape_controls_json_stays_valid_json() -> None:
    """json=True writes \\u00NN, so the document still decodes to the same strings."""
    document = json.dumps(["x\x9by\x7f"], ensure_ascii=False)
    shown = escape_controls(document, json=True)
    assert not RAW_CONTROL.search(shown)
    assert json.loads(shown) == ["x\x9by\x7f"]


@given(st.text())
def test_escape_controls_leaves_no_control_character(text: str) -> None:
    """No output of escape_controls holds a character a terminal acts on."""
    assert not RAW_CONTROL.search(escape_controls(text))
    assert not RAW_CONTROL.search(escape_controls(text, json=True))


def test_format_replay_escapes_session_id_keys_and_values() -> None:
    """format_replay prints OSC 52 and CSI sequences of the id, keys and values as text."""
    text = format_replay(hostile_session())
    assert not RAW_CONTROL.search(text)
    assert text.splitlines() == [
        f"Session run{OSC52_SHOWN}{CSI_SHOWN}: 1 item",
        f"── step 1 · host{OSC52_SHOWN} · error ──",
        f"! error: boom{CSI_SHOWN}",
        f"  key{OSC52_SHOWN}{CSI_SHOWN}: value{OSC52_SHOWN}{CSI_SHOWN}",
        "  cost: 0.5",
        f"  images attached: shot{OSC52_SHOWN}.png",
        "total cost: 0.5",
    ]


def test_format_replay_escapes_title() -> None:
    """A title given by the caller is escaped too."""
    assert format_replay([], title=f"t{OSC52}") == f"t{OSC52_SHOWN}"


def test_replay_plain_escapes_sequences() -> None:
    """replay(color=False) writes the same escaped text as format_replay."""
    out = io.StringIO()
    replay(hostile_session(), file=out, color=False)
    assert out.getvalue() == format_replay(hostile_session()) + "\n"


def test_replay_color_escapes_sequences() -> None:
    """replay(color=True) keeps its own colour codes but prints the session's sequences as text."""
    out = io.StringIO()
    replay(hostile_session(), file=out, color=True)
    text = out.getvalue()
    assert OSC52 not in text
    assert "\x9b" not in text
    assert "\x1b[2J" not in text
    assert "\x07" not in text
    assert f"value{OSC52_SHOWN}{CSI_SHOWN}" in text
    assert f"Session run{OSC52_SHOWN}{CSI_SHOWN}" in text
