"""A third-party backend (examples/jsonfile_backend.py: every session in one JSON file) reached through every door.

The example is written from the docs alone and implements nothing optional
(no keyword index, no vectors). Here it runs the sync and async contract
suites (with numpy, and in a subprocess where numpy cannot be imported),
opens under its own URL scheme through ``register_backend`` and through an
installed distribution's ``kvmemory.backends`` entry point (the CLI and
``serve``), and shows what the docs promise a backend about transactions
and read-only opening.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.memory import (
    InvalidStoreURLError,
    MemoryItem,
    StoreArgumentError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.stores import (
    AsyncStore,
    Backend,
    Store,
    StoredMemory,
    open_async_store,
    open_store,
    register_backend,
)
from agents.memory.stores.testing import (
    AsyncStoreContract,
    BackendContract,
    CountingEmbedder,
    MakeAsyncStore,
    MakeStore,
    StoreContract,
    vector_session,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "jsonfile_backend.py"


def _load_example() -> Any:
    """Import examples/jsonfile_backend.py as the module ``jsonfile_backend`` (what its entry point names)."""
    spec = importlib.util.spec_from_file_location("jsonfile_backend", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["jsonfile_backend"] = module
    spec.loader.exec_module(module)
    return module


example = sys.modules.get("jsonfile_backend") or _load_example()
register_backend("jsonfile", example.open_jsonfile)


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A jsonfile:// URL of a file that does not exist yet."""
    return f"jsonfile://{tmp_path / 'sessions.json'}"


class TestJSONFileStore(StoreContract):
    """The sync contract suite on the example backend, opened by its URL scheme."""

    @pytest.fixture
    def make_store(self, url: str) -> MakeStore:
        """Open handles on one JSON file with open_store."""
        return lambda read_only=False: open_store(url, read_only=read_only)


class TestJSONFileAsyncStore(AsyncStoreContract):
    """The async contract suite on the example backend, opened by its URL scheme."""

    @pytest.fixture
    def make_async_store(self, url: str) -> MakeAsyncStore:
        """Open async handles on one JSON file with open_async_store."""

        def make(*, read_only: bool = False) -> Awaitable[AsyncStore]:
            return open_async_store(url, read_only=read_only)

        return make


class TestJSONFileOperations(BackendContract):
    """The backend operations of the example, one by one."""

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Any:
        """Open backends on one JSON file."""
        return lambda: example.JSONFileBackend(str(tmp_path / "sessions.json"))


def test_the_contract_suites_pass_without_numpy() -> None:
    """With numpy unimportable, the sync and async suites pass on the example (the semantic tests skip, nothing fails)."""
    code = (
        "import sys; sys.modules['numpy'] = None; import pytest; "
        "sys.exit(pytest.main(sys.argv[1:]))"
    )
    here = Path(__file__).resolve()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            f"{here}::TestJSONFileStore",
            f"{here}::TestJSONFileAsyncStore",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in summary, summary
    assert " skipped" in summary, summary
    assert "failed" not in summary, summary


def test_a_read_only_open_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    """open_store(read_only=True) hands read_only to the opener: a missing file is StoreNotFoundError and is not created."""
    path = tmp_path / "missing.json"
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        open_store(f"jsonfile://{path}", read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_open_gives_a_read_only_backend_and_store(url: str) -> None:
    """The backend learns it is read-only from its opener; the store over it refuses writes."""
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1)])
    with open_store(url, read_only=True) as reader:
        assert reader.read_only
        assert reader.backend.read_only
        with pytest.raises(StoreError, match="read-only"):
            reader.append("s", [MemoryItem(step=2)])
        assert reader.count("s") == 1


def test_a_store_follows_its_backends_read_only_flag(tmp_path: Path) -> None:
    """Store(backend) is read-only when the backend was opened read-only, and refuses read_only=False."""
    path = str(tmp_path / "s.json")
    example.JSONFileBackend(path).close()
    backend = example.JSONFileBackend(path, read_only=True)
    assert Store(backend).read_only
    with pytest.raises(StoreArgumentError, match="opened read-only"):
        Store(backend, read_only=False)


def test_open_async_store_takes_a_store_of_ones_own_backend(tmp_path: Path) -> None:
    """open_async_store(Store(backend)) runs that store's calls awaited; read_only=True of a writable store is refused."""
    path = str(tmp_path / "s.json")

    async def main() -> int:
        async with open_async_store(Store(example.JSONFileBackend(path))) as store:
            await store.append("s", [MemoryItem(step=1), MemoryItem(step=2)])
            return await store.count("s")

    assert asyncio.run(main()) == 2
    with pytest.raises(StoreArgumentError, match="writable store"):
        asyncio.run(_await(open_async_store(Store(example.JSONFileBackend(path)), read_only=True)))


async def _await(opening: Awaitable[AsyncStore]) -> AsyncStore:
    return await opening


def test_index_embeddings_without_vector_operations_is_refused_before_embedding(url: str) -> None:
    """A backend without the vector operations: index_embeddings names keeps_vectors and embeds nothing."""
    embedder = CountingEmbedder()
    with open_store(url) as store:
        store.append("s", vector_session())
        assert not store.keeps_vectors
        with pytest.raises(StoreError, match=r"keeps no vectors.*Backend\.keeps_vectors"):
            store.index_embeddings("s", embedder)
    assert embedder.texts == 0


def test_semantic_search_without_vector_operations_embeds_the_items_at_each_query(url: str) -> None:
    """A backend without the vector operations: each semantic query embeds the session's texts again, and stores none."""
    pytest.importorskip("numpy") if not os.environ.get("CI") else None
    embedder = CountingEmbedder()
    with open_store(url) as store:
        store.append("s", vector_session())
        first = store.search("s", "export the report", 2, mode="semantic", embedder=embedder)
        once = embedder.texts
        again = store.search("s", "export the report", 2, mode="semantic", embedder=embedder)
        assert [hit.seq for hit in again] == [hit.seq for hit in first]
        assert embedder.texts == 2 * once > 2
        assert store.vector_model("s") is None


class Watching(example.JSONFileBackend):  # type: ignore[misc, name-defined]  # the example's class, loaded by path
    """The example backend, failing any call the store makes while one of its transactions is open but a ``tx`` one."""

    inside = False

    @contextlib.contextmanager
    def transaction(self, session_id: str) -> Iterator[Any]:
        assert not self.inside, "transaction() inside a transaction"
        with super().transaction(session_id) as tx:
            self.inside = True
            try:
                yield tx
            finally:
                self.inside = False

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name in _NOT_IN_TRANSACTION and object.__getattribute__(self, "inside"):
            pytest.fail(f"the store called {name}() while its transaction was open")
        return value


_NOT_IN_TRANSACTION = frozenset(
    name
    for name, value in vars(Backend).items()
    if inspect.isfunction(value)
    and not name.startswith("_")
    and "tx" not in inspect.signature(value).parameters
    and name not in ("store_error", "transaction")
)


def test_the_store_calls_only_tx_operations_inside_its_transactions(tmp_path: Path) -> None:
    """Inside a transaction the store calls only the operations that take tx, as docs/stores.md says."""
    assert {"read_rows", "count", "read_session", "delete_session"} <= _NOT_IN_TRANSACTION
    assert "insert_rows" not in _NOT_IN_TRANSACTION
    with Store(Watching(str(tmp_path / "s.json"))) as store:
        memory = StoredMemory(store, "s", max_items=5)
        memory.add_memory_items([MemoryItem(step=n, text=f"note {n}") for n in range(8)])
        memory.content[-1]["text"] = "changed"
        memory.delete_memory_item(memory.content[0])
        store.append_steps("s", [MemoryItem(action="next")])
        store.set_metadata("s", {"agent": "a"})
        with store.batch("s") as batch:
            batch.keep_last(3)
            batch.expire(3600)
        assert store.search("s", "note", 2)
        store.clear("s")
        store.delete_session("s")


def test_register_backend_refuses_bad_and_taken_schemes() -> None:
    """A scheme that is not a lower-case URL scheme, is kvmemory's own, or is taken by another opener is refused by name."""
    with pytest.raises(StoreArgumentError, match="lower-case URL scheme"):
        register_backend("My DB", example.open_jsonfile)
    with pytest.raises(StoreArgumentError, match="kvmemory's own store"):
        register_backend("sqlite", example.open_jsonfile)
    with pytest.raises(StoreArgumentError, match="already registered"):
        register_backend(
            "jsonfile", lambda url, *, read_only: example.open_jsonfile(url, read_only=read_only)
        )
    with pytest.raises(StoreArgumentError, match="opener called as"):
        register_backend("notcallable", "jsonfile_backend:open_jsonfile")  # type: ignore[arg-type]  # a wrong type on purpose
    register_backend("jsonfile", example.open_jsonfile)  # the same opener again: nothing happens


def test_an_opener_that_returns_no_backend_is_refused(tmp_path: Path) -> None:
    """An opener returning something other than a Backend is a named error."""
    register_backend("notabackend", lambda url, *, read_only: object())  # type: ignore[arg-type, return-value]  # wrong on purpose
    with pytest.raises(StoreArgumentError, match="returns a Backend"):
        open_store("notabackend://x")


def test_an_unknown_scheme_names_the_ways_to_register_one() -> None:
    """An unknown scheme's error names register_backend and the entry-point group."""
    with pytest.raises(InvalidStoreURLError, match=r"register_backend\(\).*'kvmemory\.backends'"):
        open_store("nosuchdb://somewhere")


# -- an installed distribution that declares the backend's entry point ----------------


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder holding an installed distribution (its metadata only) that declares two kvmemory.backends entry points."""
    folder = tmp_path / "site"
    info = folder / "kvmemory_jsonfile-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kvmemory-jsonfile\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[kvmemory.backends]\n"
        "jsonfile-ep = jsonfile_backend:open_jsonfile\n"
        "jsonfile-broken = jsonfile_backend:no_such_opener\n"
    )
    return folder


def _child_env(site: Path) -> dict[str, str]:
    """The environment of a kvmemory process that sees the distribution and the example's module."""
    paths = [str(ROOT), str(site), str(EXAMPLE.parent)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _write_session(path: Path) -> None:
    with open_store(f"jsonfile://{path}") as store:
        store.append("demo", [MemoryItem(step=1, action="open the report"), MemoryItem(step=2)])


def test_an_entry_point_backend_opens_in_process(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheme declared by an installed distribution opens without register_backend."""
    monkeypatch.syspath_prepend(str(site))
    path = tmp_path / "s.json"
    _write_session(path)
    with open_store(f"jsonfile-ep://{path}", read_only=True) as store:
        assert store.count("demo") == 2
    with pytest.raises(InvalidStoreURLError, match=r"jsonfile_backend:no_such_opener.*reinstall"):
        open_store(f"jsonfile-broken://{path}")


def test_the_cli_shows_a_session_of_an_entry_point_backend(site: Path, tmp_path: Path) -> None:
    """kvmemory sessions and show open jsonfile-ep:// URLs through the entry point, importing no file named on the line."""
    path = tmp_path / "s.json"
    _write_session(path)
    run = [sys.executable, "-m", "agents.cli"]
    options: dict[str, Any] = {
        "env": _child_env(site),
        "capture_output": True,
        "text": True,
        "check": False,
        "timeout": 120,
        "stdin": subprocess.DEVNULL,
    }
    listed = subprocess.run([*run, "sessions", f"jsonfile-ep://{path}"], **options)
    assert listed.returncode == 0, listed.stderr
    assert "demo" in listed.stdout
    shown = subprocess.run(
        [*run, "show", f"jsonfile-ep://{path}", "--session", "demo", "--keys", "step,action"],
        **options,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "step=1  action='open the report'"


def test_serve_serves_a_session_of_an_entry_point_backend(site: Path, tmp_path: Path) -> None:
    """kvmemory serve opens a jsonfile-ep:// store and lists its sessions."""
    pytest.importorskip("starlette") if not os.environ.get("CI") else None
    path = tmp_path / "s.json"
    _write_session(path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "agents.cli", "serve", f"jsonfile-ep://{path}", "--port", str(port)],
        env=_child_env(site),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60  # waiting for the server to listen, not a timed assertion
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"kvmemory serve did not start: {process.communicate()[0]}")
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sessions", timeout=30) as answer:
            body = answer.read().decode()
        assert "demo" in body
    finally:
        process.terminate()
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def test_the_mcp_server_opens_a_registered_scheme(url: str) -> None:
    """MemoryServer opens a registered scheme's store by its URL, as the kvmemory mcp command does."""
    pytest.importorskip("mcp") if not os.environ.get("CI") else None
    from agents.integrations.mcp import MemoryServer

    with open_store(url) as store:
        store.append("demo", [MemoryItem(step=1)])
    with MemoryServer(url, read_only=True) as server:
        assert server.store.read_only
        assert server.store.sessions() == ["demo"]


def test_the_example_runs_as_a_script(tmp_path: Path) -> None:
    """python examples/jsonfile_backend.py writes, searches and reads back a session, sync and async."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "sessions.json")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.stdout.splitlines() == [
        "2 items; 'report' found at step 1",
        "awaited count: 2",
    ]
