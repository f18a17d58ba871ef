"""Print a session step by step: fields, errors, costs and attached images."""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib
import re
import sys
import uuid
from collections.abc import Iterable, Sequence
from typing import IO, Any, Final, Literal

from agents.memory._item import MemoryItem
from agents.memory.exceptions import missing_dependency
from agents.memory.memory import Memory
from agents.memory.prompt import DEFAULT_IMAGE_KEYS, image_refs, ufo_json

__all__ = ["escape_controls", "format_replay", "replay"]

ERROR_KEYS: Final[tuple[str, ...]] = ("error", "errors", "exception")
"""Fields shown as errors."""

_WIDTH: Final = 200
_Kind = Literal["header", "field", "error", "cost", "images", "footer"]


# The characters a terminal acts on instead of showing: C0 controls (ESC starts
# an escape sequence, BEL ends an OSC such as a clipboard write, CR rewrites the
# line), DEL, and C1 controls (0x9b is a one-byte CSI). Tab and newline stay:
# the layout of the output uses them and they cannot start a sequence.
_CONTROL: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _text_escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_controls(text: str, *, json: bool = False) -> str:
    """Return ``text`` with the control characters a terminal would act on written out.

    Session data can hold anything, including escape sequences that change a
    terminal's title or colours, write to its clipboard (OSC 52) or move the
    cursor to hide lines. Each C0 control character but tab and newline, DEL
    and each C1 control character is replaced by its escape, ``\\x1b`` for
    ESC, so it is shown and never run. Text without them is returned as it is.

    Args:
        text: The text about to be printed.
        json: ``True`` when ``text`` is JSON: write ``\\u001b`` instead, which
            keeps the document valid and decodes to the same strings.

    Returns:
        The text, safe to print to a terminal.
    """
    return _CONTROL.sub(_json_escape if json else _text_escape, text)


# Values whose str() reads better than their JSON type tag (a date, a path).
_SHOWN_AS_TEXT: Final = (
    dt.date,
    dt.time,
    dt.timedelta,
    uuid.UUID,
    decimal.Decimal,
    pathlib.PurePath,
)


def value_text(value: Any) -> str:
    """Return a field value in full, as the replays show it.

    Strings stay as they are; dates, times, UUIDs, decimals and paths show as
    ``str()``; anything else as JSON the way UFO's prompts write it.
    """
    if isinstance(value, str) and value:
        return value
    if isinstance(value, _SHOWN_AS_TEXT):
        return str(value)
    return ufo_json(value)


def fold(text: str, width: int = _WIDTH) -> str:
    """Return ``text`` cut to ``width`` characters, the last one an ellipsis, as the replays show long values."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _shown(value: Any) -> str:
    return fold(value_text(value)).replace("\n", "\n      ")


def _lines(
    items: Iterable[MemoryItem],
    *,
    title: str,
    step_key: str,
    image_keys: Sequence[str],
    cost_key: str,
    label_key: str | None,
) -> list[tuple[_Kind, str]]:
    out: list[tuple[_Kind, str]] = [("header", title)]
    total = 0.0
    has_cost = False
    for position, item in enumerate(items):
        fields = item.to_dict()
        step = fields.pop(step_key, None)
        label = f"step {step}" if step is not None else f"item {position} (no step)"
        kind = type(item).__name__
        tags = [] if kind == "MemoryItem" else [kind]
        if label_key is not None and isinstance(fields.get(label_key), str):
            tags.insert(0, fields.pop(label_key))
        if any(fields.get(key) for key in ERROR_KEYS):
            # Marked in the words too, not only in red: plain output and logs keep it.
            tags.append("error")
        out.append(("header", f"── {' · '.join([label, *tags])} ──"))
        images = [ref for key in image_keys if key in fields for ref in image_refs(fields.pop(key))]
        for key, value in fields.items():
            if key in ERROR_KEYS and value:
                out.append(("error", f"! {key}: {_shown(value)}"))
            elif (
                key == cost_key and isinstance(value, (int, float)) and not isinstance(value, bool)
            ):
                total += value
                has_cost = True
                out.append(("cost", f"  {key}: {value}"))
            else:
                out.append(("field", f"  {key}: {_shown(value)}"))
        if images:
            out.append(("images", f"  images attached: {', '.join(images)}"))
    if has_cost:
        out.append(("footer", f"total {cost_key}: {round(total, 6)}"))
    return out


def format_replay(
    memory: Memory | Iterable[MemoryItem],
    *,
    title: str | None = None,
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
    cost_key: str = "cost",
    label_key: str | None = "agent",
) -> str:
    """Return a readable, plain-text account of a session, one block per item.

    Each block starts with ``── step N ──`` (then the item's ``label_key``
    value, and its class when it is a typed item) and lists the item's fields; error
    fields (``error``, ``errors``, ``exception``) and the cost are marked, the
    images an item attaches are listed by path, and the total cost ends it.

    Args:
        memory: A ``Memory`` or any iterable of items.
        title: The first line (default: the session id and item count).
        image_keys: The fields that hold image paths or URLs.
        cost_key: The numeric field summed as the session's cost.
        label_key: A string field shown in the block header instead of as a
            field (``"agent"`` names who took the step in multi-agent sessions).
    """
    lines = _session_lines(memory, title, image_keys, cost_key, label_key)
    return "\n".join(text for _, text in lines)


def _session_lines(
    memory: Memory | Iterable[MemoryItem],
    title: str | None,
    image_keys: Sequence[str],
    cost_key: str,
    label_key: str | None,
) -> list[tuple[_Kind, str]]:
    """Return the styled lines of a replay, control characters escaped, for both outputs."""
    items = list(memory)
    lines = _lines(
        items,
        title=title or _title(memory, len(items)),
        step_key=memory.step_key if isinstance(memory, Memory) else "step",
        image_keys=image_keys,
        cost_key=cost_key,
        label_key=label_key,
    )
    return [(kind, escape_controls(text)) for kind, text in lines]


def _title(memory: Memory | Iterable[MemoryItem], count: int) -> str:
    session = getattr(memory, "session_id", None)
    name = f"Session {session}" if session else "Session"
    return f"{name}: {plural(count, 'item')}"


def plural(count: int, noun: str) -> str:
    """Return ``"1 item"``, ``"2 items"``: the count with its noun in the right number."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


_STYLES: Final[dict[_Kind, str]] = {
    "header": "bold cyan",
    "field": "",
    "error": "bold red",
    "cost": "yellow",
    "images": "magenta",
    "footer": "bold",
}


def replay(
    memory: Memory | Iterable[MemoryItem],
    *,
    file: IO[str] | None = None,
    color: bool | None = None,
    title: str | None = None,
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
    cost_key: str = "cost",
    label_key: str | None = "agent",
) -> None:
    """Print :func:`format_replay` of ``memory``, in colour when rich is installed.

    Args:
        memory: A ``Memory`` or any iterable of items.
        file: Where to print (default ``sys.stdout``).
        color: ``True`` to colour (needs the ``kvmemory[rich]`` extra), ``False``
            for plain text, ``None`` to colour only a terminal when rich is installed.
        title: The first line.
        image_keys: The fields that hold image paths or URLs.
        cost_key: The numeric field summed as the session's cost.
        label_key: A string field shown in the block header (see :func:`format_replay`).

    Raises:
        MissingDependencyError: if ``color=True`` and rich is not installed.
    """
    out = file if file is not None else sys.stdout
    lines = _session_lines(memory, title, image_keys, cost_key, label_key)
    console = _console(out, color)
    if console is None:
        out.write("".join(text + "\n" for _, text in lines))
        return
    from rich.text import Text

    for kind, text in lines:
        console.print(Text(text, style=_STYLES[kind]))


def _console(out: IO[str], color: bool | None) -> Any:
    if color is False:
        return None
    try:
        from rich.console import Console
    except ImportError as exc:
        if color:
            raise missing_dependency("rich", "rich") from exc
        return None
    if color is None and not (hasattr(out, "isatty") and out.isatty()):
        return None
    return Console(
        file=out, force_terminal=True, color_system="standard", highlight=False, soft_wrap=True
    )
