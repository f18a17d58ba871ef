"""Memory for any agent: a kvmemory store served over the Model Context Protocol.

``kvmemory mcp STORE`` (or :class:`MemoryServer` in code) lets an agent in
any process, framework or language keep its steps and conversations in a
kvmemory store: the OpenAI Agents SDK, Claude Desktop and other MCP clients,
smolagents' MCP tools, TypeScript agents. The server speaks MCP over stdio,
or over streamable HTTP (bound to 127.0.0.1 unless a token guards it), with
the official ``mcp`` SDK (``pip install 'kvmemory[mcp]'``), imported when a
server is built.

What a client gets:

* **Tools**: ``record_step``, ``record_message``, ``recent_history`` (the
  newest items under a token budget, chosen by :class:`~agents.memory.prompt.Window`),
  ``search`` (keyword; semantic and hybrid when the server has an embedder),
  ``recall`` (hits merged with the newest steps), ``list_sessions``,
  ``show_steps`` and, unless the server is read-only, ``delete_step``. Each
  declares an ``outputSchema``; its structured content validates against it,
  and its text block holds the same JSON.
* **Resources**: ``kvmemory://session/{id}`` (a session's counts) and
  ``kvmemory://session/{id}/last`` (its last steps), with change
  notifications when any process appends to or deletes from the session,
  and ``notifications/resources/list_changed`` when a session appears in
  the scope or goes (the server polls the store).
* **Prompts**: ``history_so_far``, the recent history of a session as one
  user message.

A server serves one session, the sessions whose ids start with a prefix, or
a whole store (a :class:`Scope`), and never reads or writes outside it,
whatever a client sends. Every argument is checked before anything is
written: a bad one (a wrong type, a session outside the scope, NaN or an
infinity in recorded fields, a step past 2**53) gets an error that names it,
and the store is left as it was.

The package's modules each hold one part: the limits, the scope, the
argument checks, the image policy, the tools' schemas, their operations,
the resources, the change poller, the prompt, and the server that wires
them to the SDK.
"""

from __future__ import annotations

from agents.integrations.mcp._limits import (
    DEFAULT_HTTP_PORT,
    DEFAULT_LAST,
    DEFAULT_POLL_SECONDS,
    MAX_FIELDS,
    MAX_FIELDS_BYTES,
    MAX_IMAGE_BYTES,
    MAX_IMAGES,
    MAX_ITEMS,
    MAX_K,
    MAX_KEY_CHARS,
    MAX_QUERY_CHARS,
    MAX_SESSIONS,
    MAX_STEP,
    MAX_TOKENS,
)
from agents.integrations.mcp._scope import Scope, ToolArgumentError
from agents.integrations.mcp._server import MemoryServer

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
    "MemoryServer",
    "Scope",
    "ToolArgumentError",
]
