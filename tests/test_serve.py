"""Tests for ``kvmemory serve`` (agents.integrations.web): a real server process, real stores, real Chromium."""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_timeline import png, screenshot

from agents.memory import MemoryItem
from agents.memory.stores import open_store

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "build" / "screenshots" / "serve.png"
DOCS_SCREENSHOT = ROOT / "docs" / "serve.png"
TOKEN = "a-serve-token-of-some-length"
UNAUTHORIZED = b"401 Unauthorized: Missing or wrong token; send Authorization: Bearer TOKEN.\n"
LOCAL = "http://127.0.0.1:8766"  # the test client's address: a loopback name, as the gate requires
HOSTILE = "<script>window.kvPwned = 1</script><img src=x onerror='window.kvPwned = 2'>"

pytest.importorskip("starlette") if not os.environ.get("CI") else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env(**extra: str) -> dict[str, str]:
    """The environment of a child process: this worktree's package first on the path."""
    values = dict(os.environ)
    values["PYTHONPATH"] = os.pathsep.join([str(ROOT), values.get("PYTHONPATH", "")])
    values.update(extra)
    return values


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def get(
    url: str, headers: dict[str, str] | None = None, *, follow: bool = True
) -> tuple[int, dict[str, str], bytes]:
    """GET a URL and return its status, headers and body, 4xx and 5xx (and unfollowed 3xx) included."""
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@contextlib.contextmanager
def serving(url: str, *args: str, token: str | None = None) -> Iterator[str]:
    """Run ``python -m agents.cli serve URL`` on a free port; yield its base address."""
    port = free_port()
    extra = {} if token is None else {"KVMEMORY_SERVE_TOKEN": token}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agents.cli",
            "serve",
            url,
            "--port",
            str(port),
            "--poll",
            "0.2",
            *args,
        ],
        env=env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # waiting for the server to listen, not a timed assertion
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=1),
            ):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                output = process.communicate()[0]
                pytest.fail(f"kvmemory serve did not start: {output}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def append_in_another_process(url: str, session: str, texts: list[str], first_step: int) -> None:
    """Append one item per text to a session from a second Python process."""
    code = textwrap.dedent(
        """
        import sys
        from agents.memory import MemoryItem
        from agents.memory.stores import open_store
        url, session, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
        with open_store(url) as store:
            for n, text in enumerate(sys.argv[4:]):
                store.append(session, [MemoryItem(step=first + n, agent="Writer", thought=text, cost=0.5)])
        """
    )
    subprocess.run(
        [sys.executable, "-c", code, url, session, str(first_step), *texts],
        env=env(),
        check=True,
        capture_output=True,
        timeout=120,
    )


def fill(url: str, session: str, n: int, *, agent: str = "Planner") -> None:
    with open_store(url) as store:
        store.append(
            session,
            [
                MemoryItem(
                    step=i,
                    agent=agent if i % 3 else "Executor",
                    thought=f"thought number {i}",
                    cost=0.001 * i,
                )
                for i in range(n)
            ],
        )


def wait(browser: Any, script: str, *args: Any, seconds: float = 20) -> Any:
    """Wait until ``script`` returns something truthy in the page, and return it."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, seconds, poll_frequency=0.05).until(
        lambda driver: driver.execute_script(script, *args)
    )


def card_texts(browser: Any) -> list[str]:
    return list(
        browser.execute_script(
            "return [...document.querySelectorAll('.card')].map(c => c.textContent)"
        )
    )


def open_session(browser: Any, base: str, session: str) -> None:
    """Open the session list, follow the session's link, and wait for its first steps."""
    browser.get(base + "/")
    link = browser.find_element("link text", session)
    link.click()
    wait(browser, "return document.querySelectorAll('.card').length > 0")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite://{tmp_path / 'runs.db'}"
    fill(url, "run-1", 40)
    return url


# -- the session list and the API, without a browser ---------------------------------------


def test_session_list_shows_items_agents_and_cost(sqlite_url: str) -> None:
    """The list names each session with its item count, agents, last step and total cost."""
    fill(sqlite_url, "run-2", 3, agent="Solo")
    with serving(sqlite_url) as base:
        status, headers, body = get(base + "/")
    page = body.decode()
    assert status == 200
    assert "default-src 'none'" in headers["content-security-policy"]
    assert '<a href="/session?id=run-1">run-1</a>' in page
    assert '<td class="num">40</td><td>Executor, Planner</td><td>39</td>' in page
    assert f"{sum(0.001 * i for i in range(40)):.6g}" in page
    assert '<td class="num">3</td><td>Executor, Solo</td><td>2</td>' in page


def test_live_page_runs_only_its_own_script(sqlite_url: str) -> None:
    """The live page's policy pins its one script by hash and connects only to its own server."""
    with serving(sqlite_url) as base:
        _, headers, body = get(base + "/session?id=run-1")
    policy = headers["content-security-policy"]
    assert "script-src 'sha256-" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";")[0]
    assert "connect-src 'self'" in policy
    assert "default-src 'none'" in policy
    meta = html.escape(policy.removesuffix("; frame-ancestors 'none'"))
    assert f'content="{meta}"' in body.decode()  # the page's own copy of the policy


def test_session_list_shows_the_agents_of_a_ufo2_import(tmp_path: Path) -> None:
    """A UFO 2 log imported into a store lists its agents (key ``Agent``), and its lanes are those agents."""
    from agents.integrations.ufo import import_ufo_log

    folder = tmp_path / "run"
    folder.mkdir()
    lines = [
        {"Step": 1, "Agent": "HostAgent", "Cost": 0.5, "Subtask": "open Word"},
        {"Step": 2, "Agent": "AppAgent", "Cost": 0.25, "Subtask": "type"},
    ]
    (folder / "response.log").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    url = f"sqlite://{tmp_path / 'ufo.db'}"
    import_ufo_log(folder, url, "ufo-1")
    with serving(url) as base:
        rows = orjson.loads(get(base + "/api/sessions")[2])["sessions"]
        tail = orjson.loads(get(base + "/api/tail?session=ufo-1&n=5")[2])
    assert [(row["id"], row["agents"], row["cost"]) for row in rows] == [
        ("ufo-1", ["AppAgent", "HostAgent"], 0.75)
    ]
    assert [step["l"] for step in tail["steps"]] == ["HostAgent", "AppAgent"]


def test_session_list_sums_the_cost_fields_the_session_names(tmp_path: Path) -> None:
    """A session whose metadata names its cost fields (a UFO 3 import: llm_cost) is summed by them."""
    url = f"sqlite://{tmp_path / 'ufo.db'}"
    with open_store(url) as store:
        store.append("ufo3", [MemoryItem(step=1, llm_cost=0.25), MemoryItem(step=2, llm_cost=0.5)])
        store.set_metadata("ufo3", {"cost_keys": ["llm_cost"]})
    with serving(url) as base:
        page = get(base + "/")[2].decode()
        live = get(base + "/session?id=ufo3")[2].decode()
    assert '<td class="num">0.75</td>' in page
    assert '"cost":"llm_cost"' in live


def test_session_list_adds_up_appends_since_the_last_reload(sqlite_url: str) -> None:
    """A reload after another process appended shows the new count, agent, last step and cost."""
    with serving(sqlite_url) as base:
        first = get(base + "/")[2].decode()
        append_in_another_process(sqlite_url, "run-1", ["one", "two"], 40)
        again = get(base + "/")[2].decode()
    assert '<td class="num">40</td><td>Executor, Planner</td><td>39</td>' in first
    assert '<td class="num">42</td><td>Executor, Planner, Writer</td><td>41</td>' in again
    assert f"{sum(0.001 * i for i in range(40)) + 1.0:.6g}" in again
    assert "not while served" in first
    assert "not while served" not in again  # the last change is the moment the server saw it


def test_semantic_search_is_offered_where_the_session_has_vectors_of_the_model(
    tmp_path: Path,
) -> None:
    """With --embedder hashing, a session indexed by that model offers and answers semantic search."""
    pytest.importorskip("numpy") if not os.environ.get("CI") else None
    import orjson

    from agents.memory.search import HashingEmbedder

    url = f"sqlite://{tmp_path / 'vec.db'}"
    fill(url, "plain", 5)
    with open_store(url) as store:
        store.append(
            "indexed",
            [
                MemoryItem(step=1, thought="open the spreadsheet"),
                MemoryItem(step=2, thought="type the summary"),
            ],
        )
        store.index_embeddings("indexed", HashingEmbedder())
    with serving(url, "--embedder", "hashing") as base:
        indexed = get(base + "/session?id=indexed")[2].decode()
        plain = get(base + "/session?id=plain")[2].decode()
        hits = orjson.loads(
            get(base + "/api/search?session=indexed&q=spreadsheet&mode=semantic")[2]
        )
        unknown = get(base + "/api/search?session=indexed&q=x&mode=telepathy")
    assert '"modes":["keyword","semantic","hybrid"]' in indexed
    assert '"modes":["keyword"]' in plain
    assert hits["steps"][0]["s"] == "step 1"
    assert unknown[0] == 400
    assert b"telepathy" in unknown[2]


@pytest.mark.postgres
def test_session_list_never_shows_a_database_password(postgres_url: str) -> None:
    """A password in the PostgreSQL URL served is shown as *** in the list page."""
    url = postgres_url.replace("postgresql://kvmemory@", "postgresql://kvmemory:s3cret-pw@", 1)
    assert "s3cret-pw" in url
    fill(url, "pg", 2)
    with serving(url) as base:
        page = get(base + "/")[2].decode()
    assert "s3cret-pw" not in page
    assert "kvmemory:***@" in page


def test_api_pages_the_session_from_its_end(tmp_path: Path) -> None:
    """The timeline's API answers the newest page first and earlier pages before a seq."""
    url = f"sqlite://{tmp_path / 'long.db'}"
    fill(url, "long", 1200)
    with serving(url) as base:
        _, _, newest = get(base + "/api/tail?session=long&n=500")
        import orjson

        page = orjson.loads(newest)
        _, _, older = get(base + f"/api/tail?session=long&n=500&before={page['first']}")
        before = orjson.loads(older)
        _, _, oldest = get(base + f"/api/tail?session=long&n=500&before={before['first']}")
        last = orjson.loads(oldest)
    assert [len(page["steps"]), page["earlier"]] == [500, True]
    assert page["steps"][-1]["s"] == "step 1199"
    assert [before["steps"][0]["s"], before["steps"][-1]["s"], before["earlier"]] == [
        "step 200",
        "step 699",
        True,
    ]
    assert [len(last["steps"]), last["steps"][0]["s"], last["earlier"]] == [200, "step 0", False]


def test_api_follows_appends_to_a_jsonl_store(tmp_path: Path) -> None:
    """A JSONL store served read-only answers polls with the items another process appended."""
    import orjson

    url = f"jsonl://{tmp_path / 'logs'}"
    fill(url, "j", 3)
    with serving(url) as base:
        first = orjson.loads(get(base + "/api/tail?session=j&n=500")[2])
        append_in_another_process(url, "j", ["late"], 3)
        new = orjson.loads(get(base + f"/api/after?session=j&seq={first['last']}")[2])
    assert [step["s"] for step in first["steps"]] == ["step 0", "step 1", "step 2"]
    assert [step["s"] for step in new["steps"]] == ["step 3"]
    assert new["steps"][0]["f"][0] == ["thought", "late", 0]


def test_api_says_whether_earlier_items_exist_exactly(tmp_path: Path) -> None:
    """A session of exactly one page has nothing earlier; one more item has; /api/count counts them."""
    import orjson

    url = f"sqlite://{tmp_path / 'edge.db'}"
    fill(url, "page", 500)
    fill(url, "more", 501)
    with serving(url) as base:
        page = orjson.loads(get(base + "/api/tail?session=page&n=500")[2])
        more = orjson.loads(get(base + "/api/tail?session=more&n=500")[2])
        rest = orjson.loads(get(base + f"/api/tail?session=more&n=500&before={more['first']}")[2])
        count = orjson.loads(get(base + "/api/count?session=more")[2])
    assert [len(page["steps"]), page["earlier"]] == [500, False]
    assert [len(more["steps"]), more["earlier"]] == [500, True]
    assert [len(rest["steps"]), rest["earlier"]] == [1, False]
    assert count == {"count": 501, "last": more["last"]}


def test_api_around_answers_a_seq_with_its_neighbours() -> None:
    """/api/around gives the item at a seq with n items each side; a seq that is no number is a 400."""
    from starlette.testclient import TestClient

    from agents.integrations.web import live_app

    with open_store(f"memory://{uuid.uuid4().hex}") as store:
        seqs = store.append("s", [MemoryItem(step=n) for n in range(10)])
        with TestClient(live_app(store), base_url=LOCAL) as client:
            page = client.get("/api/around", params={"session": "s", "seq": seqs[4], "n": 2}).json()
            bad = client.get("/api/around", params={"session": "s", "seq": "x"})
    assert [step["s"] for step in page["steps"]] == [
        "step 2",
        "step 3",
        "step 4",
        "step 5",
        "step 6",
    ]
    assert [page["first"], page["last"], page["earlier"], page["later"]] == [
        seqs[2],
        seqs[6],
        True,
        True,
    ]
    assert bad.status_code == 400
    assert "The query parameter 'seq' must be a whole number" in bad.json()["error"]


def test_binding_elsewhere_without_a_token_is_refused(sqlite_url: str) -> None:
    """``--host 0.0.0.0`` without a token exits with an error naming the token variable."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.cli",
            "serve",
            sqlite_url,
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        env={k: v for k, v in env().items() if k != "KVMEMORY_SERVE_TOKEN"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "KVMEMORY_SERVE_TOKEN" in done.stderr


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    """Serving a SQLite path that does not exist exits with status 1 and creates no file."""
    missing = tmp_path / "nope.db"
    done = subprocess.run(
        [sys.executable, "-m", "agents.cli", "serve", str(missing), "--port", str(free_port())],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "does not exist" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_port_in_use_is_an_error_before_anything_is_served(sqlite_url: str) -> None:
    """A port another socket holds makes serve exit with status 1 naming the address, printing no address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agents.cli", "serve", sqlite_url, "--port", str(port)],
            env=env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"Cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "serving" not in done.stdout


def test_a_wrong_or_missing_token_gets_401_and_nothing_else(sqlite_url: str) -> None:
    """Page, API, image and list answer 401 with a bare body to a missing or wrong token, and serve the right one."""
    paths = [
        "/",
        "/session?id=run-1",
        "/api/sessions",
        "/api/tail?session=run-1&n=5",
        "/api/after?session=run-1&seq=0",
        "/api/count?session=run-1",
        "/api/search?session=run-1&q=thought",
        "/image?path=x.png",
    ]
    wrong = [
        ({}, ""),
        ({}, "token=wrong-token-of-some-length"),
        ({"Authorization": "Bearer wrong-token-of-some-length"}, ""),
        ({"Cookie": "kvmemory_token=wrong-token-of-some-length"}, ""),
        ({"Authorization": TOKEN}, ""),  # the token without "Bearer "
    ]
    with serving(sqlite_url, token=TOKEN) as base:
        for path in paths:
            for headers, query in wrong:
                sep = "&" if "?" in path else "?"
                status, answer_headers, body = get(
                    base + path + (sep + query if query else ""), headers
                )
                assert (status, body) == (401, UNAUTHORIZED), (path, headers, query)
                assert "set-cookie" not in {k.lower() for k in answer_headers}
        status, headers, body = get(base + "/session?id=run-1&token=" + TOKEN, follow=False)
        assert (status, headers["location"]) == (303, "/session?id=run-1")
        cookie = headers["set-cookie"].split(";")[0]
        assert get(base + "/session?id=run-1", {"Cookie": cookie})[0] == 200
        assert get(base + "/api/tail?session=run-1&n=5", {"Cookie": cookie})[0] == 200
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert get(base + "/api/sessions", bearer)[0] == 200


def test_images_are_served_only_from_the_allowed_folder(tmp_path: Path) -> None:
    """An image inside --images is served; one outside, a non-image and a scheme are named, never read."""
    shots = tmp_path / "shots"
    shots.mkdir()
    (shots / "ok.png").write_bytes(png(4, 3, []))
    (shots / "not-an-image.png").write_bytes(b"secret text")
    outside = tmp_path / "outside.png"
    outside.write_bytes(png(4, 3, []))
    url = f"sqlite://{tmp_path / 'img.db'}"
    with open_store(url) as store:
        store.append(
            "shots",
            [
                MemoryItem(step=1, screenshot=str(shots / "ok.png")),
                MemoryItem(step=2, screenshot=str(outside)),
                MemoryItem(step=3, screenshot=str(shots / ".." / "outside.png")),
                MemoryItem(step=4, screenshot="javascript:alert(3)"),
                MemoryItem(step=5, screenshot=str(shots / "not-an-image.png")),
            ],
        )
    import orjson

    with serving(url, "--images", str(shots)) as base:
        steps = orjson.loads(get(base + "/api/tail?session=shots&n=10")[2])["steps"]
        images = [step["i"][0] for step in steps]
        served = get(base + images[0][0])
        direct = [
            get(base + "/image?path=" + urllib.parse.quote(str(p), safe=""))
            for p in (
                outside,
                shots / ".." / "outside.png",
                Path("/etc/passwd"),
                shots / "not-an-image.png",
            )
        ]
    assert images[0][0].startswith("/image?path=")
    assert (served[0], served[1]["content-type"], served[2]) == (
        200,
        "image/png",
        (shots / "ok.png").read_bytes(),
    )
    assert [image[0] for image in images[1:]] == [None, None, None, None]
    assert "not a file path" in images[3][2]
    assert [answer[0] for answer in direct] == [404, 404, 404, 404]
    assert all(b"secret" not in answer[2] and b"root" not in answer[2] for answer in direct)


def test_a_missing_extra_names_kvmemory_serve() -> None:
    """Without Starlette, building the app raises MissingDependencyError naming kvmemory[serve]."""
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "from agents.memory.stores import open_store\n"
        "from agents.integrations.web import live_app\n"
        "from agents.memory.exceptions import MissingDependencyError\n"
        "try:\n"
        "    live_app(open_store('memory://x'))\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env(), capture_output=True, text=True, check=True
    )
    assert "pip install 'kvmemory[serve]'" in done.stdout


# -- the live page in a real browser -------------------------------------------------------


def test_live_page_opens_on_the_newest_steps_and_loads_earlier_ones(
    tmp_path: Path, browser: Any
) -> None:
    """A 1,200-step session opens on its newest 500 items; "load earlier" brings the rest page by page."""
    url = f"sqlite://{tmp_path / 'long.db'}"
    fill(url, "long", 1200)
    with serving(url) as base:
        open_session(browser, base, "long")
        wait(browser, "return document.getElementById('live').textContent.includes('500 of 1,200')")
        assert "step 1199" in card_texts(browser)[-1]
        browser.find_element("id", "earlier").click()
        wait(
            browser, "return document.getElementById('live').textContent.includes('1,000 of 1,200')"
        )
        browser.find_element("id", "earlier").click()
        wait(
            browser, "return document.getElementById('live').textContent.includes('1,200 of 1,200')"
        )
        assert browser.find_element("id", "earlier").get_attribute("disabled") is not None
        assert "step 0" in card_texts(browser)[0]
        assert len(card_texts(browser)) <= 1000  # the document stays windowed


def test_live_page_shows_steps_appended_to_sqlite(sqlite_url: str, browser: Any) -> None:
    """Steps another process appends to a SQLite session appear in the open page without a reload."""
    with serving(sqlite_url) as base:
        open_session(browser, base, "run-1")
        browser.execute_script("window.kvMarker = 1")  # gone if the page reloads
        append_in_another_process(sqlite_url, "run-1", ["appended one", "appended two"], 40)
        wait(browser, "return document.body.textContent.includes('appended two')")
        assert browser.execute_script("return window.kvMarker") == 1
        assert "step 41" in card_texts(browser)[-1]
        lanes = browser.execute_script(
            "return [...document.querySelectorAll('.lane-head')].map(h => h.dataset.lane)"
        )
        assert "Writer" in lanes


def test_live_page_works_through_a_token_given_once(sqlite_url: str, browser: Any) -> None:
    """With a token, ?token= on the first visit lets the page, its API calls and its polls through."""
    with serving(sqlite_url, token=TOKEN) as base:
        browser.delete_all_cookies()
        browser.get(base + "/?token=" + TOKEN)
        assert TOKEN not in browser.current_url
        browser.find_element("link text", "run-1").click()
        wait(browser, "return document.querySelectorAll('.card').length > 0")
        append_in_another_process(sqlite_url, "run-1", ["behind a token"], 40)
        wait(browser, "return document.body.textContent.includes('behind a token')")
        browser.delete_all_cookies()


@pytest.mark.postgres
def test_live_page_shows_steps_appended_to_postgres(postgres_url: str, browser: Any) -> None:
    """Steps another process appends to a PostgreSQL session appear in the open page without a reload."""
    fill(postgres_url, "pg-run", 10)
    with serving(postgres_url) as base:
        open_session(browser, base, "pg-run")
        browser.execute_script("window.kvMarker = 1")
        append_in_another_process(postgres_url, "pg-run", ["from postgres"], 10)
        wait(browser, "return document.body.textContent.includes('from postgres')")
        assert browser.execute_script("return window.kvMarker") == 1
        assert "step 10" in card_texts(browser)[-1]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_store_search_shows_the_stores_hits(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, browser: Any
) -> None:
    """Searching the store shows the items store.search finds, and clearing it shows the session again."""
    url = (
        f"sqlite://{tmp_path / 'runs.db'}"
        if kind == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    fill(url, "run-1", 40)
    with serving(url) as base:
        open_session(browser, base, "run-1")
        browser.execute_script(
            """
            const source = document.querySelector('.controls.live select');
            source.value = 'keyword'; source.dispatchEvent(new Event('change'));
            const search = document.getElementById('search');
            search.value = '17'; search.dispatchEvent(new Event('input'));
            """
        )
        wait(
            browser,
            "return document.getElementById('live').textContent.includes('1 hit from the store')",
        )
        assert [text for text in card_texts(browser) if "thought number" in text] == [
            text for text in card_texts(browser) if "thought number 17" in text
        ]
        assert len(card_texts(browser)) == 1
        browser.execute_script(
            "const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input'));"
        )
        wait(browser, "return document.getElementById('live').textContent.includes('40 of 40')")


def store_search(browser: Any, query: str) -> None:
    """Search the store from the open live page and wait for its hits."""
    browser.execute_script(
        """
        const source = document.querySelector('.controls.live select');
        source.value = 'keyword'; source.dispatchEvent(new Event('change'));
        const search = document.getElementById('search');
        search.value = arguments[0]; search.dispatchEvent(new Event('input'));
        """,
        query,
    )
    wait(browser, "return document.getElementById('live').textContent.includes('from the store')")


def marks_of(browser: Any, selector: str) -> list[str]:
    """Return the marked texts inside the first element matching ``selector``."""
    return list(
        browser.execute_script(
            "return [...document.querySelector(arguments[0]).querySelectorAll('mark')]"
            ".map(m => m.textContent)",
            selector,
        )
    )


def test_clicking_a_store_hit_opens_it_among_its_neighbours(tmp_path: Path, browser: Any) -> None:
    """A hit far before the loaded steps opens in the timeline with its neighbours, in view, marked."""
    url = f"sqlite://{tmp_path / 'long.db'}"
    fill(url, "long", 1200)
    with serving(url) as base:
        open_session(browser, base, "long")
        store_search(browser, "number 17")
        browser.find_element("css selector", ".card.openable").click()
        focus = wait(browser, "return document.querySelector('.card.focus')")
        wait(  # brought into view
            browser,
            "const box = arguments[0].getBoundingClientRect();"
            " return box.top >= 0 && box.bottom <= innerHeight",
            focus,
        )
        texts = card_texts(browser)
        assert focus.text.startswith("step 17")
        assert sorted(set(marks_of(browser, ".card.focus"))) == ["17", "number"]
        assert any(text.startswith("step 16") for text in texts)
        assert any(text.startswith("step 18") for text in texts)
        assert "hit" not in browser.find_element("id", "live").text
        assert browser.find_element("id", "later").is_displayed()


def test_a_hit_among_the_loaded_steps_opens_without_leaving_them(
    sqlite_url: str, browser: Any
) -> None:
    """A hit inside the loaded steps opens there: the session stays loaded and followed from its end."""
    with serving(sqlite_url) as base:
        open_session(browser, base, "run-1")
        store_search(browser, "number 5")
        browser.find_element("css selector", ".card.openable").click()
        focus = wait(browser, "return document.querySelector('.card.focus')")
        assert focus.text.startswith("step 5")
        wait(browser, "return document.getElementById('live').textContent.includes('40 of 40')")
        append_in_another_process(sqlite_url, "run-1", ["after the hit"], 40)
        wait(browser, "return document.getElementById('live').textContent.includes('41 of 41')")
        assert not browser.find_element("id", "later").is_displayed()


def test_a_hit_just_before_the_loaded_steps_joins_them(tmp_path: Path, browser: Any) -> None:
    """A hit whose neighbours reach the loaded steps is loaded with them: one run to the newest step."""
    url = f"sqlite://{tmp_path / 'near.db'}"
    fill(url, "near", 600)
    with serving(url) as base:
        open_session(browser, base, "near")
        wait(browser, "return document.getElementById('live').textContent.includes('500 of 600')")
        store_search(browser, "number 17")
        browser.find_element("css selector", ".card.openable").click()
        focus = wait(browser, "return document.querySelector('.card.focus')")
        assert focus.text.startswith("step 17")
        wait(browser, "return document.getElementById('live').textContent.includes('600 of 600')")
        assert not browser.find_element("id", "later").is_displayed()


def test_loading_later_steps_after_a_hit_reaches_the_end_and_follows_it(
    tmp_path: Path, browser: Any
) -> None:
    """After a hit opened far back, "load later steps" reaches the newest steps, then new ones arrive."""
    url = f"sqlite://{tmp_path / 'long.db'}"
    fill(url, "long", 1200)
    with serving(url) as base:
        open_session(browser, base, "long")
        store_search(browser, "number 17")
        browser.find_element("css selector", ".card.openable").click()
        wait(browser, "return document.querySelector('.card.focus')")
        browser.find_element("id", "later").click()
        wait(
            browser, "return document.getElementById('live').textContent.includes('1,200 of 1,200')"
        )
        assert not browser.find_element("id", "later").is_displayed()
        append_in_another_process(url, "long", ["newest of all"], 1200)
        wait(
            browser, "return document.getElementById('live').textContent.includes('1,201 of 1,201')"
        )


def test_store_hits_mark_the_query_words(sqlite_url: str, browser: Any) -> None:
    """Each word of a store search is marked in the hits, as text."""
    with serving(sqlite_url) as base:
        open_session(browser, base, "run-1")
        store_search(browser, "Number 17")
        best = browser.find_element("css selector", ".card")
        assert best.text.startswith("step 17")
        assert sorted(set(marks_of(browser, ".card"))) == ["17", "number"]


def test_counts_of_one_are_singular(tmp_path: Path, browser: Any) -> None:
    """One item, one hit and one step are counted in the singular."""
    url = f"sqlite://{tmp_path / 'one.db'}"
    fill(url, "one", 1)
    with serving(url) as base:
        open_session(browser, base, "one")
        wait(browser, "return document.getElementById('live').textContent.includes('1 of 1 item ')")
        assert browser.find_element("id", "status").text == "1 item"
        assert browser.find_element("css selector", ".lane-head .count").text == "1 step"
        store_search(browser, "thought")
        assert browser.find_element("id", "live").text.startswith("· 1 hit from the store")


def test_unshown_image_fields_are_named_with_their_value_and_why(
    tmp_path: Path, browser: Any
) -> None:
    """An image field that is not shown appears as its field and value, with the reason."""
    shots = tmp_path / "shots"
    shots.mkdir()
    outside = tmp_path / "outside.png"
    outside.write_bytes(png(4, 3, []))
    url = f"sqlite://{tmp_path / 'img.db'}"
    with open_store(url) as store:
        store.append(
            "shots",
            [
                MemoryItem(step=1, screenshot=str(outside)),
                MemoryItem(step=2, screenshot="javascript:alert(3)"),
            ],
        )

    def fields() -> list[list[str]]:
        return list(
            browser.execute_script(
                "return [...document.querySelectorAll('.card')].map(c =>"
                " [c.querySelector('dt').textContent, c.querySelector('dd').textContent])"
            )
        )

    with serving(url) as base:
        open_session(browser, base, "shots")
        without = fields()
    with serving(url, "--images", str(shots)) as base:
        open_session(browser, base, "shots")
        elsewhere = fields()
    assert without[0] == [
        "screenshot",
        f"{outside}image not shown: start kvmemory serve with --images DIR to show images",
    ]
    assert elsewhere == [
        [
            "screenshot",
            f"{outside}image not shown: not an image file inside an --images folder",
        ],
        [
            "screenshot",
            "javascript:alert(3)image not shown: not a file path or an http(s) URL",
        ],
    ]


def test_lane_headers_stay_in_view_while_following(sqlite_url: str, browser: Any) -> None:
    """Following new steps at the end of a long page, the lane headers stay visible below the header."""
    with serving(sqlite_url) as base:
        open_session(browser, base, "run-1")
        append_in_another_process(sqlite_url, "run-1", ["a step to follow"], 40)
        wait(browser, "return document.body.textContent.includes('a step to follow')")
        assert browser.execute_script("return scrollY") > 0
        shown = browser.execute_script(
            """
            const head = document.querySelector('.lane-head'), box = head.getBoundingClientRect();
            const under = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
            return box.top >= 0 && box.bottom <= innerHeight && head.contains(under);
            """
        )
        assert shown


def test_hostile_session_injects_nothing(tmp_path: Path, browser: Any) -> None:
    """Markup in values, keys, agents, class-like names and image refs shows as text and runs nothing."""
    url = f"sqlite://{tmp_path / 'hostile.db'}"
    shots = tmp_path / "shots"
    shots.mkdir()
    with open_store(url) as store:
        store.append(
            "hostile",
            [
                MemoryItem(step=HOSTILE, agent=HOSTILE, thought=HOSTILE, **{HOSTILE: HOSTILE}),
                MemoryItem(step=2, screenshot="javascript:window.kvPwned=3", agent="A"),
                MemoryItem(step=3, screenshot='x" onerror="window.kvPwned=4', agent="A"),
                MemoryItem(step=4, screenshot=f"{shots}/<img src=x onerror=window.kvPwned=5>.png"),
            ],
        )
    with serving(url, "--images", str(shots)) as base:
        browser.get(base + "/")
        assert browser.execute_script("return window.kvPwned") is None
        assert HOSTILE in browser.find_element("tag name", "table").text  # the agent, as text
        open_session(browser, base, "hostile")
        append_in_another_process(url, "hostile", [HOSTILE + " live"], 5)
        wait(browser, "return document.body.textContent.includes('> live')")
        browser.execute_script(
            """
            const source = document.querySelector('.controls.live select');
            source.value = 'keyword'; source.dispatchEvent(new Event('change'));
            const search = document.getElementById('search');
            search.value = 'kvPwned'; search.dispatchEvent(new Event('input'));
            """
        )
        wait(
            browser,
            "return document.getElementById('live').textContent.includes('from the store')",
        )
        assert browser.execute_script("return window.kvPwned") is None
        assert browser.execute_script("return document.scripts.length") == 2
        assert browser.execute_script("return document.querySelectorAll('main img').length") == 0
        assert HOSTILE in browser.find_element("tag name", "main").text


def test_serving_leaves_the_store_file_byte_identical(tmp_path: Path, browser: Any) -> None:
    """Listing, opening, paging, polling and searching a SQLite store changes none of its bytes."""
    path = tmp_path / "still.db"
    fill(f"sqlite://{path}", "still", 600)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    with serving(str(path)) as base:
        open_session(browser, base, "still")
        browser.find_element("id", "earlier").click()
        wait(browser, "return document.getElementById('live').textContent.includes('600 of 600')")
        get(base + "/api/search?session=still&q=thought")
        get(base + "/")
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    assert after == before


def test_screenshot_of_the_live_page(tmp_path: Path, browser: Any) -> None:
    """The test run saves a picture of the live page (docs/serve.png with KVMEMORY_UPDATE_SCREENSHOTS=1)."""
    shots = tmp_path / "shots"
    shots.mkdir()
    url = f"sqlite://{tmp_path / 'demo.db'}"
    with open_store(url) as store:
        store.append(
            "ufo-live-demo",
            [
                MemoryItem(
                    step=n,
                    agent="HostAgent" if n % 4 == 0 else "AppAgent",
                    thought=f"Step {n}: look at the window and pick the next control.",
                    action="click" if n % 2 else "type_text",
                    screenshot=screenshot(shots / f"app-{n}.png", n % 6),
                    cost=0.002 + 0.0004 * n,
                    prompt_tokens=800 + 40 * n,
                )
                for n in range(12)
            ],
        )
    target = DOCS_SCREENSHOT if os.environ.get("KVMEMORY_UPDATE_SCREENSHOTS") == "1" else SCREENSHOT
    target.parent.mkdir(parents=True, exist_ok=True)
    with serving(url, "--images", str(shots)) as base:
        size = browser.get_window_size()
        browser.set_window_size(1280, 900)
        try:
            open_session(browser, base, "ufo-live-demo")
            append_in_another_process(
                url, "ufo-live-demo", ["The report is saved; the task is done."], 12
            )
            wait(browser, "return document.body.textContent.includes('the task is done')")
            wait(
                browser,
                "return [...document.querySelectorAll('.thumbs img')].every(i => i.complete && i.naturalWidth > 0)",
            )
            wait(browser, "return document.querySelectorAll('#chart polyline').length === 2")
            legend = browser.find_element("css selector", "#chart figcaption").text
            assert "prompt_tokens (max 1,240)" in legend
            assert "total 0.5504, loaded items" in legend  # 12 demo costs and the appended 0.5
            assert browser.save_screenshot(str(target))
            browser.execute_script(
                """
                const svg = document.querySelector('#chart svg'), box = svg.getBoundingClientRect();
                svg.dispatchEvent(new MouseEvent('click', {clientX: box.left + 2, clientY: box.top + 5}));
                """
            )
            wait(  # the chart's left end brings step 0 into view
                browser,
                "return [...document.querySelectorAll('.card')].some(c => c.textContent.startsWith('step 0')"
                " && c.getBoundingClientRect().top >= 0 && c.getBoundingClientRect().bottom <= innerHeight)",
            )
        finally:
            browser.set_window_size(size["width"], size["height"])
    assert target.read_bytes().startswith(b"\x89PNG")


# -- properties of the app, in process (Starlette's test client over a real in-memory store) --


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.text(min_size=1), key=st.text(min_size=1).filter(lambda k: k != "step"))
def test_api_returns_any_text_exactly(value: str, key: str) -> None:
    """Any text in any field comes back from the API as the same text, for the page to show as text."""
    from starlette.testclient import TestClient

    from agents.integrations.web import live_app

    with open_store(f"memory://{uuid.uuid4().hex}") as store:
        store.append("s", [MemoryItem(step=1, **{key: value})])
        with TestClient(live_app(store), base_url=LOCAL) as client:
            page = client.get("/api/tail", params={"session": "s", "n": "5"}).json()
    assert [field[:2] for field in page["steps"][0]["f"]] == [
        [key, value]
    ]  # [2] marks error fields


@settings(max_examples=20, deadline=None)
@given(
    early=st.lists(st.sampled_from(["/api/search", "/api/tail", "/api/after"]), max_size=3),
    agent_key=st.sampled_from(["Agent", "agent_type", "who"]),
)
def test_api_search_names_the_agent_of_a_session_made_after_it_was_asked_for(
    early: list[str], agent_key: str
) -> None:
    """A session another handle makes (agent keys in its metadata) after the app was asked for it shows its agents, as a fresh app does."""
    from starlette.testclient import TestClient

    from agents.integrations.web import live_app

    url = f"memory://{uuid.uuid4().hex}"
    with open_store(url) as store, TestClient(live_app(store), base_url=LOCAL) as client:
        ask = {"session": "later", "q": "invoice", "n": "5", "seq": "-1"}
        for path in early:  # asked before the session exists: nothing to show
            assert client.get(path, params=ask).json()["steps"] == []
        with open_store(url) as writer:
            writer.append("later", [MemoryItem(step=1, **{agent_key: "HostAgent"}, note="invoice")])
            writer.set_metadata("later", {"agent_keys": [agent_key]})
        shown = client.get("/api/search", params=ask).json()
        with TestClient(live_app(store), base_url=LOCAL) as fresh:
            expected = fresh.get("/api/search", params=ask).json()
    assert shown == expected
    assert [step["l"] for step in shown["steps"]] == ["HostAgent"]


def test_api_search_of_a_session_embedded_by_another_model_is_a_400(tmp_path: Path) -> None:
    """Semantic search where the session's vectors are another model's is the client's mistake: 400 naming the fix."""
    pytest.importorskip("numpy") if not os.environ.get("CI") else None
    from starlette.testclient import TestClient

    from agents.integrations.web import live_app
    from agents.memory.search import HashingEmbedder

    url = f"sqlite://{tmp_path / 'vec.db'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1, note="open the invoice")])
        store.index_embeddings("s", HashingEmbedder(64))
    with (
        open_store(url, read_only=True) as store,
        TestClient(live_app(store, embedder=HashingEmbedder()), base_url=LOCAL) as client,
    ):
        answer = client.get(
            "/api/search", params={"session": "s", "q": "invoice", "mode": "semantic"}
        )
    assert answer.status_code == 400
    assert "drop_vectors('s')" in answer.json()["error"]


@settings(max_examples=60, deadline=None)
@given(guess=st.text(min_size=1, alphabet=st.characters(min_codepoint=33, max_codepoint=126)))
def test_any_other_token_gets_401(guess: str) -> None:
    """Any token but the right one, as a bearer header or a query parameter, gets the bare 401."""
    from starlette.testclient import TestClient

    from agents.integrations.web import live_app

    assume(guess != TOKEN)
    with (
        open_store(f"memory://{uuid.uuid4().hex}") as store,
        TestClient(live_app(store, token=TOKEN), base_url=LOCAL) as client,
    ):
        by_header = client.get("/api/sessions", headers={"Authorization": f"Bearer {guess}"})
        by_query = client.get("/api/sessions", params={"token": guess}, follow_redirects=False)
    assert (by_header.status_code, by_header.content) == (401, UNAUTHORIZED)
    assert (by_query.status_code, by_query.content) == (401, UNAUTHORIZED)


def test_api_follows_a_replaced_record_once(tmp_path: Path) -> None:
    """A record replaced by another process reaches a poll once; the session then holds it once, key shown."""
    import orjson

    url = f"sqlite://{tmp_path / 'records.db'}"
    fill(url, "r", 2)
    with open_store(url) as store:
        store.put_record("r", "lang", {"value": "fr"})
    with serving(url) as base:
        first = orjson.loads(get(base + "/api/tail?session=r&n=500")[2])
        with open_store(url) as store:
            store.put_record("r", "lang", {"value": "de"})
        new = orjson.loads(get(base + f"/api/after?session=r&seq={first['last']}")[2])
        again = orjson.loads(get(base + "/api/tail?session=r&n=500")[2])
    assert [field[:2] for field in new["steps"][0]["f"]] == [["key", "lang"], ["value", "de"]]
    assert len(new["steps"]) == 1
    fields = [[field[:2] for field in step["f"]] for step in again["steps"]]
    assert fields.count([["key", "lang"], ["value", "de"]]) == 1
    assert [["key", "lang"], ["value", "fr"]] not in fields
    assert len(again["steps"]) == 3
