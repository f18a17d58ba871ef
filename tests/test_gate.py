"""The one gate of kvmemory's local servers (agents.integrations._local): ``serve`` and ``mcp --http`` alike.

The end-to-end tests start each server as a real process and speak raw HTTP to
it, as a page that rebinds its domain to 127.0.0.1 would make a browser do.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.integrations._local import LocalGate, check_bind
from agents.memory import MemoryItem
from agents.memory.exceptions import InvalidArgumentError
from agents.memory.stores import open_store

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "a-gate-token-of-some-length"
WAIT = 60  # seconds to wait for a server to listen (never reached when it starts)

pytest.importorskip("starlette") if not os.environ.get("CI") else None

DOORS = ("serve", "mcp")
SERVE_PATHS = (
    "/",
    "/session?id=run-1",
    "/api/sessions",
    "/api/tail?session=run-1&n=5",
    "/api/after?session=run-1&seq=0",
    "/api/search?session=run-1&q=invoice",
)
INITIALIZE = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "gate-test", "version": "1"},
        },
    }
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    values = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KVMEMORY_SERVE_TOKEN", "KVMEMORY_MCP_TOKEN")
    }
    values["PYTHONPATH"] = os.pathsep.join([str(ROOT), values.get("PYTHONPATH", "")])
    values.update(extra)
    return values


def command(door: str, url: str, *args: str) -> list[str]:
    extra = ["--http"] if door == "mcp" else []
    return [sys.executable, "-m", "agents.cli", door, url, *extra, *args]


@contextlib.contextmanager
def running(door: str, url: str, *, token: str | None = None) -> Iterator[int]:
    """Run ``kvmemory serve`` or ``kvmemory mcp --http`` on a free loopback port; yield the port."""
    port = free_port()
    variable = "KVMEMORY_SERVE_TOKEN" if door == "serve" else "KVMEMORY_MCP_TOKEN"
    env = child_env(**({} if token is None else {variable: token}))
    process = subprocess.Popen(
        command(door, url, "--port", str(port)),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, f"kvmemory {door} did not start"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def request(port: int, door: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """Send one raw request with exactly these headers (``Host`` included) and return status and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        if door == "mcp":
            base = {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            }
            connection.putrequest("POST", "/mcp", skip_host=True, skip_accept_encoding=True)
            body: bytes | None = INITIALIZE
        else:
            base = {}
            connection.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
            body = None
        for name, value in {**base, **headers}.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        data = answer.read(65536)
        return answer.status, data
    finally:
        connection.close()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        store.append("run-1", [MemoryItem(step=1, action="open the invoice", secret="s3cr3t")])
    return url


def paths(door: str) -> tuple[str, ...]:
    return SERVE_PATHS if door == "serve" else ("/mcp",)


@pytest.mark.parametrize("door", DOORS)
def test_a_foreign_host_header_gets_421_and_no_data(door: str, store_url: str) -> None:
    """On loopback, a request addressed to another name (DNS rebinding) gets 421 on every route, with no data."""
    with running(door, store_url) as port:
        for path in paths(door):
            for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
                status, body = request(port, door, path, {"Host": host})
                assert status == 421, (path, host, body)
                assert b"DNS rebinding" in body
                assert b"s3cr3t" not in body
                assert b"invoice" not in body


@pytest.mark.parametrize("door", DOORS)
def test_a_foreign_origin_gets_403_and_no_data(door: str, store_url: str) -> None:
    """On loopback, a request sent by another site's page gets 403 on every route, even addressed to 127.0.0.1."""
    with running(door, store_url) as port:
        for path in paths(door):
            for origin in ("http://evil.example", f"http://evil.example:{port}", "null"):
                headers = {"Host": f"127.0.0.1:{port}", "Origin": origin}
                status, body = request(port, door, path, headers)
                assert status == 403, (path, origin, body)
                assert b"s3cr3t" not in body
                assert b"invoice" not in body


@pytest.mark.parametrize("door", DOORS)
def test_loopback_names_and_origins_are_answered(door: str, store_url: str) -> None:
    """Requests addressed to 127.0.0.1, localhost or [::1], from this machine's pages or none, are served."""
    with running(door, store_url) as port:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
            for origin in (None, f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
                headers = {"Host": host, **({"Origin": origin} if origin else {})}
                for path in paths(door):
                    status, body = request(port, door, path, headers)
                    assert status == 200, (path, host, origin, body)


@pytest.mark.parametrize("door", DOORS)
def test_the_token_does_not_open_the_gate_to_a_foreign_host(door: str, store_url: str) -> None:
    """With a token on loopback, the right token from a rebound name is still refused; without it, 401."""
    with running(door, store_url, token=TOKEN) as port:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        path = paths(door)[-1]
        assert request(port, door, path, {"Host": "evil.example", **bearer})[0] == 421
        status, body = request(port, door, path, {"Host": f"127.0.0.1:{port}"})
        assert (status, body) == (
            401,
            b"401 Unauthorized: Missing or wrong token; send Authorization: Bearer TOKEN.\n",
        )
        assert request(port, door, path, {"Host": f"127.0.0.1:{port}", **bearer})[0] == 200


@pytest.mark.parametrize("door", DOORS)
def test_binding_beyond_loopback_names_the_token_variable_given(door: str, store_url: str) -> None:
    """``--token-env VAR`` with VAR unset: both doors exit 1 naming VAR, with the same words."""
    done = subprocess.run(
        [
            *command(door, store_url, "--host", "0.0.0.0", "--port", str(free_port())),
            "--token-env",
            "MY_KV_TOKEN",
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    what = "the live view" if door == "serve" else "MCP"
    assert done.stderr == (
        f"kvmemory: error: Serving {what} on '0.0.0.0' lets other machines reach the store; "
        "set a token in MY_KV_TOKEN to bind anywhere but 127.0.0.1.\n"
    )


@pytest.mark.parametrize("door", DOORS)
def test_a_short_token_is_refused_naming_its_variable(door: str, store_url: str) -> None:
    """A token under 16 characters exits 1 before anything listens, naming where it came from."""
    variable = "KVMEMORY_SERVE_TOKEN" if door == "serve" else "KVMEMORY_MCP_TOKEN"
    done = subprocess.run(
        command(door, store_url, "--port", str(free_port())),
        env=child_env(**{variable: "short"}),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    assert f"The token in {variable} must be a string of at least 16 characters" in done.stderr


# -- the gate in process: any header a page can send -----------------------------------------


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def answer(gate: LocalGate, headers: list[tuple[bytes, bytes]], query: bytes = b"") -> int:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "path": "/", "query_string": query, "headers": headers}
    asyncio.run(gate(scope, receive, send))
    return int(sent[0]["status"])


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-:[]", min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(host=names)
def test_only_loopback_host_names_pass_the_gate(host: str) -> None:
    """Any Host value whose name is not 127.0.0.1, localhost or ::1 (with a numeric port or none) gets 421."""
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    bare = name if port.isdigit() else host
    loopback = bare in ("127.0.0.1", "localhost", "[::1]")
    status = answer(LocalGate(_ok, host="127.0.0.1"), [(b"host", host.encode())])
    assert status == (200 if loopback else 421)


@settings(max_examples=200, deadline=None)
@given(origin=st.text(min_size=1, max_size=40).filter(lambda o: o.isprintable()))
def test_only_loopback_origins_pass_the_gate(origin: str) -> None:
    """Any Origin that is not an http(s) origin of a loopback name gets 403."""
    status = answer(
        LocalGate(_ok, host="127.0.0.1"),
        [(b"host", b"127.0.0.1:1"), (b"origin", origin.encode("utf-8"))],
    )
    assert status in (200, 403)
    if status == 200:
        parts = urllib.parse.urlsplit(origin)
        assert (parts.scheme, parts.hostname) in {
            (scheme, name)
            for scheme in ("http", "https")
            for name in ("127.0.0.1", "localhost", "::1")
        }


def test_off_loopback_only_the_token_is_checked() -> None:
    """Bound beyond loopback, any Host is answered when the token is right, and 401 when it is not."""
    gate = LocalGate(_ok, host="0.0.0.0", token=TOKEN)
    bearer = (b"authorization", f"Bearer {TOKEN}".encode())
    assert answer(gate, [(b"host", b"memory.example.org"), bearer]) == 200
    assert answer(gate, [(b"host", b"memory.example.org")]) == 401


def test_a_request_without_a_host_header_is_refused() -> None:
    """A request naming no host at all (HTTP/1.0 style) gets 421: it cannot show it means this machine."""
    assert answer(LocalGate(_ok, host="127.0.0.1"), []) == 421


def test_two_host_headers_are_refused() -> None:
    """A request with two Host headers is refused: the gate cannot tell which one the server would use."""
    gate = LocalGate(_ok, host="127.0.0.1")
    assert answer(gate, [(b"host", b"127.0.0.1"), (b"host", b"evil.example")]) == 421


def test_check_bind_names_the_argument_in_python() -> None:
    """Called from Python (no variable), the refusal names the ``token=`` argument."""
    with pytest.raises(InvalidArgumentError, match=r"pass token=\.\.\. to bind anywhere"):
        check_bind("0.0.0.0", None, server="MCP")
