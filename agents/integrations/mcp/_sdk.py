"""The MCP SDK's server, told that a kvmemory server's resource list changes.

Imported only once the SDK is known to be installed.
"""

from __future__ import annotations

from typing import Any

from mcp.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions

__all__ = ["ListChangingServer"]


class ListChangingServer(Server[Any]):
    """A low-level SDK server whose handshake announces ``resources.listChanged``.

    A 2026 client learns it from ``subscriptions/listen`` being served; a
    handshake-era client reads it from ``initialize``, whose options the SDK
    builds here for every transport (stdio and each HTTP session).
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """Return the SDK's initialization options, with ``resources.listChanged`` true by default."""
        options = notification_options or NotificationOptions(resources_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)
