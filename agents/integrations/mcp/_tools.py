"""The ``tools/list`` and ``tools/call`` handlers: a tool's schema in, its operation run, JSON out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agents.integrations.mcp._checks import check_no_unknown
from agents.integrations.mcp._operations import Operations
from agents.integrations.mcp._render import json_text
from agents.integrations.mcp._schemas import ToolSpec, tool_specs
from agents.integrations.mcp._scope import ToolArgumentError
from agents.integrations.mcp._worker import StoreWorker
from agents.memory import AgentMemoryError, InvalidQueryError, InvalidSessionIdError

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.context import ServerRequestContext

__all__ = ["Tools"]


class Tools:
    """The tools of one server, and the handlers that list and call them.

    Args:
        operations: The tools' work.
        worker: Runs store calls off the event loop.
        read_only: Offer no tool that writes.
    """

    def __init__(self, operations: Operations, worker: StoreWorker, *, read_only: bool) -> None:
        self.operations = operations
        self.worker = worker
        self.read_only = read_only
        self.specs = tool_specs(
            one_session=operations.scope.session is not None,
            read_only=read_only,
            semantic=operations.embedder is not None,
        )
        runs: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
            "record_step": operations.record_step,
            "record_message": operations.record_message,
            "recent_history": operations.recent_history,
            "search": operations.search,
            "recall": operations.recall,
            "list_sessions": operations.list_sessions,
            "show_steps": operations.show_steps,
            "delete_step": operations.delete_step,
        }
        self._found: dict[str, tuple[ToolSpec, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
            spec.name: (spec, runs[spec.name]) for spec in self.specs
        }

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        """List the tools with their input and output schemas and hints."""
        import mcp_types as types

        tools = []
        for spec in self.specs:
            annotations = types.ToolAnnotations(
                read_only_hint=not spec.writes,
                destructive_hint=spec.destructive,
                idempotent_hint=not spec.writes,
                open_world_hint=False,
            )
            tools.append(
                types.Tool(
                    name=spec.name,
                    description=spec.description,
                    input_schema=spec.input_schema,
                    output_schema=spec.output_schema,
                    annotations=annotations,
                )
            )
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        """Check a call's arguments, run its operation, and answer with JSON (text and structured)."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        if params.name not in self._found:
            hint = " (this server is read-only)" if self.read_only else ""
            names = ", ".join(sorted(self._found))
            msg = f"Unknown tool {params.name!r}{hint}; the tools are: {names}."
            raise MCPError(types.INVALID_PARAMS, msg)
        spec, run = self._found[params.name]
        args = params.arguments or {}
        try:
            if not isinstance(args, dict):
                raise ToolArgumentError("arguments", "must be a JSON object.")
            check_no_unknown(args, spec.input_schema, spec.name)
            structured = await self.worker.run(run, args)
        except ToolArgumentError as exc:
            return _error_result(str(exc), exc.argument)
        except AgentMemoryError as exc:
            return _error_result(str(exc), _argument_of(exc))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json_text(structured))],
            structured_content=structured,
        )


def _error_result(message: str, argument: str | None) -> mcp_types.CallToolResult:
    import mcp_types as types

    error: dict[str, Any] = {"message": message}
    if argument is not None:
        error["argument"] = argument
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)],
        structured_content={"error": error},
        is_error=True,
    )


def _argument_of(exc: AgentMemoryError) -> str | None:
    if isinstance(exc, InvalidSessionIdError):
        return "session"
    if isinstance(exc, InvalidQueryError):
        return "query"
    return None
