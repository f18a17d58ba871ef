"""The resources a server offers: ``kvmemory://session/{id}`` and ``kvmemory://session/{id}/last[/n]``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from agents.integrations.mcp._checks import brief
from agents.integrations.mcp._limits import DEFAULT_LAST, MAX_ITEMS
from agents.integrations.mcp._operations import Operations
from agents.integrations.mcp._render import entry, markdown
from agents.integrations.mcp._scope import ToolArgumentError
from agents.integrations.mcp._worker import StoreWorker
from agents.memory import AgentMemoryError
from agents.memory.stores import check_session_id

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.context import ServerRequestContext

__all__ = ["URI_PREFIX", "Resources"]

URI_PREFIX: Final = "kvmemory://session/"
"""Where every resource URI of a server starts."""
_LAST_URI: Final = re.compile(r"kvmemory://session/([^/?#]+)/last(?:/([0-9]{1,6}))?")
_SESSION_URI: Final = re.compile(r"kvmemory://session/([^/?#]+)")
_MIME: Final = "text/markdown"


class Resources:
    """Resource URIs and the ``resources/list``, ``resources/templates/list`` and ``resources/read`` handlers.

    Args:
        operations: The tools' work, for the scope and the sessions in it.
        worker: Runs store calls off the event loop.
    """

    def __init__(self, operations: Operations, worker: StoreWorker) -> None:
        self.operations = operations
        self.worker = worker

    def session_of(self, uri: str) -> tuple[str, int | None]:
        """Return the session a resource URI names and, for a ``last`` URI, how many items.

        Raises:
            ToolArgumentError: naming ``uri`` for a URI that is not a kvmemory
                resource or names a session outside the scope.
        """
        match = _LAST_URI.fullmatch(uri)
        if match is not None:
            count = DEFAULT_LAST if match.group(2) is None else int(match.group(2))
            if not 1 <= count <= MAX_ITEMS:
                raise ToolArgumentError("uri", f"asks for {count} items; ask for 1 to {MAX_ITEMS}.")
            return self.operations.in_scope(match.group(1), "uri"), count
        match = _SESSION_URI.fullmatch(uri)
        if match is None:
            raise ToolArgumentError(
                "uri",
                f"{brief(uri)} is not a kvmemory resource; use kvmemory://session/ID or kvmemory://session/ID/last.",
            )
        return self.operations.in_scope(match.group(1), "uri"), None

    def watched_session(self, uri: str) -> str | None:
        """Return the session a resource URI names, or ``None`` if it names none in scope."""
        match = _LAST_URI.fullmatch(uri) or _SESSION_URI.fullmatch(uri)
        if match is None:
            return None
        try:
            name = check_session_id(match.group(1))
        except AgentMemoryError:
            return None
        # A listener naming a session outside the scope hears nothing of it.
        return name if self.operations.scope.allows(name) else None

    def text(self, uri: str) -> str:
        """Return the Markdown a resource reads as: a session's counts, or its last items."""
        session, count = self.session_of(uri)
        store = self.operations.store
        if count is not None:
            records = store.tail(session, count, on_unknown_class="base")
            entries = [entry(session, record) for record in records]
            return markdown(entries, empty=f"Session {session!r} holds no items yet.")
        summary = store.summary(session)
        lines = [
            f"# Session {session}",
            f"items: {summary.items}",
            f"steps: {summary.steps}",
            f"first step: {brief(summary.first_step)}",
            f"last step: {brief(summary.last_step)}",
            "fields: " + ", ".join(f"{key} ({n})" for key, n in summary.fields.items()),
        ]
        return "\n".join(lines)

    # -- handlers -------------------------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourcesResult:
        """List two resources per session in scope: its counts and its last steps."""
        import mcp_types as types

        sessions = await self.worker.run(self.operations.sessions, None)
        resources = []
        for name in sessions:
            resources.append(
                types.Resource(
                    name=name,
                    uri=f"{URI_PREFIX}{name}",
                    description=f"Counts of session {name!r}: items, steps, fields.",
                    mime_type=_MIME,
                )
            )
            resources.append(
                types.Resource(
                    name=f"{name} (last steps)",
                    uri=f"{URI_PREFIX}{name}/last",
                    description=f"The last {DEFAULT_LAST} items of session {name!r}.",
                    mime_type=_MIME,
                )
            )
        return types.ListResourcesResult(resources=resources)

    async def list_templates(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListResourceTemplatesResult:
        """List the two URI templates: a session, and its last n steps."""
        import mcp_types as types

        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="session",
                    uri_template=f"{URI_PREFIX}{{session}}",
                    description="Counts of a session: items, steps, fields.",
                    mime_type=_MIME,
                ),
                types.ResourceTemplate(
                    name="last steps",
                    uri_template=f"{URI_PREFIX}{{session}}/last/{{n}}",
                    description=f"The last n (1 to {MAX_ITEMS}) items of a session.",
                    mime_type=_MIME,
                ),
            ]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        """Read one resource as Markdown."""
        import mcp_types as types

        uri = str(params.uri)
        text = await self.worker.guarded(self.text, uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=_MIME, text=text)]
        )
