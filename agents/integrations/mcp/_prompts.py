"""The prompt a server offers: ``history_so_far``, a session's recent history as one user message."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from agents.integrations.mcp._checks import brief, check_integer, check_no_unknown
from agents.integrations.mcp._limits import MAX_ITEMS, MAX_TOKENS
from agents.integrations.mcp._operations import Operations
from agents.integrations.mcp._render import markdown
from agents.integrations.mcp._scope import ToolArgumentError
from agents.integrations.mcp._worker import StoreWorker

if TYPE_CHECKING:
    import mcp_types
    from mcp.server.context import ServerRequestContext

__all__ = ["Prompts"]


class Prompts:
    """The ``prompts/list`` and ``prompts/get`` handlers.

    Args:
        operations: The tools' work, for the scope and the history window.
        worker: Runs store calls off the event loop.
    """

    def __init__(self, operations: Operations, worker: StoreWorker) -> None:
        self.operations = operations
        self.worker = worker

    def history(self, args: dict[str, Any]) -> str:
        """Return the text of ``history_so_far`` for the prompt's arguments (strings, as MCP sends them)."""
        check_no_unknown(args, {"properties": {"session": 0, "max_tokens": 0}}, "history_so_far")
        session = cast("str", self.operations.session(args))
        budget = args.get("max_tokens", "2000")
        try:
            max_tokens = int(budget)
        except (TypeError, ValueError):
            raise ToolArgumentError(
                "max_tokens", f"must be a whole number, got {brief(budget)}."
            ) from None
        check_integer({"max_tokens": max_tokens}, "max_tokens", None, 1, MAX_TOKENS)
        entries, _, dropped = self.operations.window(session, max_tokens, MAX_ITEMS, None)
        older = f" ({dropped} older items left out)" if dropped else ""
        body = markdown(entries, empty="(no items yet)")
        return f"The history of session {session} so far{older}:\n\n{body}"

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListPromptsResult:
        """List the one prompt, ``history_so_far``."""
        import mcp_types as types

        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name="history_so_far",
                    description="The history of a session so far (its newest items under a token budget), as one message.",
                    arguments=[
                        types.PromptArgument(
                            name="session",
                            description="The session id.",
                            required=self.operations.scope.session is None,
                        ),
                        types.PromptArgument(
                            name="max_tokens",
                            description="The token budget (default 2000).",
                            required=False,
                        ),
                    ],
                )
            ]
        )

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult:
        """Build ``history_so_far``; any other name is an error."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        if params.name != "history_so_far":
            msg = f"Unknown prompt {params.name!r}; the prompts are: history_so_far."
            raise MCPError(types.INVALID_PARAMS, msg, {"argument": "name"})
        text = await self.worker.guarded(self.history, dict(params.arguments or {}))
        return types.GetPromptResult(
            description="The history so far",
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )
