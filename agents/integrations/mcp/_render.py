"""Items as clients read them: JSON entries for tools, Markdown for resources and prompts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import orjson

from agents.integrations.mcp._checks import brief
from agents.memory import MemoryItem
from agents.memory.prompt import render_json, render_text
from agents.memory.stores import StoredRecord

__all__ = ["STEP_KEYS", "entry", "json_text", "markdown", "plain"]

STEP_KEYS: Final = ("step", "Step")
"""The keys a heading takes an item's step from (UFO's sessions name it 'Step')."""


def plain(item: MemoryItem | Mapping[str, Any]) -> dict[str, Any]:
    """Return an item's fields as JSON values (the codec's type tags for the rest)."""
    value = orjson.loads(render_json([item]))[0]
    return cast("dict[str, Any]", value)


def entry(session: str, record: StoredRecord, **extra: Any) -> dict[str, Any]:
    """Return one stored item as a tool returns it: session, seq, any ``extra`` (a score), fields."""
    return {"session": session, "seq": record.seq, **extra, "fields": plain(record.item)}


def json_text(structured: Mapping[str, Any]) -> str:
    """Return a tool's structured content as the compact JSON its text block carries."""
    return orjson.dumps(structured).decode()


def markdown(entries: Sequence[Mapping[str, Any]], *, empty: str) -> str:
    """Return items as text a model reads well: a heading per item, then ``- key: value`` lines."""
    if not entries:
        return empty
    parts = []
    for one in entries:
        fields = one["fields"]
        key = next((k for k in STEP_KEYS if k in fields), None)
        step = brief(fields[key]) if key is not None else "-"
        head = f"## {one['session']} step {step} (seq {one['seq']}"
        if "score" in one:
            head += f", score {one['score']:.3f}"
        head += ")"
        body = render_text([{k: v for k, v in fields.items() if k != key}])
        parts.append(f"{head}\n{body}" if body else head)
    return "\n\n".join(parts)
