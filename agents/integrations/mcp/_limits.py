"""The limits of what one MCP client may send or ask for, and the server's defaults."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_HTTP_PORT",
    "DEFAULT_LAST",
    "DEFAULT_POLL_SECONDS",
    "MAX_FIELDS",
    "MAX_FIELDS_BYTES",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "MAX_ITEMS",
    "MAX_K",
    "MAX_KEY_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_SESSIONS",
    "MAX_STEP",
    "MAX_TOKENS",
]

DEFAULT_POLL_SECONDS: Final = 1.0
"""How often a server looks for changes other processes made to the sessions in its scope."""
DEFAULT_HTTP_PORT: Final = 8765
"""The port ``kvmemory mcp --http`` listens on unless told otherwise."""
MAX_FIELDS_BYTES: Final = 1024 * 1024
"""The largest item a client may record, as compact JSON (images not counted)."""
MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024
"""The largest image a client may attach, decoded (a data URL) or on disk (a path)."""
MAX_QUERY_CHARS: Final = 2000
"""The longest search query a client may send."""
MAX_IMAGES: Final = 8
"""The most images one recorded item may attach."""
MAX_FIELDS: Final = 200
"""The most fields one recorded item may hold."""
MAX_KEY_CHARS: Final = 200
"""The longest field name a client may use."""
MAX_K: Final = 50
"""The most hits one search returns."""
MAX_ITEMS: Final = 500
"""The most items one call returns (history, step ranges, listings)."""
MAX_TOKENS: Final = 200_000
"""The largest token budget a client may ask for."""
MAX_SESSIONS: Final = 1000
"""The most sessions a listing, a search or the change poller goes through."""
MAX_STEP: Final = 2**53
"""The largest step number (and the negative of the smallest) a client may send: beyond it
JSON numbers lose whole numbers in most clients."""
DEFAULT_LAST: Final = 20
"""How many items ``kvmemory://session/{id}/last`` shows."""
