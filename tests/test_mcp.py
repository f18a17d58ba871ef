"""The MCP server, driven by the MCP SDK's own client: over stdio in a subprocess, and over HTTP."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):  # under CI a missing mcp extra is an error, not a skip
    pytest.importorskip("mcp")

import anyio
import httpx2
import jsonschema
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from agents.memory import MemoryItem
from agents.memory.stores import open_store

# Every test starts the server (and often a second writer) as a process of its own.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ENV = {"PYTHONPATH": str(ROOT)}
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
    )
).decode()
TOKEN = "test-token-0123456789abcdef"
WAIT = 60  # seconds a test waits for a notification before failing (never reached when it works)


def server(store: str, *args: str) -> StdioServerParameters:
    """Return the parameters that start ``kvmemory mcp STORE ARGS`` over stdio."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agents.cli", "mcp", store, "--poll", "0.2", *args],
        env=ENV,
    )


def run(test: Callable[[], Awaitable[None]]) -> None:
    anyio.run(test)


def snapshot(url: str) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Every session of a store with its items, to compare before and after."""
    with open_store(url, read_only=True) as store:
        return {
            name: [(r.seq, r.item.to_dict()) for r in store.records(name)]
            for name in store.sessions()
        }


def append_from_another_process(
    url: str, session: str, fields: dict[str, Any] | None = None, **more: Any
) -> None:
    """Append one item (``fields`` and ``more``) to a session from a separate Python process."""
    fields = {**(fields or {}), **more}
    script = (
        "import sys, json\n"
        "from agents.memory import MemoryItem\n"
        "from agents.memory.stores import open_store\n"
        "with open_store(sys.argv[1]) as store:\n"
        "    store.append(sys.argv[2], [MemoryItem(**json.loads(sys.argv[3]))])\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, url, session, json.dumps(fields)],
        env={**os.environ, **ENV},
        check=True,
    )


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'memory.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh SQLite store, and a fresh schema on the shared PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'memory.db'}"
    request.applymarker(pytest.mark.postgres)
    return str(request.getfixturevalue("postgres_url"))


# -- tools --------------------------------------------------------------------------------


def test_tools_are_listed_with_schemas_and_descriptions(sqlite_url: str) -> None:
    """Every tool has a description for a model and a closed JSON schema; read-only servers offer no writer."""

    async def main() -> None:
        async with Client(server(sqlite_url, "--prefix", "agent-")) as client:
            tools = (await client.list_tools()).tools
        names = {tool.name for tool in tools}
        assert names == {
            "record_step",
            "record_message",
            "recent_history",
            "search",
            "recall",
            "list_sessions",
            "show_steps",
            "delete_step",
        }
        for tool in tools:
            assert tool.description
            assert len(tool.description) > 40
            assert tool.input_schema["type"] == "object"
            assert tool.input_schema["additionalProperties"] is False
        async with Client(server(sqlite_url, "--read-only")) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"recent_history", "search", "recall", "list_sessions", "show_steps"}

    open_store(sqlite_url).close()  # a read-only server needs the store to exist
    run(main)


def test_every_tool_works_through_the_server(any_url: str) -> None:
    """Record, read back by window, search, recall, list, show by range and delete: all land in the store."""

    async def main() -> None:
        async with Client(server(any_url, "--prefix", "agent-")) as client:
            for thought in ["open the inbox", "find the invoice from ACME", "pay the invoice"]:
                result = await client.call_tool(
                    "record_step", {"session": "agent-1", "fields": {"thought": thought}}
                )
                assert not result.is_error, text(result)
            assert result.structured_content == {"session": "agent-1", "seq": 3, "step": 3}
            message = await client.call_tool(
                "record_message",
                {"session": "agent-2", "role": "user", "content": "Remember: ACME pays late."},
            )
            assert message.structured_content["step"] == 1

            history = await client.call_tool(
                "recent_history", {"session": "agent-1", "max_tokens": 12, "keys": ["thought"]}
            )
            kept = [item["fields"]["thought"] for item in history.structured_content["items"]]
            assert kept == ["pay the invoice"]  # the newest items that fit the budget
            assert history.structured_content["dropped"] == 2
            assert "pay the invoice" in text(history)

            found = await client.call_tool(
                "search", {"session": "agent-1", "query": "ACME invoice"}
            )
            assert (
                found.structured_content["hits"][0]["fields"]["thought"]
                == "find the invoice from ACME"
            )
            anywhere = await client.call_tool("search", {"query": "ACME", "k": 5})
            assert {hit["session"] for hit in anywhere.structured_content["hits"]} == {
                "agent-1",
                "agent-2",
            }

            recalled = await client.call_tool(
                "recall", {"session": "agent-1", "query": "inbox", "recent": 1}
            )
            steps = [item["fields"]["step"] for item in recalled.structured_content["items"]]
            assert steps == [1, 3]

            listed = await client.call_tool("list_sessions", {})
            assert listed.structured_content["sessions"] == [
                {"session": "agent-1", "items": 3},
                {"session": "agent-2", "items": 1},
            ]
            shown = await client.call_tool(
                "show_steps", {"session": "agent-1", "from_step": 2, "to_step": 3}
            )
            assert [i["fields"]["step"] for i in shown.structured_content["items"]] == [2, 3]
            assert "find the invoice from ACME" in text(shown)

            deleted = await client.call_tool("delete_step", {"session": "agent-1", "step": 2})
            assert deleted.structured_content["deleted"] == 1

    run(main)
    stored = snapshot(any_url)
    assert [fields["thought"] for _, fields in stored["agent-1"]] == [
        "open the inbox",
        "pay the invoice",
    ]
    assert stored["agent-2"][0][1]["role"] == "user"


def test_images_are_kept_as_data_urls_or_paths_inside_the_folder(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A data URL is kept as sent; a path inside the image folder is kept as its real path."""
    folder = tmp_path / "shots"
    folder.mkdir()
    (folder / "one.png").write_bytes(base64.b64decode(PNG))

    async def main() -> None:
        async with Client(server(sqlite_url, "--session", "s", "--images", str(folder))) as client:
            result = await client.call_tool(
                "record_step",
                {
                    "fields": {"action": "look"},
                    "images": [f"data:image/png;base64,{PNG}", "one.png"],
                },
            )
            assert not result.is_error, text(result)

    run(main)
    ((_, fields),) = snapshot(sqlite_url)["s"]
    assert fields["images"] == [f"data:image/png;base64,{PNG}", str(folder / "one.png")]


def test_message_image_path_inside_the_folder_is_kept_as_its_data(
    sqlite_url: str, tmp_path: Path
) -> None:
    """record_message reads an image path of the image folder into a data: URL: a message never holds a path."""
    folder = tmp_path / "shots"
    folder.mkdir()
    (folder / "one.png").write_bytes(base64.b64decode(PNG))

    async def main() -> None:
        async with Client(server(sqlite_url, "--session", "s", "--images", str(folder))) as client:
            result = await client.call_tool(
                "record_message", {"role": "user", "content": "look", "images": ["one.png"]}
            )
            assert not result.is_error, text(result)

    run(main)
    ((_, fields),) = snapshot(sqlite_url)["s"]
    assert fields["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{PNG}"},
    }


def test_steps_continue_under_the_sessions_own_step_key(sqlite_url: str) -> None:
    """A session made with UFO's step key 'Step' gets its next step numbered under 'Step'."""
    with open_store(sqlite_url) as store:
        store.append("ufo", [MemoryItem(Step=4, action="click")], step_key="Step")

    async def main() -> None:
        async with Client(server(sqlite_url, "--session", "ufo")) as client:
            result = await client.call_tool("record_step", {"fields": {"action": "type"}})
            assert result.structured_content["step"] == 5
            shown = await client.call_tool("show_steps", {"steps": [5]})
            assert json.loads(text(shown))["items"][0]["fields"]["Step"] == 5
            assert shown.structured_content["items"][0]["fields"]["action"] == "type"

    run(main)
    assert [fields.get("Step") for _, fields in snapshot(sqlite_url)["ufo"]] == [4, 5]


def test_semantic_search_needs_an_embedder(sqlite_url: str) -> None:
    """With --embedder hashing, semantic search ranks by meaning; without one, asking for it names 'mode'."""
    if not os.environ.get("CI"):  # the hashing embedder needs numpy; under CI it must be there
        pytest.importorskip("numpy")

    async def main() -> None:
        async with Client(server(sqlite_url, "--session", "s", "--embedder", "hashing")) as client:
            for thought in ["download invoices", "water the plants"]:
                await client.call_tool("record_step", {"fields": {"thought": thought}})
            hits = await client.call_tool(
                "search", {"query": "invoice", "mode": "semantic", "k": 1}
            )
            assert not hits.is_error, text(hits)
            assert hits.structured_content["hits"][0]["fields"]["thought"] == "download invoices"
        async with Client(server(sqlite_url, "--session", "s")) as client:
            refused = await client.call_tool("search", {"query": "invoice", "mode": "semantic"})
            assert refused.is_error
            assert refused.structured_content["error"]["argument"] == "mode"

    run(main)


async def call_every_tool(client: Client) -> dict[str, types.CallToolResult]:
    """Call each tool once, successfully, on a fresh store; return the results by tool."""
    results = {}
    for thought in ["open the inbox", "find the invoice from ACME"]:
        results["record_step"] = await client.call_tool(
            "record_step", {"session": "agent-1", "fields": {"thought": thought, "cost": 0.5}}
        )
    results["record_message"] = await client.call_tool(
        "record_message", {"session": "agent-2", "role": "user", "content": "ACME pays late."}
    )
    results["recent_history"] = await client.call_tool("recent_history", {"session": "agent-1"})
    results["search"] = await client.call_tool("search", {"query": "ACME"})
    results["recall"] = await client.call_tool(
        "recall", {"session": "agent-1", "query": "inbox", "recent": 1}
    )
    results["list_sessions"] = await client.call_tool("list_sessions", {})
    results["show_steps"] = await client.call_tool(
        "show_steps", {"session": "agent-1", "steps": [1, 2]}
    )
    results["delete_step"] = await client.call_tool(
        "delete_step", {"session": "agent-1", "step": 1}
    )
    for name, result in results.items():
        assert not result.is_error, f"{name}: {text(result)}"
    return results


def test_every_tool_declares_an_output_schema_its_results_validate_against(
    sqlite_url: str,
) -> None:
    """Each tool lists an outputSchema, and its structured content validates against that schema."""

    async def main() -> None:
        async with Client(server(sqlite_url, "--prefix", "agent-")) as client:
            schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
            results = await call_every_tool(client)
        assert sorted(results) == sorted(schemas)
        for name, result in results.items():
            schema = schemas[name]
            assert schema is not None, f"{name} declares no outputSchema"
            jsonschema.Draft202012Validator.check_schema(schema)
            jsonschema.validate(result.structured_content, schema)

    run(main)


def test_the_text_content_is_the_json_of_the_structured_content(sqlite_url: str) -> None:
    """Each tool's text block parses as JSON equal to its structured content (not Markdown)."""

    async def main() -> None:
        async with Client(server(sqlite_url, "--prefix", "agent-")) as client:
            results = await call_every_tool(client)
        for name, result in results.items():
            assert json.loads(text(result)) == result.structured_content, name

    run(main)


async def call_with_raw_json(url: str, tool: str, arguments: str, *args: str) -> dict[str, Any]:
    """Call ``tool`` over stdio with ``arguments`` as raw JSON text; return the JSON-RPC result.

    The SDK's client writes NaN and infinities as null, so a client that sends them
    (Python's json module does) is spoken for here line by line.
    """
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    call = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
        f'"params": {{"name": "{tool}", "arguments": {arguments}}}}}'
    )
    lines = [
        json.dumps(hello),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
    command = [sys.executable, "-m", "agents.cli", "mcp", url, *args]
    async with await anyio.open_process(
        command, env={**os.environ, **ENV}, stderr=subprocess.DEVNULL
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.send(("\n".join([*lines, call]) + "\n").encode())
        received = BufferedByteReceiveStream(process.stdout)
        with anyio.fail_after(WAIT):
            while True:
                answer = json.loads(await received.receive_until(b"\n", 10_000_000))
                if answer.get("id") == 1:
                    break
        await process.stdin.aclose()
    return dict(answer["result"])


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("record_step", '{"fields": {"score": NaN}}'),
        ("record_step", '{"fields": {"scores": [1, Infinity]}}'),
        ("record_step", '{"fields": {"nested": {"low": -Infinity}}}'),
        ("record_step", '{"fields": {"huge": 1e400}}'),
        ("record_message", '{"role": "user", "content": "hi", "fields": {"weight": NaN}}'),
    ],
    ids=["NaN", "Infinity in a list", "-Infinity nested", "1e400", "message fields"],
)
def test_non_finite_numbers_in_recorded_fields_are_refused(
    sqlite_url: str, tool: str, arguments: str
) -> None:
    """NaN, infinities and numbers too large for a double are an error naming 'fields'; nothing is stored."""
    with open_store(sqlite_url) as store:
        store.append("s", [MemoryItem(step=1, thought="before")])
    before = snapshot(sqlite_url)
    result = anyio.run(call_with_raw_json, sqlite_url, tool, arguments, "--session", "s")
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["argument"] == "fields"
    assert "not a finite number" in result["content"][0]["text"]
    assert snapshot(sqlite_url) == before


def test_a_listed_step_past_2_53_is_an_argument_error(sqlite_url: str) -> None:
    """show_steps refuses steps=[2**64] naming 'steps', as its range form refuses from_step past 2**53."""
    with open_store(sqlite_url) as store:
        store.append("s", [MemoryItem(step=1)])

    async def main() -> None:
        async with Client(server(sqlite_url, "--session", "s")) as client:
            listed = await client.call_tool("show_steps", {"steps": [2**64]})
            ranged = await client.call_tool("show_steps", {"from_step": 2**64})
        assert ranged.is_error
        assert ranged.structured_content["error"]["argument"] == "from_step"
        assert listed.is_error, text(listed)
        assert listed.structured_content["error"]["argument"] == "steps"
        assert "2**53" in text(listed)

    run(main)


# -- resources and prompts ------------------------------------------------------------------


def test_sessions_are_resources_and_history_is_a_prompt(sqlite_url: str) -> None:
    """Each session and its last steps read as resources; the prompt builds the history so far."""
    with open_store(sqlite_url) as store:
        store.append("run-1", [MemoryItem(step=n, action=f"act {n}") for n in range(1, 6)])
        store.append("other", [MemoryItem(step=1, action="secret")])

    async def main() -> None:
        async with Client(server(sqlite_url, "--prefix", "run-")) as client:
            uris = [resource.uri for resource in (await client.list_resources()).resources]
            assert uris == ["kvmemory://session/run-1", "kvmemory://session/run-1/last"]
            summary = await client.read_resource("kvmemory://session/run-1")
            assert "items: 5" in summary.contents[0].text
            last = await client.read_resource("kvmemory://session/run-1/last/2")
            assert "act 4" in last.contents[0].text
            assert "act 3" not in last.contents[0].text
            templates = (await client.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} == {
                "kvmemory://session/{session}",
                "kvmemory://session/{session}/last/{n}",
            }
            prompts = (await client.list_prompts()).prompts
            assert [prompt.name for prompt in prompts] == ["history_so_far"]
            prompt = await client.get_prompt("history_so_far", {"session": "run-1"})
            content = prompt.messages[0].content
            assert isinstance(content, types.TextContent)
            assert "act 1" in content.text
            assert "act 5" in content.text
            with pytest.raises(MCPError, match="outside this server's scope"):
                await client.read_resource("kvmemory://session/other")
            with pytest.raises(MCPError, match="outside this server's scope"):
                await client.get_prompt("history_so_far", {"session": "other"})

    run(main)


def test_a_listening_client_hears_of_another_process_appending(any_url: str) -> None:
    """A 2026 client listening on a session's resource gets resources/updated when a second process appends."""
    uri = "kvmemory://session/run-1/last"
    with open_store(any_url) as store:
        store.append("run-1", [MemoryItem(step=1, action="start")])

    async def main() -> None:
        async with Client(server(any_url, "--prefix", "run-")) as client:
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                await anyio.to_thread.run_sync(
                    lambda: append_from_another_process(any_url, "run-1", step=2, action="later")
                )
                with anyio.fail_after(WAIT):
                    async for event in subscription:
                        if getattr(event, "uri", None) == uri:
                            break
            fresh = await client.read_resource(uri)
            assert "later" in fresh.contents[0].text

    run(main)


def test_a_write_right_after_listening_is_heard_with_a_slow_poll(sqlite_url: str) -> None:
    """The server notes a session's state when the listen starts, not at its next poll, so no write slips by."""
    uri = "kvmemory://session/run-1"

    async def main() -> None:
        # A 5-second poll: the append lands between the listen and the server's next look.
        async with (
            Client(server(sqlite_url, "--poll", "5")) as client,
            client.listen(resource_subscriptions=[uri]) as subscription,
        ):
            await anyio.to_thread.run_sync(append_from_another_process, sqlite_url, "run-1")
            with anyio.fail_after(WAIT):
                async for event in subscription:
                    if getattr(event, "uri", None) == uri:
                        break

    run(main)


def test_a_listener_hears_nothing_of_sessions_outside_the_scope(sqlite_url: str) -> None:
    """Listening on another session's URI is honoured by the SDK but no change of that session is told."""
    mine, theirs = "kvmemory://session/agent-1", "kvmemory://session/other"
    with open_store(sqlite_url) as store:
        store.append("agent-1", [MemoryItem(step=1)])
        store.append("other", [MemoryItem(step=1)])
    heard: list[str] = []

    async def main() -> None:
        async with (
            Client(server(sqlite_url, "--prefix", "agent-")) as client,
            client.listen(resource_subscriptions=[mine, theirs]) as subscription,
        ):
            for step in (2, 3):
                # "other" changes before each change of "agent-1": a leak would be heard first.
                for session in ("other", "agent-1"):
                    await anyio.to_thread.run_sync(
                        append_from_another_process, sqlite_url, session, {"step": step}
                    )
                with anyio.fail_after(WAIT):
                    async for event in subscription:
                        heard.append(str(getattr(event, "uri", "")))
                        if heard[-1] == mine:
                            break

    run(main)
    assert heard == [mine, mine]


def test_a_subscribed_legacy_client_is_notified(sqlite_url: str) -> None:
    """A handshake-era client (Claude Desktop's kind) subscribes and gets notifications/resources/updated."""
    uri = "kvmemory://session/run-1"
    with open_store(sqlite_url) as store:
        store.append("run-1", [MemoryItem(step=1)])
    heard = anyio.Event()

    async def handler(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification) and message.params.uri == uri:
            heard.set()

    async def main() -> None:
        scoped = server(sqlite_url, "--prefix", "run-")
        async with Client(scoped, mode="legacy", message_handler=handler) as client:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # the 2025 call, on purpose
                await client.subscribe_resource(uri)
                with pytest.raises(MCPError, match="outside this server's scope"):
                    await client.subscribe_resource("kvmemory://session/other")
            await anyio.to_thread.run_sync(
                lambda: append_from_another_process(sqlite_url, "run-1", step=2)
            )
            with anyio.fail_after(WAIT):
                await heard.wait()

    run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_resources_announce_that_their_list_changes(sqlite_url: str, mode: str) -> None:
    """Both a 2026 client and a handshake-era one see resources.listChanged true."""

    async def main() -> None:
        async with Client(server(sqlite_url), mode=mode) as client:
            capabilities = client.server_capabilities
        assert capabilities is not None
        assert capabilities.resources is not None
        assert capabilities.resources.list_changed is True

    run(main)


def test_a_legacy_client_hears_that_a_session_appeared(sqlite_url: str) -> None:
    """When another process starts a session in scope, a handshake-era client gets resources/list_changed."""
    with open_store(sqlite_url) as store:
        store.append("run-1", [MemoryItem(step=1)])
    heard = anyio.Event()

    async def handler(message: Any) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            heard.set()

    async def main() -> None:
        scoped = server(sqlite_url, "--prefix", "run-")
        async with Client(scoped, mode="legacy", message_handler=handler) as client:
            before = [r.uri for r in (await client.list_resources()).resources]
            await anyio.to_thread.run_sync(append_from_another_process, sqlite_url, "run-2")
            with anyio.fail_after(WAIT):
                await heard.wait()
            after = [r.uri for r in (await client.list_resources()).resources]
        assert "kvmemory://session/run-2" not in before
        assert "kvmemory://session/run-2" in after

    run(main)


# -- a hostile client ---------------------------------------------------------------------


HOSTILE = [
    ("record_step", {"session": "agent-1", "fields": "not an object"}, "fields"),
    ("record_step", {"session": "agent-1"}, "fields"),
    ("record_step", {"session": 7, "fields": {}}, "session"),
    ("record_step", {"session": "other", "fields": {"a": 1}}, "session"),
    ("record_step", {"session": "../agent-1", "fields": {"a": 1}}, "session"),
    ("record_step", {"session": "agent-1", "fields": {"a": 1}, "colour": "red"}, "colour"),
    ("record_step", {"session": "agent-1", "fields": {"big": "x" * 2_000_000}}, "fields"),
    (
        "record_step",
        {"session": "agent-1", "fields": {"a": 1}, "images": ["../secret.png"]},
        "images",
    ),
    (
        "record_step",
        {"session": "agent-1", "fields": {"a": 1}, "images": ["/etc/passwd"]},
        "images",
    ),
    ("record_step", {"session": "agent-1", "fields": {"a": 1}, "images": ["link.png"]}, "images"),
    (
        "record_step",
        {"session": "agent-1", "fields": {"a": 1}, "images": ["data:text/html;base64,PGI+"]},
        "images",
    ),
    (
        "record_step",
        {"session": "agent-1", "fields": {"a": 1}, "images": ["data:image/png;base64,%%%"]},
        "images",
    ),
    (
        "record_step",
        {"session": "agent-1", "fields": {"a": 1}, "images": [f"data:image/png;base64,{PNG}"] * 9},
        "images",
    ),
    ("record_step", {"session": "agent-1", "fields": {"step": [1, 2]}}, "fields"),
    ("record_step", {"session": "agent-1", "fields": {"screenshot": "/etc/passwd"}}, "fields"),
    ("record_step", {"session": "agent-1", "fields": {"images": ["link.png", 1]}}, "fields"),
    ("record_message", {"session": "agent-1", "role": "king", "content": "hi"}, "role"),
    (
        "record_message",
        {"session": "agent-1", "role": "user", "content": "hi", "fields": {"image": "../x.png"}},
        "fields",
    ),
    (
        "record_message",
        {"session": "agent-1", "role": "user", "content": "hi", "fields": {"role": "system"}},
        "fields",
    ),
    ("record_message", {"session": "agent-1", "role": "user", "content": ["hi"]}, "content"),
    ("recent_history", {"session": "agent-1", "max_tokens": -1}, "max_tokens"),
    ("recent_history", {"session": "agent-1", "max_tokens": "lots"}, "max_tokens"),
    ("recent_history", {"session": "agent-1", "keys": [1, 2]}, "keys"),
    ("search", {"query": 123}, "query"),
    ("search", {"query": "x" * 10_000}, "query"),
    ("search", {"query": "invoice", "k": 10_000}, "k"),
    ("search", {"query": "invoice", "mode": "magic"}, "mode"),
    ("search", {"session": "other", "query": "secret"}, "session"),
    ("search", {"query": "!!!"}, "query"),
    ("recall", {"session": "agent-1", "query": "x", "recent": 1e9}, "recent"),
    ("list_sessions", {"prefix": 5}, "prefix"),
    ("show_steps", {"session": "agent-1", "from_step": 1, "to_step": 100_000}, "to_step"),
    ("show_steps", {"session": "other", "from_step": 1}, "session"),
    ("delete_step", {"session": "other", "step": 1}, "session"),
    ("delete_step", {"session": "agent-1", "step": {"$ne": 0}}, "step"),
    ("delete_step", {"session": "agent-1", "step": 99}, "step"),
]


def test_a_hostile_client_gets_errors_naming_the_argument_and_changes_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Wrong types, out-of-scope sessions, paths outside the folder, huge inputs: each a named error, no write."""
    folder = tmp_path / "shots"
    folder.mkdir()
    (tmp_path / "secret.png").write_bytes(base64.b64decode(PNG))
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    with open_store(sqlite_url) as store:
        store.append("agent-1", [MemoryItem(step=1, thought="find the invoice")])
        store.append("other", [MemoryItem(step=1, thought="secret plan")])
    before = snapshot(sqlite_url)
    failures: list[str] = []

    async def main() -> None:
        args = ("--prefix", "agent-", "--images", str(folder))
        async with Client(server(sqlite_url, *args)) as client:
            for tool, arguments, argument in HOSTILE:
                result = await client.call_tool(tool, arguments)
                error = (result.structured_content or {}).get("error", {})
                if not result.is_error or error.get("argument") != argument:
                    failures.append(f"{tool} {str(arguments)[:80]}: {result}")
                elif "secret plan" in text(result):
                    failures.append(f"{tool} leaked another session: {text(result)}")
            with pytest.raises(MCPError, match="Unknown tool"):
                await client.call_tool("drop_everything", {})

    run(main)
    assert failures == []
    assert snapshot(sqlite_url) == before


def test_a_read_only_server_refuses_writes(sqlite_url: str) -> None:
    """On a read-only server the writing tools do not exist, and calling one changes nothing."""
    with open_store(sqlite_url) as store:
        store.append("s", [MemoryItem(step=1)])
    before = snapshot(sqlite_url)

    async def main() -> None:
        async with Client(server(sqlite_url, "--read-only")) as client:
            with pytest.raises(MCPError, match="read-only"):
                await client.call_tool("record_step", {"session": "s", "fields": {"a": 1}})
            with pytest.raises(MCPError, match="read-only"):
                await client.call_tool("delete_step", {"session": "s", "step": 1})

    run(main)
    assert snapshot(sqlite_url) == before


# -- HTTP ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(url: str, *args: str, token: str | None = TOKEN) -> Any:
    """Run ``kvmemory mcp URL --http`` on a free local port; yield its endpoint."""
    port = free_port()
    env = {**os.environ, **ENV}
    env.pop("KVMEMORY_MCP_TOKEN", None)
    if token is not None:
        env["KVMEMORY_MCP_TOKEN"] = token
    command = [sys.executable, "-m", "agents.cli", "mcp", url, "--http", "--port", str(port)]
    process = subprocess.Popen([*command, "--poll", "0.2", *args], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=WAIT)
        if process.stderr is not None:
            process.stderr.close()


@contextlib.asynccontextmanager
async def http_client(endpoint: str, token: str | None = TOKEN) -> AsyncIterator[Client]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT) as http,
        Client(streamable_http_client(endpoint, http_client=http)) as client,
    ):
        yield client


def test_http_serves_tools_resources_and_notifications(any_url: str) -> None:
    """Over streamable HTTP with a token: list, call, read, and hear of another process's append."""
    uri = "kvmemory://session/run-1/last"

    async def main(endpoint: str) -> None:
        async with http_client(endpoint) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "record_step" in names
            result = await client.call_tool(
                "record_step", {"session": "run-1", "fields": {"action": "open the invoice"}}
            )
            assert not result.is_error, text(result)
            hits = await client.call_tool("search", {"session": "run-1", "query": "invoice"})
            assert hits.structured_content["hits"][0]["seq"] == 1
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                await anyio.to_thread.run_sync(
                    lambda: append_from_another_process(any_url, "run-1", step=2, action="paid")
                )
                with anyio.fail_after(WAIT):
                    async for event in subscription:
                        if getattr(event, "uri", None) == uri:
                            break
            assert "paid" in (await client.read_resource(uri)).contents[0].text

    with http_server(any_url, "--prefix", "run-") as endpoint:
        anyio.run(main, endpoint)


def test_http_without_the_right_token_reaches_nothing(sqlite_url: str) -> None:
    """A missing or wrong token gets 401 on every request, and the store is not touched."""
    with open_store(sqlite_url) as store:
        store.append("s", [MemoryItem(step=1)])
    before = snapshot(sqlite_url)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "delete_step", "arguments": {"session": "s", "step": 1}},
    }

    async def main(endpoint: str) -> None:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with httpx2.AsyncClient(timeout=WAIT) as http:
                answer = await http.post(
                    endpoint,
                    json=call,
                    headers={**headers, "Accept": "application/json, text/event-stream"},
                )
            assert answer.status_code == 401
        with pytest.raises(Exception):  # noqa: B017 - the SDK reports the 401 its own way
            async with http_client(endpoint, token="wrong-token-0123456789") as client:
                await client.call_tool("delete_step", {"session": "s", "step": 1})

    with http_server(sqlite_url) as endpoint:
        anyio.run(main, endpoint)
    assert snapshot(sqlite_url) == before


def test_a_legacy_http_client_is_notified(sqlite_url: str) -> None:
    """Over HTTP a handshake-era client's subscription is told of another process's append too."""
    uri = "kvmemory://session/run-1/last/5"
    with open_store(sqlite_url) as store:
        store.append("run-1", [MemoryItem(step=1)])
    heard = anyio.Event()

    async def handler(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification) and message.params.uri == uri:
            heard.set()

    async def main(endpoint: str) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=WAIT) as http,
            Client(
                streamable_http_client(endpoint, http_client=http),
                mode="legacy",
                message_handler=handler,
            ) as client,
        ):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # the 2025 call, on purpose
                await client.subscribe_resource(uri)
            await anyio.to_thread.run_sync(append_from_another_process, sqlite_url, "run-1")
            with anyio.fail_after(WAIT):
                await heard.wait()

    with http_server(sqlite_url) as endpoint:
        anyio.run(main, endpoint)


@pytest.mark.parametrize(
    "args",
    [["--session", "a", "--prefix", "b"], ["--port", "8000"], ["--http", "--port", "0"]],
    ids=["session and prefix", "port without http", "port 0"],
)
def test_command_line_mistakes_are_usage_errors(sqlite_url: str, args: list[str]) -> None:
    """Contradicting or malformed options exit with status 2 before anything is served."""
    done = subprocess.run(
        [sys.executable, "-m", "agents.cli", "mcp", sqlite_url, *args],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""


def test_a_stdio_server_says_what_it_serves_on_stderr(sqlite_url: str) -> None:
    """Started in a terminal, ``kvmemory mcp`` names the store, its scope and stdio on stderr, stdout untouched."""
    done = subprocess.run(
        [sys.executable, "-m", "agents.cli", "mcp", sqlite_url, "--prefix", "agent-"],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"kvmemory: serving MCP for {sqlite_url} (")
    assert "'agent-'" in first
    assert first.endswith(" over stdio")


def test_binding_beyond_loopback_needs_a_token(sqlite_url: str) -> None:
    """``--host 0.0.0.0`` without a token is refused before anything listens."""
    env = {**os.environ, **ENV}
    env.pop("KVMEMORY_MCP_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "agents.cli", "mcp", sqlite_url, "--http", "--host", "0.0.0.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 1
    assert "KVMEMORY_MCP_TOKEN" in done.stderr


def test_search_across_sessions_is_one_ranking_with_shared_statistics(any_url: str) -> None:
    """Without a session, search ranks every session as one memory holding them all would, scores equal."""
    from agents.memory import Memory

    with open_store(any_url) as store:
        big = [MemoryItem(step=n, note=f"filler step {n} about menus") for n in range(1, 120)]
        big.append(MemoryItem(step=120, note="the menu bar shows an invoice icon among others"))
        store.append("big", big)
        store.append(
            "small",
            [MemoryItem(step=1, note="invoice total paid"), MemoryItem(step=2, note="invoice")],
        )
        records = [(name, r) for name in ("big", "small") for r in store.records(name)]
    union = Memory([record.item for _, record in records])
    where = {id(record.item): (name, record.seq) for name, record in records}
    expected = [(*where[id(hit.item)], round(hit.score, 6)) for hit in union.search("invoice", 3)]

    async def main() -> None:
        async with Client(server(any_url)) as client:
            result = await client.call_tool("search", {"query": "invoice", "k": 3})
            assert not result.is_error, text(result)
            hits = result.structured_content["hits"]
            assert [(hit["session"], hit["seq"], hit["score"]) for hit in hits] == expected
            assert hits[0]["session"] == "small"

    run(main)


# -- concurrency ----------------------------------------------------------------------------


def test_several_client_processes_write_their_own_sessions_and_read_the_others(
    any_url: str,
) -> None:
    """Three servers on one store, each client writing its session and searching the others': nothing is lost."""
    writers, steps = 3, 15

    async def agent(number: int) -> None:
        async with Client(server(any_url, "--prefix", "agent-")) as client:
            for step in range(1, steps + 1):
                result = await client.call_tool(
                    "record_step",
                    {
                        "session": f"agent-{number}",
                        "fields": {"note": f"agent {number} step {step}"},
                    },
                )
                assert not result.is_error, text(result)
                other = f"agent-{(number + 1) % writers}"
                seen = await client.call_tool("recent_history", {"session": other, "max_items": 3})
                assert not seen.is_error, text(seen)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for number in range(writers):
                group.start_soon(agent, number)

    with open_store(any_url):
        pass  # create the store once, so the servers do not race to make its tables
    run(main)
    stored = snapshot(any_url)
    for number in range(writers):
        notes = [fields["note"] for _, fields in stored[f"agent-{number}"]]
        assert notes == [f"agent {number} step {step}" for step in range(1, steps + 1)]
        assert [fields["step"] for _, fields in stored[f"agent-{number}"]] == list(
            range(1, steps + 1)
        )


def test_two_servers_recording_into_one_session_never_give_a_step_twice(any_url: str) -> None:
    """Two server processes, a client each, recording into one session at once: steps 1..n, each once."""
    writers, steps = 2, 20
    given: list[int] = []

    async def agent(number: int) -> None:
        async with Client(server(any_url)) as client:
            for step in range(steps):
                result = await client.call_tool(
                    "record_step",
                    {"session": "shared", "fields": {"note": f"agent {number} call {step}"}},
                )
                assert not result.is_error, text(result)
                given.append(result.structured_content["step"])

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for number in range(writers):
                group.start_soon(agent, number)

    with open_store(any_url):
        pass  # create the store once, so the servers do not race to make its tables
    run(main)
    stored = [fields["step"] for _, fields in snapshot(any_url)["shared"]]
    assert sorted(given) == list(range(1, writers * steps + 1))
    assert stored == list(range(1, writers * steps + 1))


# -- the extra ------------------------------------------------------------------------------


def test_a_missing_sdk_names_the_extra(sqlite_url: str) -> None:
    """Without the mcp package, building a server says which extra to install."""
    script = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "sys.modules['mcp.server'] = None\n"
        "from agents.integrations.mcp import MemoryServer\n"
        "from agents.memory import MissingDependencyError\n"
        "try:\n"
        "    MemoryServer(sys.argv[1])\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, sqlite_url],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "pip install 'kvmemory[mcp]'" in done.stdout
