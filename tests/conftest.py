"""Store fixtures: a store URL per kind, and a throwaway PostgreSQL server.

Also ``cache_dir``: kvmemory's per-user cache folder for the whole run, a
temporary one (``KVMEMORY_CACHE_DIR``); ``backend_calls``: the calls a test's store makes to one backend
operation, recorded on the way through to the real one; ``int8_kernel``: the coded tables' bound
by simsimd, then by numpy with simsimd refused; and ``planted_module``: a module on ``sys.path`` that leaves a marker file
when it is imported, for the tests that loading runs no code a file names.

The PostgreSQL server is found through ``KVMEMORY_TEST_POSTGRES_URL`` (a
server you run), or started here from the PostgreSQL binaries of the machine
(``initdb`` and ``pg_ctl`` in ``/usr/lib/postgresql/*/bin``; ``scripts/test``
installs them from Debian's packages when they are missing). Each test gets
its own schema, so tests never see each other's sessions. When CI is set, a
missing server fails the PostgreSQL tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# No hypothesis example is timed: the suite runs on shared, loaded machines, where a
# deadline (200 ms an example by default) or the "too slow" health check fails a
# test for the machine's load, not for kvmemory. Speed is measured in benchmarks/.
settings.register_profile("kvmemory", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kvmemory")

# The coded-vector tests' shared helpers assert inside (first_loads): rewritten, a failure shows its values.
pytest.register_assert_rewrite("coded_sessions")

STORE_KINDS = ("memory", "sqlite", "jsonl", "postgres")
PLANTED = "this_module_does_not_exist_yet"


def _find_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    return shutil.which(name)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres_user(argv: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI runs as root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


class ThrowawayServer:
    """A PostgreSQL server in a temporary directory, which a test may stop and start again.

    ``start()`` creates the cluster the first time (``initdb``) and starts
    the server on the same port each time; ``stop(mode)`` stops it
    (``fast`` ends every connection with "terminating connection due to
    administrator command"); ``remove()`` stops it and deletes its files.
    """

    def __init__(self) -> None:
        initdb = _find_bin("initdb")
        pg_ctl = _find_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise FileNotFoundError(
                "initdb/pg_ctl not found; run scripts/test, which installs PostgreSQL"
            )
        self._initdb = initdb
        self._pg_ctl = pg_ctl
        self.root = tempfile.mkdtemp(prefix="kvmemory-pg-")
        self._data = os.path.join(self.root, "data")
        self._log = os.path.join(self.root, "server.log")
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.port = _free_port()
        self.url = f"postgresql://kvmemory@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server (creating its cluster the first time) and wait until it accepts connections."""
        if not os.path.exists(self._data):
            argv = [self._initdb, "-D", self._data, "-A", "trust", "-U", "kvmemory"]
            subprocess.run(
                _as_postgres_user([*argv, "--no-sync", "-E", "UTF8"]),
                check=True,
                capture_output=True,
                stdin=subprocess.DEVNULL,
            )
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections=60"
        )
        started = subprocess.run(
            _as_postgres_user(
                [self._pg_ctl, "-D", self._data, "-l", self._log, "-o", options, "-w", "start"]
            ),
            check=False,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        if started.returncode:
            with open(self._log, encoding="utf-8", errors="replace") as log:
                tail = log.read()[-2000:]
            raise subprocess.CalledProcessError(
                started.returncode, started.args, started.stdout, started.stderr + tail.encode()
            )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: end the connections and shut down cleanly; ``immediate``: at once)."""
        subprocess.run(
            _as_postgres_user([self._pg_ctl, "-D", self._data, "-m", mode, "-w", "stop"]),
            check=False,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )

    def remove(self) -> None:
        """Stop the server and delete its files."""
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def _throwaway_server() -> Iterator[str]:
    server = ThrowawayServer()
    try:
        server.start()
        yield server.url
    finally:
        server.remove()


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point kvmemory's per-user cache folder (``KVMEMORY_CACHE_DIR``) at a temporary one for the whole run (subprocesses too): no test writes into the real home."""
    folder = tmp_path_factory.mktemp("kvmemory-cache")
    names = ("KVMEMORY_CACHE_DIR", "KVMEMORY_CACHE_MAX_BYTES")
    before = {name: os.environ.pop(name, None) for name in names}
    os.environ["KVMEMORY_CACHE_DIR"] = str(folder)
    try:
        yield folder
    finally:
        for name, value in before.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """Yield the URL of a PostgreSQL server for the tests (fail under CI, else skip, when none)."""
    url = os.environ.get("KVMEMORY_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    try:
        server = _throwaway_server()
        url = server.__enter__()
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        reason = f"no PostgreSQL server for the tests: {exc} {detail.decode(errors='replace')}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


@pytest.fixture
def own_postgres() -> Iterator[ThrowawayServer]:
    """Yield a PostgreSQL server of the test's own, started, which it may stop and start (fail under CI, else skip, when none)."""
    server: ThrowawayServer | None = None
    try:
        server = ThrowawayServer()
        server.start()
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        if server is not None:
            server.remove()
        detail = getattr(exc, "stderr", b"") or b""
        reason = f"no PostgreSQL server for the tests: {exc} {detail.decode(errors='replace')}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """Yield a PostgreSQL URL whose tables live in a fresh schema, dropped after the test."""
    psycopg = pytest.importorskip("psycopg") if not os.environ.get("CI") else __import__("psycopg")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_server else "?"
    yield f"{postgres_server}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(postgres_server, autocommit=True) as con:
        con.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Return a URL for a fresh, empty store of each kind."""
    kind = request.param
    if kind == "memory":
        return f"memory://{uuid.uuid4().hex}"
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'store.db'}"
    if kind == "jsonl":
        return f"jsonl://{tmp_path / 'logs'}"
    request.applymarker(pytest.mark.postgres)
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """Return a function giving a fresh store URL for a durable kind (or ``"memory"``: a fresh ``memory://`` name)."""

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite://{tmp_path / 'store.db'}"
        if kind == "jsonl":
            return f"jsonl://{tmp_path / 'logs'}"
        if kind == "memory":  # shared by name in this process, as a durable store is by path
            return f"memory://{uuid.uuid4().hex}"
        return str(request.getfixturevalue("postgres_url"))

    return make


@pytest.fixture(params=["simsimd", "numpy"])
def int8_kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Bound a coded table's rows by simsimd's int8 product (the ``simd`` extra; skipped where it is not installed), or by numpy with simsimd made unimportable."""
    from agents.memory.stores._search import compact

    if request.param == "simsimd":
        pytest.importorskip("simsimd")
        assert compact.int8_dot() is not None, "simsimd imports but its int8 product is not used"
    else:
        monkeypatch.setitem(sys.modules, "simsimd", None)  # import simsimd raises ImportError
        assert compact.int8_dot() is None
    return str(request.param)


@pytest.fixture
def backend_calls(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, str], list[tuple[Any, ...]]]:
    """Return ``record(backend, name)``: a list that gets the arguments of each later call of that operation.

    The backend's own operation still answers every call (no stand-in):
    the tests that count statements (a filtered search settles in two, a
    hybrid ranks no word alone) read the list afterwards.
    """

    def record(backend: Any, name: str) -> list[tuple[Any, ...]]:
        calls: list[tuple[Any, ...]] = []
        real = getattr(backend, name)

        def recorded(*args: Any) -> Any:
            calls.append(args)
            return real(*args)

        monkeypatch.setattr(backend, name, recorded)
        return calls

    return record


@pytest.fixture
def planted_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Plant module ``this_module_does_not_exist_yet`` (``Cls``, ``Color``); return its marker path.

    Importing the module writes the marker file, so a test can tell whether
    loading imported it. The module and the item class it registers are
    forgotten afterwards.
    """
    from agents.memory import _item

    marker = tmp_path / "imported.marker"
    folder = tmp_path / "planted"
    folder.mkdir()
    (folder / f"{PLANTED}.py").write_text(
        "import enum, pathlib\n"
        "from agents.memory import MemoryItem\n"
        f"pathlib.Path({str(marker)!r}).write_text('imported')\n"
        "class Cls(MemoryItem):\n"
        "    step: int = 0\n"
        "class Color(enum.Enum):\n"
        "    RED = 'red'\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(folder))
    yield marker
    sys.modules.pop(PLANTED, None)
    _item._CLASSES.pop(f"{PLANTED}:Cls", None)


def _chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


# The flags a headless Chromium needs in a container, with nothing fetched in the background.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Yield one headless Chromium driven by selenium for the run (fail under CI, else skip, when none).

    ``scripts/test`` installs Debian's ``chromium`` and ``chromium-driver`` when
    they are missing. Tests take it through ``browser``.
    """
    paths = _chromium_paths()
    if paths is None:
        reason = "no chromium and chromedriver for the browser tests; run scripts/test, which installs them"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    if not os.environ.get("CI"):  # under CI a missing selenium is an error, not a skip
        pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.binary_location = paths[0]
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=paths[1]))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: Any) -> Iterator[Any]:
    """Yield the run's Chromium on a blank page with an empty console log; leave it so.

    The console is recorded, so tests read its errors with
    ``browser.get_log("browser")``. A page left open keeps running: a live view
    whose server a test stopped goes on polling it, and each refused request is
    logged as an error. Leaving every test on ``about:blank`` with the log read
    keeps those errors out of the next test's console.
    """
    _blank(chromium)
    try:
        yield chromium
    finally:
        _blank(chromium)


def _blank(driver: Any) -> None:
    """Navigate ``driver`` to a blank page (stopping the last page's scripts) and clear its log."""
    driver.get("about:blank")
    driver.get_log("browser")
