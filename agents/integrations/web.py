"""A live view of a store in the browser: ``kvmemory serve STORE`` (extra ``kvmemory[serve]``).

The server lists the store's sessions and opens each in the same timeline
page that ``replay_html`` writes, in a live mode: the page asks the server
for the newest steps (:meth:`Store.tail`), loads earlier ones on demand,
polls for steps other processes append (:meth:`Store.records` with
``after``), and searches through the store's own :meth:`Store.search`; a
hit opens in place among its neighbours (:meth:`SessionService.around`).
It never holds a whole session, so a session of a million steps opens as
fast as one of a hundred.

It only reads: the store is opened with ``read_only=True``, so nothing is
created, migrated or written. It binds 127.0.0.1 by default; binding any
other address needs a token, which every request must then bear (the page,
the JSON API and images alike), as ``?token=`` on the first visit (the
answer sets a cookie and redirects to the address without the token), a
cookie, or ``Authorization: Bearer``. Anything else gets a bare 401. On
loopback, a request addressed to another host name or sent by another site's
page is refused (421 or 403), so a web page cannot read the store through DNS
rebinding; the gate is :class:`agents.integrations._local.LocalGate`, the
same as ``kvmemory mcp --http``'s.

Every value reaches the browser as JSON and is put in the page as text
only; the pages carry a strict Content-Security-Policy (no script but the
page's own, no connection but to this server). An image is shown only for
a path inside a folder given with ``image_dirs`` (``--images``), served by
an endpoint that checks the folder and the image's bytes again on every
request; any other image field is named on its card with its value, as
text, and the reason it is not shown.

Starlette and uvicorn (``pip install 'kvmemory[serve]'``) are imported when
the app is built.
"""

from __future__ import annotations

import datetime as dt
import html
import os
import socket
import urllib.parse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from agents.agent._timeline import live_page, timeline_step
from agents.integrations._local import LocalGate, check_bind, image_root
from agents.memory import _codec
from agents.memory.exceptions import (
    AgentMemoryError,
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidQueryError,
    InvalidSessionIdError,
    StoreArgumentError,
    missing_dependency,
)
from agents.memory.prompt import DEFAULT_IMAGE_KEYS
from agents.memory.stores import Store, StoredRecord, open_store
from agents.service import SessionService

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from agents.memory.search import Embedder

__all__ = ["DEFAULT_PORT", "live_app", "serve"]

DEFAULT_PORT: Final = 8766
"""The port ``kvmemory serve`` listens on unless told otherwise."""

_PAGE_SIZE: Final = 500  # items a timeline opens on, and loads per "load earlier" click
_MOST_NEW: Final = 2000  # most new items one poll answer carries (the page asks again at once)
_HITS: Final = 50
_IMAGE_BYTES: Final = 20 * 1024 * 1024
_COOKIE: Final = "kvmemory_token"
_IMAGE_TYPES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)
_TIMELINE_CSP: Final = (
    "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; "
    "script-src {script}; connect-src 'self'; base-uri 'none'; form-action 'none'"
)
_LIST_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_API_CSP: Final = "default-src 'none'; frame-ancestors 'none'"


def live_app(
    store: Store,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    image_dirs: Sequence[str | os.PathLike[str]] = (),
    embedder: Embedder | None = None,
    poll_seconds: float = 1.0,
    cost_key: str = "cost",
    tokens_key: str = "prompt_tokens",
    label_key: str = "agent",
    image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS,
) -> Starlette:
    """Return the ASGI app of the live view of ``store`` (what ``kvmemory serve`` runs).

    Args:
        store: The store to show; open it with ``read_only=True`` (the app
            only reads, and a read-only handle makes sure).
        host: The address the app is served on. On a loopback address (the
            default) every request must be addressed to a loopback name
            (``Host``) and come from no other site (``Origin``), or it gets
            421 or 403: the protection against DNS rebinding.
        token: When given, every request must bear it (``?token=``, the cookie
            that answer sets, or ``Authorization: Bearer``); others get 401.
        image_dirs: Folders whose images the pages may show; an image field
            with a path elsewhere is shown as its value, with the reason.
        embedder: Offer semantic and hybrid search for the sessions whose
            vectors came from this model.
        poll_seconds: How often an open page asks for new steps.
        cost_key: The numeric field summed as a session's cost, and charted,
            unless the session's metadata names its own (``cost_keys``, as
            the UFO log importer saves: ``llm_cost``, ``Cost``).
        tokens_key: The numeric field charted as prompt tokens.
        label_key: The field naming the agent of a step (its lane).
        image_keys: The fields that hold image paths or URLs.

    Returns:
        A Starlette application.

    Raises:
        MissingDependencyError: naming ``kvmemory[serve]`` when Starlette is missing.
        InvalidArgumentError: for a token shorter than 16 characters, a ``host``
            beyond loopback without a token, a poll
            interval outside 0.1 to 3600 seconds, or an image folder that is not a directory.
    """
    try:
        from starlette.applications import Starlette
        from starlette.responses import HTMLResponse, Response
        from starlette.routing import Route
    except ImportError as exc:
        raise missing_dependency("starlette", "serve") from exc
    check_bind(host, token, server="the live view")
    if not 0.1 <= poll_seconds <= 3600:
        msg = f"poll_seconds must be between 0.1 and 3600, got {poll_seconds!r}."
        raise InvalidArgumentError(msg)
    roots = tuple(image_root(folder) for folder in image_dirs)
    view = _View(store, roots, embedder, cost_key, label_key, tuple(image_keys))
    poll_ms = round(poll_seconds * 1000)

    def json(data: Any, status: int = 200) -> Response:
        return Response(
            _codec.dumps(data),
            status_code=status,
            media_type="application/json",
            headers=_headers(_API_CSP),
        )

    def failed(exc: Exception) -> Response:
        status = (
            400
            if isinstance(
                exc,
                (
                    EmbedderMismatchError,  # a mode this session's vectors cannot answer
                    InvalidQueryError,
                    InvalidSessionIdError,
                    StoreArgumentError,
                ),
            )
            else 500
        )
        return json({"error": str(exc)}, status)

    def index(request: Request) -> Response:
        try:
            rows = view.sessions()
        except AgentMemoryError as exc:
            return HTMLResponse(_error_page(str(exc)), 500, headers=_headers(_LIST_CSP))
        return HTMLResponse(_list_page(_shown_url(store.url), rows), headers=_headers(_LIST_CSP))

    def session_page(request: Request) -> Response:
        sid = request.query_params.get("id", "")
        try:
            info = view.service.info(sid)
        except AgentMemoryError as exc:
            return HTMLResponse(_error_page(str(exc)), 400, headers=_headers(_LIST_CSP))
        if info is None:
            return HTMLResponse(
                _error_page(f"No session {sid!r} in this store."), 404, headers=_headers(_LIST_CSP)
            )
        config = {
            "api": "",
            "session": sid,
            "page": _PAGE_SIZE,
            "poll_ms": poll_ms,
            "modes": view.service.modes(sid),
            "cost": view.service.cost_keys(info)[0],
            "tokens": tokens_key,
        }
        page, policy = live_page(f"Session {sid} (live)", config, csp=_TIMELINE_CSP)
        return HTMLResponse(page, headers=_headers(policy + "; frame-ancestors 'none'"))

    def api_sessions(request: Request) -> Response:
        try:
            return json({"sessions": view.sessions()})
        except AgentMemoryError as exc:
            return failed(exc)

    def api_tail(request: Request) -> Response:
        params = request.query_params
        try:
            n = _int(params.get("n", str(_PAGE_SIZE)), "n", 1, 100_000)
            before = params.get("before")
            return json(
                view.tail(
                    params.get("session", ""),
                    n,
                    None if before in (None, "null") else _int(before, "before", 0, 2**63 - 1),
                )
            )
        except AgentMemoryError as exc:
            return failed(exc)

    def api_after(request: Request) -> Response:
        params = request.query_params
        try:
            seq = _int(params.get("seq", "-1"), "seq", -1, 2**63 - 1)
            return json(view.after(params.get("session", ""), None if seq < 0 else seq))
        except AgentMemoryError as exc:
            return failed(exc)

    def api_around(request: Request) -> Response:
        params = request.query_params
        try:
            seq = _int(params.get("seq", ""), "seq", 0, 2**63 - 1)
            n = _int(params.get("n", str(_PAGE_SIZE // 2)), "n", 0, 50_000)
            return json(view.around(params.get("session", ""), seq, n))
        except AgentMemoryError as exc:
            return failed(exc)

    def api_count(request: Request) -> Response:
        try:
            return json(view.count(request.query_params.get("session", "")))
        except AgentMemoryError as exc:
            return failed(exc)

    def api_search(request: Request) -> Response:
        params = request.query_params
        try:
            return json(
                view.search(
                    params.get("session", ""), params.get("q", ""), params.get("mode", "keyword")
                )
            )
        except AgentMemoryError as exc:
            return failed(exc)

    def image(request: Request) -> Response:
        found = view.image(request.query_params.get("path", ""))
        if found is None:
            return Response(
                b"not an image this server may show",
                404,
                media_type="text/plain",
                headers=_headers(_API_CSP),
            )
        body, kind = found
        return Response(body, media_type=kind, headers=_headers(_API_CSP))

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/session", session_page),
            Route("/api/sessions", api_sessions),
            Route("/api/tail", api_tail),
            Route("/api/after", api_after),
            Route("/api/around", api_around),
            Route("/api/count", api_count),
            Route("/api/search", api_search),
            Route("/image", image),
            Route("/favicon.ico", lambda request: Response(b"", 204, headers=_headers(_API_CSP))),
        ],
    )
    app.add_middleware(LocalGate, host=host, token=token, cookie=_COOKIE)
    return app


def serve(
    url: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    image_dirs: Sequence[str | os.PathLike[str]] = (),
    embedder: Embedder | None = None,
    poll_seconds: float = 1.0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Open the store at ``url`` read-only and serve its live view until interrupted.

    Args:
        url: A store URL or SQLite path (it must exist; it is never created or migrated).
        host: The address to bind; anything but a loopback address needs ``token``.
        port: The port to bind.
        token: The token every request must bear (see :func:`live_app`).
        image_dirs: Folders whose images the pages may show.
        embedder: Offer semantic and hybrid search with this model.
        poll_seconds: How often an open page asks for new steps.
        on_ready: Called with the address served before serving starts (the
            command line prints it).

    Raises:
        InvalidArgumentError: if ``host`` is not a loopback address and no
            token is given, or for an argument :func:`live_app` refuses.
        MissingDependencyError: naming ``kvmemory[serve]`` when Starlette or uvicorn is missing.
        StoreNotFoundError: if the store does not exist.
        StoreError: if the store cannot be opened.
        OSError: if the address cannot be bound (a port in use, an unknown host).
    """
    check_bind(host, token, server="the live view")
    try:
        import uvicorn
    except ImportError as exc:
        raise missing_dependency("uvicorn", "serve") from exc
    with open_store(url, read_only=True) as store:
        app = live_app(
            store,
            host=host,
            token=token,
            image_dirs=image_dirs,
            embedder=embedder,
            poll_seconds=poll_seconds,
        )
        with _bind(host, port) as sock:
            where = f"[{host}]" if ":" in host else host
            if on_ready is not None:
                on_ready(f"http://{where}:{sock.getsockname()[1]}/")
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            server.run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket here, so a port in use is an error before anything is printed."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        msg = f"Cannot listen on {host}:{port}: {exc}; pick another --host."
        raise OSError(msg) from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        msg = f"Cannot listen on {host}:{port}: {exc.strerror or exc}; stop what uses it or pick another --port."
        raise OSError(msg) from exc
    return sock


class _View:
    """The store's side of the app: the session service, and what the pages need of each step."""

    def __init__(
        self,
        store: Store,
        roots: tuple[str, ...],
        embedder: Embedder | None,
        cost_key: str,
        label_key: str,
        image_keys: tuple[str, ...],
    ) -> None:
        self.service = SessionService(
            store, cost_key=cost_key, agent_key=label_key, embedder=embedder
        )
        self.roots = roots
        self.image_keys = image_keys
        self.lanes: dict[str, str] = {}

    def sessions(self) -> list[dict[str, Any]]:
        return [
            {
                "id": row.session_id,
                "items": row.items,
                "agents": list(row.agents),
                "last_step": row.last_step,
                "created": _when(row.created),
                "changed": _when(row.changed),
                "cost": row.cost,
            }
            for row in self.service.overviews()
        ]

    def _steps(self, sid: str, records: Sequence[StoredRecord]) -> list[dict[str, Any]]:
        lane = self.lanes.get(sid)
        if lane is None:
            info = self.service.info(sid)
            lane = self.service.agent_keys(info)[0]
            if info is not None:  # a session not made yet may be made with agent keys of its own
                self.lanes[sid] = lane
        return [
            timeline_step(
                record.seq,
                record.item,
                step_key=self.service.step_key(sid),
                image_keys=self.image_keys,
                label_key=lane,
                image=self._image_ref,
            )
            for record in records
        ]

    def tail(self, sid: str, n: int, before: int | None) -> dict[str, Any]:
        """Return the last ``n`` items of a session, or the last ``n`` before seq ``before``."""
        window = self.service.tail(sid, n, before=before)
        # No count: counting a long session's rows would make opening it grow
        # with its length (the page asks /api/count once it shows the steps).
        return self._run(sid, window.records, earlier=window.earlier)

    def count(self, sid: str) -> dict[str, Any]:
        """Return a session's item count with the seq of its newest item, read together."""
        count, last = self.service.count(sid)
        return {"count": count, "last": last}

    def around(self, sid: str, seq: int, n: int) -> dict[str, Any]:
        """Return the item at seq ``seq`` with up to ``n`` items each side (a search hit opened in place)."""
        window = self.service.around(sid, seq, n)
        return self._run(sid, window.records, earlier=window.earlier, later=window.later)

    def _run(self, sid: str, records: Sequence[StoredRecord], **more: bool) -> dict[str, Any]:
        """A run of consecutive steps as the page takes it: the steps, their first and last seq, and ``more`` flags."""
        return {
            "steps": self._steps(sid, records),
            "first": records[0].seq if records else None,
            "last": records[-1].seq if records else None,
            **more,
        }

    def after(self, sid: str, seq: int | None) -> dict[str, Any]:
        # No count here: counting a long session's rows costs more than the poll itself.
        records, more = self.service.after(sid, seq, _MOST_NEW)
        return {
            "steps": self._steps(sid, records),
            "last": records[-1].seq if records else seq,
            "more": more,
        }

    def search(self, sid: str, query: str, mode: str) -> dict[str, Any]:
        hits = self.service.search(sid, query, _HITS, mode=mode)
        records = [StoredRecord(hit.seq, hit.item) for hit in hits]
        return {"steps": self._steps(sid, records), "scores": [hit.score for hit in hits]}

    def _image_ref(self, ref: str) -> list[Any]:
        """Return ``[URL, ref, ""]`` for an image this server shows, or ``[None, ref, why]``."""
        lowered = ref.lower()
        if lowered.startswith(("http://", "https://")):
            return [None, ref, "link"]
        if ":" in ref.split("/", 1)[0] and not (len(ref) > 2 and ref[1] == ":"):
            return [None, ref, "not a file path or an http(s) URL"]
        if not self.roots:
            return [None, ref, "start kvmemory serve with --images DIR to show images"]
        path = self._allowed(ref)
        if path is None or _image_type(path, 12) is None:
            return [None, ref, "not an image file inside an --images folder"]
        return ["/image?path=" + urllib.parse.quote(ref, safe=""), ref, ""]

    def _allowed(self, ref: str) -> str | None:
        if not ref or "\x00" in ref:
            return None
        path = os.path.realpath(ref)
        if not any(os.path.commonpath([root, path]) == root for root in self.roots):
            return None
        if not os.path.isfile(path):
            return None
        return path

    def image(self, ref: str) -> tuple[bytes, str] | None:
        """Return an image's bytes and type, if it lies in an allowed folder and is one."""
        path = self._allowed(ref)
        if path is None:
            return None
        found = _image_type(path, _IMAGE_BYTES + 1)
        if found is None or len(found[0]) > _IMAGE_BYTES:
            return None
        return found


def _image_type(path: str, size: int) -> tuple[bytes, str] | None:
    """Read up to ``size`` bytes of a file; return them with the image type they start with."""
    try:
        with open(path, "rb") as file:
            body = file.read(size)
    except OSError:
        return None
    for magic, kind in _IMAGE_TYPES:
        if body.startswith(magic):
            return body, kind
    if body[:4] == b"RIFF" and body[8:12] == b"WEBP":
        return body, "image/webp"
    return None


def _when(moment: dt.datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _shown_url(url: str) -> str:
    """Return a store URL fit to show in a page: any password replaced by ``***``."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _int(text: str, name: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        msg = f"The query parameter {name!r} must be a whole number from {low} to {high}, got {text!r}."
        raise StoreArgumentError(msg)
    return value


def _headers(policy: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


_PAGE_STYLE: Final = """
body { margin: 0; background: #f6f7f9; color: #1d2330;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { padding: 1rem 1.4rem 3rem; }
h1 { font-size: 1.2rem; margin: 0 0 .8rem; }
table { border-collapse: collapse; background: #fff; border: 1px solid #dde1e8; border-radius: 8px; }
th, td { text-align: left; padding: .45rem .8rem; border-bottom: 1px solid #dde1e8; vertical-align: top; }
th { color: #687085; font-weight: 600; font-size: 12.5px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
a { color: #3b6fd8; }
.muted { color: #687085; }
"""


def _list_page(url: str, rows: list[dict[str, Any]]) -> str:
    e = html.escape
    body = []
    for row in rows:
        link = "/session?id=" + urllib.parse.quote(row["id"], safe="")
        body.append(
            "<tr>"
            f'<td><a href="{e(link)}">{e(row["id"])}</a></td>'
            f'<td class="num">{row["items"]:,}</td>'
            f"<td>{e(', '.join(row['agents'])) or '<span class=muted>none</span>'}</td>"
            f"<td>{e(row['last_step'])}</td>"
            f"<td>{e(row['created'])}</td>"
            f"<td>{e(row['changed']) or '<span class=muted>not while served</span>'}</td>"
            f'<td class="num">{row["cost"]:.6g}</td>'
            "</tr>"
        )
    table = (
        "<table><thead><tr><th>session</th><th>items</th><th>agents</th><th>last step</th>"
        "<th>created</th><th>last change</th><th>total cost</th></tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
        if rows
        else "<p class=muted>This store has no sessions yet.</p>"
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>kvmemory: {e(url)}</title><style>{_PAGE_STYLE}</style></head><body><main>"
        f"<h1>Sessions of {e(url)}</h1>{table}"
        "<p class=muted>Each session opens as a live timeline. Reload this page for new sessions and counts.</p>"
        "</main></body></html>"
    )


def _error_page(message: str) -> str:
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>kvmemory: error</title>"
        f"<style>{_PAGE_STYLE}</style></head><body><main><h1>Cannot show this</h1>"
        f'<p>{html.escape(message)}</p><p><a href="/">all sessions</a></p></main></body></html>'
    )
