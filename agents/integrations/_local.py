"""What kvmemory's local servers (``kvmemory mcp --http``, ``kvmemory serve``) share.

Both answer through one gate, :class:`LocalGate`, with one policy:

* On a loopback address (the default) no token is needed, and that is safe
  only if the request really comes from a page or program that means this
  machine. A web page on any domain can point that domain at 127.0.0.1 (DNS
  rebinding) and make the user's browser send it requests; they then carry
  the page's own name in ``Host`` and its origin in ``Origin``. So on
  loopback a request whose ``Host`` is not a loopback name gets 421, and one
  whose ``Origin`` is not a loopback origin gets 403, token or not.
* Anywhere else a token is required (:func:`check_bind`), compared in
  constant time; a request without it gets 401 and reaches nothing.
"""

from __future__ import annotations

import hmac
import os
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from agents.memory.exceptions import InvalidArgumentError

__all__ = ["LOOPBACK", "LocalGate", "check_bind", "image_root"]

LOOPBACK: Final = ("127.0.0.1", "localhost", "::1")
"""Hosts a server may bind without a token: only this machine reaches them."""

MIN_TOKEN_LENGTH: Final = 16

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def check_bind(host: str, token: str | None, *, server: str, token_env: str | None = None) -> None:
    """Refuse a token too short to guess at, and a bind beyond loopback without one.

    Args:
        host: The address the server is about to bind.
        token: The token requests must bear, or ``None``.
        server: What is being served, for the message (``"the live view"``, ``"MCP"``).
        token_env: The environment variable the command line reads the token
            from, named in the fix; ``None`` names the ``token=`` argument.

    Raises:
        InvalidArgumentError: for a token under 16 characters, or a host that
            is not a loopback address when no token is given.
    """
    where = "token=" if token_env is None else token_env
    fix = "pass token=..." if token_env is None else f"set a token in {token_env}"
    if token is not None and (type(token) is not str or len(token) < MIN_TOKEN_LENGTH):
        msg = (
            f"The token in {where} must be a string of at least {MIN_TOKEN_LENGTH} characters; "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe())'."
        )
        raise InvalidArgumentError(msg)
    if host not in LOOPBACK and token is None:
        msg = (
            f"Serving {server} on {host!r} lets other machines reach the store; {fix} "
            "to bind anywhere but 127.0.0.1."
        )
        raise InvalidArgumentError(msg)


def _host_name(value: str) -> str | None:
    """Return the host part of a ``Host`` header (``[::1]:8766`` -> ``::1``), or ``None`` if malformed."""
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return name
    name, colon, port = value.partition(":")
    if colon and not port.isdigit():
        return None
    return name


def _loopback_origin(value: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        return False
    del port
    return parts.scheme in ("http", "https") and (parts.hostname or "") in LOOPBACK


class LocalGate:
    """An ASGI wrapper that lets through only the requests the policy above admits.

    Args:
        app: The ASGI app behind the gate.
        host: The address the server binds; a loopback address turns on the
            ``Host`` and ``Origin`` checks.
        token: When given, every request must bear it as ``Authorization: Bearer``
            (and, with ``cookie``, as that cookie or a ``?token=`` parameter).
        cookie: The cookie a browser keeps the token in; a ``?token=`` in the
            address is then answered with that cookie and a redirect to the
            same address without it, so it stays out of history and referrers.
    """

    def __init__(
        self, app: _App, *, host: str, token: str | None = None, cookie: str | None = None
    ) -> None:
        self._app = app
        self._loopback = host in LOOPBACK
        self._token = None if token is None else token.encode()
        self._cookie = None if cookie is None else cookie.encode()

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await _refuse(scope, send, *refusal)
            return
        if self._token is not None and self._cookie is not None and scope["type"] == "http":
            query = scope.get("query_string", b"").decode("latin-1")
            if "token" in urllib.parse.parse_qs(query):
                await self._set_cookie(scope, send, query)
                return
        await self._app(scope, receive, send)

    def _refusal(self, scope: _Scope) -> tuple[int, str] | None:
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope.get("headers", ()):
            headers.setdefault(name.lower(), []).append(value)
        if self._loopback:
            hosts = headers.get(b"host", [])
            host = hosts[0].decode("latin-1") if len(hosts) == 1 else ""
            if _host_name(host) not in LOOPBACK:
                return 421, (
                    f"Host {host!r} is not this machine's loopback address; a server on loopback "
                    "answers only requests addressed to 127.0.0.1, localhost or [::1] "
                    "(protection against DNS rebinding)."
                )
            for origin in headers.get(b"origin", []):
                text = origin.decode("latin-1")
                if not _loopback_origin(text):
                    return 403, (
                        f"Origin {text!r} is not a page of this machine's loopback address; "
                        "a server on loopback answers no other site's pages."
                    )
        if self._token is not None and not self._bears_token(scope, headers):
            return 401, "Missing or wrong token; send Authorization: Bearer TOKEN."
        return None

    def _bears_token(self, scope: _Scope, headers: dict[bytes, list[bytes]]) -> bool:
        assert self._token is not None
        given = [v[7:] for v in headers.get(b"authorization", []) if v.startswith(b"Bearer ")]
        if self._cookie is not None:
            for value in headers.get(b"cookie", []):
                for part in value.split(b";"):
                    key, _, text = part.strip().partition(b"=")
                    if key == self._cookie:
                        given.append(text)
            query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given.extend(text.encode() for text in query.get("token", []))
        # Every candidate is compared, so the time taken does not tell which matched.
        matches = [hmac.compare_digest(value, self._token) for value in given]
        return any(matches)

    async def _set_cookie(self, scope: _Scope, send: _Send, query: str) -> None:
        assert self._token is not None
        assert self._cookie is not None
        kept = [
            (key, value)
            for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True)
            if key != "token"
        ]
        where = urllib.parse.quote(scope.get("path", "/")) + (
            "?" + urllib.parse.urlencode(kept) if kept else ""
        )
        cookie = self._cookie + b"=" + self._token + b"; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", where.encode("latin-1")),
                    (b"set-cookie", cookie),
                    (b"content-length", b"0"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


_REASONS: Final = {401: "Unauthorized", 403: "Forbidden", 421: "Misdirected Request"}


async def _refuse(scope: _Scope, send: _Send, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = f"{status} {_REASONS[status]}: {message}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def image_root(folder: str | os.PathLike[str]) -> str:
    """Return the real path of a folder images may be read from.

    Raises:
        InvalidArgumentError: if ``folder`` is not a directory.
    """
    path = os.path.realpath(os.fspath(folder))
    if not os.path.isdir(path):
        msg = (
            f"The image folder {os.fspath(folder)!r} is not a directory; create it or pass another."
        )
        raise InvalidArgumentError(msg)
    return path
