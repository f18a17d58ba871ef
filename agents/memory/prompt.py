"""Turn a memory into model input: projections, windows, token counts and renderers.

This module is the public face of prompt building; each responsibility lives
in its own module (``_keys``, ``_window``, ``_tokens``, ``_images``,
``_render``) and every public name is importable from here. The pieces, in
the order a prompt is built:

* **Keys.** Which fields go in, under which names. A plain string takes one
  field; :class:`Key` adds aliases (``Key("step", aliases=("Step",))`` reads
  either style) and a rename; a mapping ``{"step": ("step", "Step")}`` says the
  same thing in one line.
* **Projection.** :func:`project` picks items (all, some steps, the last *n*, a
  predicate), keeps the chosen keys and returns fresh dicts in memory order. A
  key that no selected item holds is reported with :class:`UnmatchedKeyWarning`
  (or :class:`UnmatchedKeyError` when ``strict=True``), because a silently
  empty prompt is the commonest bug in agent code.
* **Windows.** :class:`Window` bounds a projection by item count, total
  tokens, text tokens, images and image tokens. Items are taken newest first and returned in memory order; pinned
  items are always kept; items of one group (consecutive items with the same
  ``group_by`` value) are kept or dropped together. Choosing a window reads
  only the items it keeps plus one group, so its cost follows the window, not
  the memory (pinning by predicate is the exception: it reads every item).
* **Compaction.** A window with a :class:`Compaction` folds the items it
  leaves out into one summary (a summariser you supply extends it), pinned
  into later prompts and stored in the session's metadata.
* **Token counters.** :class:`EstimateCounter` is the offline default;
  :class:`TiktokenCounter` uses the optional ``tiktoken`` extra. Images cost a
  flat ``image_tokens``, or by their size with :class:`TileImageCost`
  (OpenAI) or :class:`AreaImageCost` (Anthropic).
* **Renderers.** :func:`render_json` (compact UTF-8 JSON through the codec),
  :func:`render_text` (a template per item, for plain text or Markdown) and
  :func:`render_parts` (chat content parts with images as ``data:`` URLs, read
  from disk only when the parts are built); :func:`prompt_cost` costs exactly
  what a renderer returned.
"""

from __future__ import annotations

from agents.memory._compact import (
    DEFAULT_SUMMARY_KEY,
    Compaction,
    Summarizer,
    Summary,
    TallySummarizer,
    read_summary,
)
from agents.memory._images import (
    DEFAULT_IMAGE_KEYS,
    MAX_IMAGE_BYTES,
    image_data_url,
    image_refs,
    image_size,
)
from agents.memory._keys import Key, KeysLike, latest_value, values_of
from agents.memory._render import (
    PromptCost,
    estimate_cost,
    prompt_cost,
    render_json,
    render_parts,
    render_text,
    ufo_json,
)
from agents.memory._tokens import (
    DEFAULT_IMAGE_TOKENS,
    AreaImageCost,
    EstimateCounter,
    ImageCost,
    TiktokenCounter,
    TileImageCost,
    TokenCounter,
    count_image_tokens,
    count_tokens,
)
from agents.memory._window import GroupBy, Window, WindowResult, project, select_window

__all__ = [
    "DEFAULT_IMAGE_KEYS",
    "DEFAULT_IMAGE_TOKENS",
    "DEFAULT_SUMMARY_KEY",
    "MAX_IMAGE_BYTES",
    "AreaImageCost",
    "Compaction",
    "EstimateCounter",
    "GroupBy",
    "ImageCost",
    "Key",
    "KeysLike",
    "PromptCost",
    "Summarizer",
    "Summary",
    "TallySummarizer",
    "TiktokenCounter",
    "TileImageCost",
    "TokenCounter",
    "Window",
    "WindowResult",
    "count_image_tokens",
    "count_tokens",
    "estimate_cost",
    "image_data_url",
    "image_refs",
    "image_size",
    "latest_value",
    "project",
    "prompt_cost",
    "read_summary",
    "render_json",
    "render_parts",
    "render_text",
    "select_window",
    "ufo_json",
    "values_of",
]
