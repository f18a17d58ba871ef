"""Write a session as one self-contained HTML timeline: a lane per agent, a card per step."""

from __future__ import annotations

import base64
import hashlib
import html
import importlib.resources
import math
import os
import pathlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from agents.agent._replay import ERROR_KEYS, value_text
from agents.memory import _codec
from agents.memory._item import MemoryItem
from agents.memory.exceptions import ImageReadError
from agents.memory.memory import Memory
from agents.memory.prompt import DEFAULT_IMAGE_KEYS, image_data_url, image_refs

__all__ = ["replay_html"]

_CHART_POINTS: Final = (
    600  # more points than this are merged (max per bucket): the chart is ~1000 px wide
)
_DOTS: Final = 80  # lines of at most this many points get a dot per point
_PAD: Final = 5.0  # room above and below the lines for the dots
_NO_LANE: Final = "(no agent)"
_SLOT: Final = re.compile(r"\{\{(title|chart|data|csp)\}\}")
# The file page fetches nothing; the live page (``kvmemory serve``) talks only to its own server.
FILE_CSP: Final = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
)
_MAIN_SCRIPT: Final = re.compile(r"<script>(.*?)</script>", re.DOTALL)
# A URL scheme of two or more letters ("C:\\shot.png" stays a Windows path).
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


def replay_html(
    memory: Memory | Iterable[MemoryItem],
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
    cost_key: str = "cost",
    tokens_key: str = "prompt_tokens",
    label_key: str | None = "agent",
) -> pathlib.Path:
    """Write a session as one self-contained HTML page, a timeline to look at in a browser.

    The page has a lane per agent (the ``label_key`` field) and a card per
    step with all its fields; long values are folded, error fields
    (``error``, ``errors``, ``exception``) marked, and the step's images shown
    as thumbnails that open full size. A chart plots ``cost_key`` and
    ``tokens_key`` per step. Steps can be filtered by agent, by field and by
    text. The page fetches nothing: styles, script and images are inside it
    (image paths are read now; an image that cannot be read is named on its
    card; ``http(s)`` URLs are shown as links, not loaded). Every value is
    shown as text, never as markup. It renders only the steps in view, so a
    session of 10,000 steps opens in about a second.

    Args:
        memory: A ``Memory`` or any iterable of items.
        path: The HTML file to write (replaced if it exists).
        title: The page title (default: the session id and item count).
        image_keys: The fields that hold image paths or URLs.
        cost_key: The numeric field charted and summed as cost.
        tokens_key: The numeric field charted as prompt tokens.
        label_key: The field naming the agent that took the step (its lane),
            or ``None`` for a single lane.

    Returns:
        The path written.

    Raises:
        OSError: if the file cannot be written.
    """
    items = list(memory)
    step_key = memory.step_key if isinstance(memory, Memory) else "step"
    session = getattr(memory, "session_id", None)
    count = f"{len(items):,} item" + ("" if len(items) == 1 else "s")
    heading = title or f"Session {session or ''}".rstrip() + f": {count}"
    payload = _Payload(step_key, image_keys, cost_key, tokens_key, label_key)
    for position, item in enumerate(items):
        payload.add(position, item)
    page = _page(heading, payload)
    target = pathlib.Path(path)
    target.write_text(page, encoding="utf-8")
    return target


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


class _Payload:
    """The session as the page's script reads it: plain strings and numbers only."""

    def __init__(
        self,
        step_key: str,
        image_keys: Sequence[str],
        cost_key: str,
        tokens_key: str,
        label_key: str | None,
    ) -> None:
        self.step_key = step_key
        self.image_keys = tuple(image_keys)
        self.cost_key = cost_key
        self.tokens_key = tokens_key
        self.label_key = label_key
        self.lanes: dict[str, int] = {}
        self.fields: dict[str, None] = {}
        self.steps: list[dict[str, Any]] = []
        self.images: list[str] = []
        self.image_index: dict[str, int] = {}
        self.costs: list[float | None] = []
        self.tokens: list[float | None] = []

    def add(self, position: int, item: MemoryItem) -> None:
        step = timeline_step(
            position,
            item,
            step_key=self.step_key,
            image_keys=self.image_keys,
            label_key=self.label_key,
            image=self._image,
        )
        label = step["l"]
        step["l"] = self.lanes.setdefault(label, len(self.lanes))
        for key, _text, _error in step["f"]:
            self.fields.setdefault(key, None)
        fields = item.to_dict()
        self.costs.append(_number(fields.get(self.cost_key)))
        self.tokens.append(_number(fields.get(self.tokens_key)))
        self.steps.append(step)

    def _image(self, ref: str) -> list[Any]:
        """Return ``[index of the embedded data URL, ref, ""]``, or ``[-1, ref, why]`` when not embedded."""
        lowered = ref.lower()
        if lowered.startswith(("http://", "https://")):
            return [-1, ref, "link"]
        if _SCHEME.match(ref) and not lowered.startswith("data:image/"):
            # javascript:, file: and the like are neither read as paths nor linked.
            return [-1, ref, "not a file path, an http(s) URL or an image data: URL"]
        if ref not in self.image_index:
            try:
                url = image_data_url(ref)
            except ImageReadError as exc:
                return [-1, ref, str(exc)]
            self.image_index[ref] = len(self.images)
            self.images.append(url)
        return [self.image_index[ref], ref, ""]

    def data(self) -> dict[str, Any]:
        return {
            "lanes": list(self.lanes),
            "fields": list(self.fields),
            "steps": self.steps,
            "images": self.images,
            "cost": self.cost_key,
            "tokens": self.tokens_key,
        }


def timeline_step(
    position: int,
    item: MemoryItem,
    *,
    step_key: str,
    image_keys: Sequence[str],
    label_key: str | None,
    image: Callable[[str], list[Any]],
) -> dict[str, Any]:
    """Return one item as the timeline's script reads it: plain strings and numbers only.

    ``{"p": position, "s": heading, "l": lane name, "k": class name or "",
    "f": [[key, text, 1 if an error field else 0], ...], "i": images}``;
    each image is what ``image(ref)`` makes of a reference found in
    ``image_keys`` (the file page embeds it, the live server links it:
    ``[where, ref, why not shown or ""]``) followed by the field's key, so
    an image that is not shown is named with its field, value and reason.
    """
    fields = item.to_dict()
    step = fields.pop(step_key, None)
    label = _NO_LANE
    if label_key is not None and label_key in fields:
        label = value_text(fields.pop(label_key)) or _NO_LANE
    images: list[list[Any]] = []
    for key in image_keys:
        refs = image_refs(fields[key]) if key in fields else []
        if refs:  # a field holding no image reference (a number, say) stays a plain field
            del fields[key]
            images += [[*image(ref), key] for ref in refs]
    shown = [
        [key, value_text(value), 1 if key in ERROR_KEYS and value else 0]
        for key, value in fields.items()
    ]
    kind = type(item).__name__
    return {
        "p": position,
        "s": f"step {value_text(step)}" if step is not None else f"item {position}",
        "l": label,
        "k": "" if kind == "MemoryItem" else kind,
        "f": shown,
        "i": images,
    }


def live_page(title: str, live: dict[str, Any], *, csp: str) -> tuple[str, str]:
    """Return the timeline page in live mode, and its Content-Security-Policy.

    The page starts empty and fetches its steps from the server named in
    ``live`` (see :mod:`agents.integrations.web`); ``csp`` is put in the
    page's own policy, with ``{script}`` replaced by the script's hash
    source (``'sha256-...'``), so no other inline script can run; the same
    policy is returned for the server to send as a header.
    """
    data = {
        "lanes": [],
        "fields": [],
        "steps": [],
        "images": [],
        "cost": "",
        "tokens": "",
        "live": live,
    }
    template = _template()
    found = _MAIN_SCRIPT.search(template)
    if found is None:  # pragma: no cover - the template in the package always has its script
        msg = "agents/agent/timeline.html has no script"
        raise RuntimeError(msg)
    digest = base64.b64encode(hashlib.sha256(found.group(1).encode("utf-8")).digest()).decode()
    policy = csp.replace("{script}", f"'sha256-{digest}'")
    parts = {
        "title": html.escape(title),
        "chart": "",
        "data": _script_json(data),
        "csp": html.escape(policy),
    }
    return _SLOT.sub(lambda match: parts[match.group(1)], template), policy


def _script_json(data: dict[str, Any]) -> str:
    """Return ``data`` as JSON that is safe inside a ``<script>`` element."""
    text = _codec.dumps(data).decode("utf-8")
    # "<" only occurs inside JSON strings, where \u003c means the same thing and
    # cannot close the script element; the two line separators are escaped for old parsers.
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def _series(name: str, values: Sequence[float | None], width: float, height: float) -> str:
    """Return an SVG line of ``values`` scaled to the box, merged to at most _CHART_POINTS points.

    Few points also get a dot each, so a short session's steps can be told
    apart. Fewer than two known values make no line: a lone dot in a corner
    says nothing the legend does not.
    """
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return ""
    top = max(known) or 1.0
    size = max(1, math.ceil(len(values) / _CHART_POINTS))
    points = []
    for start in range(0, len(values), size):
        bucket = [v for v in values[start : start + size] if v is not None]
        if not bucket:
            continue
        x = width * (start + size / 2) / len(values)
        y = _PAD + (height - 2 * _PAD) * (1 - max(bucket) / top)
        points.append((x, y))
    line = f'<polyline class="{name}" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}"/>'
    if len(points) > _DOTS:
        return line
    return line + "".join(
        f'<circle class="{name}" cx="{x:.1f}" cy="{y:.1f}" r="3"/>' for x, y in points
    )


def _chart(payload: _Payload) -> str:
    """Return an inline SVG chart of cost and prompt tokens per step, or "" when there are none.

    A series with a single value is named in the legend but not drawn.
    """
    width, height = 1000.0, 56.0
    known_costs = [v for v in payload.costs if v is not None]
    known_tokens = [v for v in payload.tokens if v is not None]
    legend = []
    lines = []
    if known_tokens:
        legend.append(
            f'<span class="key tokens">{html.escape(payload.tokens_key)} '
            f"(max {max(known_tokens):,.0f})</span>"
        )
        lines.append(_series("tokens", payload.tokens, width, height))
    if known_costs:
        legend.append(
            f'<span class="key cost">{html.escape(payload.cost_key)} '
            f"(max {max(known_costs):.4g}, total {sum(known_costs):.6g})</span>"
        )
        lines.append(_series("cost", payload.costs, width, height))
    if not legend:
        return ""
    if not any(lines):
        return '<figure id="chart"><figcaption>' + " ".join(legend) + "</figcaption></figure>"
    return (
        '<figure id="chart"><figcaption>'
        + " ".join(legend)
        + "<span class=hint>click to jump to a step</span></figcaption>"
        + f'<svg viewBox="0 0 {width:.0f} {height:.0f}" '
        + 'role="img" aria-label="cost and prompt tokens per step">'
        + "".join(lines)
        + "</svg></figure>"
    )


def _page(title: str, payload: _Payload) -> str:
    return _fill(
        {
            "title": html.escape(title),
            "chart": _chart(payload),
            "data": _script_json(payload.data()),
            "csp": FILE_CSP,
        }
    )


def _fill(parts: dict[str, str]) -> str:
    # One pass, so a title holding "{{data}}" stays text.
    return _SLOT.sub(lambda match: parts[match.group(1)], _template())


def _template() -> str:
    source = importlib.resources.files("agents.agent").joinpath("timeline.html")
    return source.read_text(encoding="utf-8")
