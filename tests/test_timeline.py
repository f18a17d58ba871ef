"""Tests for agents.agent.replay_html: the page's content, then the page in a real headless Chromium."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from agents.agent import replay_html
from agents.memory import Memory, MemoryItem

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "build" / "screenshots" / "timeline.png"
HOSTILE = "<script>window.kvPwned = 1</script><img src=x onerror='window.kvPwned = 2'>"


def png(
    width: int, height: int, boxes: list[tuple[int, int, int, int, tuple[int, int, int]]]
) -> bytes:
    """Return a PNG of a light window with coloured boxes (x, y, w, h, rgb) drawn on it."""
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")  # filter type 0 for every row
        for x in range(width):
            colour = (248, 249, 251)
            for bx, by, bw, bh, rgb in boxes:
                if bx <= x < bx + bw and by <= y < by + bh:
                    colour = rgb
            row += bytes(colour)
        rows.append(bytes(row))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )


def screenshot(path: Path, highlight: int) -> str:
    """Write a stand-in application screenshot with control ``highlight`` marked; return its path."""
    boxes = [
        (0, 0, 240, 16, (43, 87, 154)),  # title bar
        (0, 16, 240, 12, (226, 230, 238)),  # menu bar
        (20, 40, 200, 6, (200, 205, 214)),  # text lines
        (20, 52, 170, 6, (200, 205, 214)),
        (20, 64, 185, 6, (200, 205, 214)),
        (20, 76, 120, 6, (200, 205, 214)),
    ]
    boxes.append((4 + highlight * 36, 17, 32, 10, (217, 130, 43)))
    path.write_bytes(png(240, 100, boxes))
    return str(path)


def demo_session(folder: Path) -> Memory:
    """Return a two-agent session like the example's, with screenshots, costs and an error."""
    memory = Memory(session_id="ufo-two-agents-demo")
    memory.add_memory_item(
        MemoryItem(
            step=0,
            agent="HostAgent",
            observation="The desktop shows Word and Excel.",
            thought="The request is about a Word document.",
            subtask="Open report.docx in Word and type the summary line at the top.",
            status="ASSIGN",
            cost=0.0031,
            prompt_tokens=66,
        )
    )
    app_steps: list[dict[str, Any]] = [
        {"thought": "Open the File menu first.", "action": "click_input", "control": "File"},
        {
            "thought": "Choose Open from the menu.",
            "action": "click_input",
            "control": "Open",
            "error": "control 'Open' not found; the menu was scrolled",
        },
        {
            "thought": "Scroll the menu and try again.",
            "action": "wheel_mouse_input",
            "control": "File",
        },
        {"thought": "Open is visible now.", "action": "click_input", "control": "Open"},
        {
            "thought": "Type the one-line summary at the top of the document.",
            "action": "type_keys",
            "control": "Document",
            "text": "Q3 revenue grew 12% on higher subscription renewals; costs were flat. " * 5,
        },
    ]
    for number, fields in enumerate(app_steps):
        memory.add_memory_item(
            MemoryItem(
                step=number,
                agent="AppAgent",
                **fields,
                status="CONTINUE" if number < len(app_steps) - 1 else "FINISH",
                cost=round(0.004 + 0.0012 * number, 4),
                prompt_tokens=850 + 390 * number,
                screenshot=screenshot(folder / f"app-{number}.png", number),
            )
        )
    memory.add_memory_item(
        MemoryItem(
            step=1,
            agent="HostAgent",
            observation="The app agent reports the summary line is typed.",
            thought="The request is complete.",
            status="FINISH",
            cost=0.0027,
            prompt_tokens=212,
        )
    )
    return memory


def page_text(tmp_path: Path, memory: Memory | list[MemoryItem], **options: Any) -> str:
    """Write the page of ``memory`` and return its HTML."""
    return replay_html(memory, tmp_path / "page.html", **options).read_text(encoding="utf-8")


# -- the page as written -------------------------------------------------------------------


def test_replay_html_returns_the_path_written(tmp_path: Path) -> None:
    """replay_html writes the file it is given and returns its path."""
    target = tmp_path / "run.html"
    assert replay_html(Memory([MemoryItem(step=1)]), target) == target
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_page_fetches_nothing(tmp_path: Path) -> None:
    """The page loads no stylesheet, script or image from elsewhere, and its policy forbids it."""
    memory = demo_session(tmp_path)
    memory.add_memory_item(MemoryItem(step=9, screenshot="https://example.invalid/shot.png"))
    text = page_text(tmp_path, memory)
    assert re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text) == []
    assert "<link" not in text
    assert "default-src 'none'; img-src data:" in text


def test_images_are_embedded_once_each(tmp_path: Path) -> None:
    """An image path used by several steps is embedded once, as a data URL."""
    shot = screenshot(tmp_path / "shot.png", 0)
    text = page_text(tmp_path, Memory([MemoryItem(step=n, screenshot=shot) for n in range(3)]))
    assert text.count("data:image/png;base64,") == 1


def test_script_in_a_value_cannot_end_the_data_block(tmp_path: Path) -> None:
    """A value holding a script tag is written as an escaped JSON string, never as markup."""
    text = page_text(tmp_path, Memory([MemoryItem(step=1, thought=HOSTILE)]))
    assert HOSTILE not in text
    assert text.count("<script") == 2  # the data block and the page's own script


def test_title_is_escaped(tmp_path: Path) -> None:
    """A title with markup and a template slot shows as text."""
    text = page_text(tmp_path, Memory([MemoryItem(step=1)]), title="<b>run</b> {{data}}")
    assert "<title>&lt;b&gt;run&lt;/b&gt; {{data}}</title>" in text


def test_no_chart_without_cost_or_tokens(tmp_path: Path) -> None:
    """A session with no cost and no prompt tokens gets no chart."""
    assert "<svg" not in page_text(tmp_path, Memory([MemoryItem(step=1, action="click")]))


def test_chart_merges_points_of_long_sessions(tmp_path: Path) -> None:
    """A chart of 10,000 steps draws at most 600 points per line."""
    memory = Memory([MemoryItem(step=n, cost=n % 7 / 1000) for n in range(10_000)])
    points = re.search(r'<polyline class="cost" points="([^"]*)"', page_text(tmp_path, memory))
    assert points is not None
    assert 0 < len(points.group(1).split()) <= 600


# -- the page in a real browser ------------------------------------------------------------


def open_page(browser: Any, path: Path) -> None:
    """Load the page, wait until its script has rendered, and clear the console log."""
    browser.get(path.as_uri())
    assert browser.execute_script("return window.kvTimeline !== undefined")


def console_errors(browser: Any) -> list[dict[str, Any]]:
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def cards(browser: Any, lane: str | None = None) -> list[Any]:
    selector = ".card" if lane is None else f'.card[data-lane="{lane}"]'
    return [card for card in browser.find_elements("css selector", selector) if card.is_displayed()]


def set_control(browser: Any, selector: str, value: str | bool) -> None:
    """Set an input or select of the page and let its change apply (the search waits 120 ms)."""
    browser.execute_script(
        """
        const node = document.querySelector(arguments[0]);
        if (node.type === 'checkbox') node.checked = arguments[1]; else node.value = arguments[1];
        node.dispatchEvent(new Event(node.tagName === 'SELECT' || node.type === 'checkbox' ? 'change' : 'input'));
        """,
        selector,
        value,
    )
    if selector == "#search":
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(browser, 5).until(
            lambda driver: driver.execute_script(
                "return document.getElementById('status').textContent.includes('match')"
                " || document.querySelector('.empty') !== null || arguments[0] === ''",
                value,
            )
        )


@pytest.fixture
def demo_page(tmp_path: Path, browser: Any) -> Path:
    """Return the demo session's page, opened in the browser."""
    path = replay_html(demo_session(tmp_path), tmp_path / "demo.html")
    open_page(browser, path)
    return path


def test_page_loads_without_console_errors(demo_page: Path, browser: Any) -> None:
    """The page loads and runs with nothing logged as an error in the browser console."""
    assert console_errors(browser) == []


def test_a_lane_per_agent_with_its_steps(demo_page: Path, browser: Any) -> None:
    """Each agent has a lane whose header counts its steps, and one card per step."""
    heads = {
        head.get_attribute("data-lane"): head.find_element("css selector", ".count").text
        for head in browser.find_elements("css selector", ".lane-head")
    }
    assert heads == {"HostAgent": "2 steps", "AppAgent": "5 steps"}
    assert (len(cards(browser, "HostAgent")), len(cards(browser, "AppAgent"))) == (2, 5)


def test_agent_filter_hides_the_lane(demo_page: Path, browser: Any) -> None:
    """Unticking an agent hides its cards and its lane, and keeps the others."""
    set_control(browser, 'input[data-lane="HostAgent"]', False)
    assert cards(browser, "HostAgent") == []
    assert len(cards(browser, "AppAgent")) == 5
    assert [
        h.get_attribute("data-lane") for h in browser.find_elements("css selector", ".lane-head")
    ] == ["AppAgent"]


def test_field_filter_keeps_steps_with_the_field_and_shows_only_it(
    demo_page: Path, browser: Any
) -> None:
    """Choosing a field keeps the steps that have it and shows only that field on their cards."""
    set_control(browser, "#field", "control")
    shown = cards(browser)
    assert len(shown) == 5
    assert {dt.text for card in shown for dt in card.find_elements("css selector", "dt")} == {
        "control"
    }


def test_search_keeps_matching_steps_and_marks_the_text(demo_page: Path, browser: Any) -> None:
    """A text search keeps the steps that contain it and marks where."""
    set_control(browser, "#search", "scrolled")
    shown = cards(browser)
    assert len(shown) == 1
    assert shown[0].find_element("css selector", "mark").text == "scrolled"


def test_errors_only_keeps_the_failed_step(demo_page: Path, browser: Any) -> None:
    """'errors only' keeps the steps with an error field, marked as errors."""
    set_control(browser, "#errors", True)
    shown = cards(browser)
    assert len(shown) == 1
    assert "has-error" in shown[0].get_attribute("class")
    assert (
        shown[0]
        .find_element("css selector", "dd.error")
        .text.startswith("control 'Open' not found")
    )


def test_long_values_are_folded(demo_page: Path, browser: Any) -> None:
    """A long value shows a short preview until it is unfolded."""
    folded = browser.find_element("css selector", "details")
    assert not folded.get_attribute("open")
    assert "chars)" in folded.find_element("css selector", "summary").text
    folded.find_element("css selector", "summary").click()
    assert folded.get_attribute("open")


def test_thumbnail_opens_full_size(demo_page: Path, browser: Any) -> None:
    """Clicking a thumbnail opens the image at full size in a viewer, which a click closes."""
    thumb = browser.find_element("css selector", ".thumbs img")
    thumb.click()
    viewer = browser.find_element("id", "viewer")
    big = viewer.find_element("css selector", "img")
    assert viewer.is_displayed()
    assert big.get_attribute("src") == thumb.get_attribute("src")
    assert big.size["width"] == 240  # the image's own width: the screenshot is 240 px wide
    viewer.click()
    assert not viewer.is_displayed()


def test_thumbnail_opens_from_the_keyboard(demo_page: Path, browser: Any) -> None:
    """A thumbnail is a button: Enter on it opens the viewer, Escape closes it."""
    from selenium.webdriver.common.keys import Keys

    button = browser.find_element("css selector", ".thumbs button.thumb")
    button.send_keys(Keys.ENTER)
    viewer = browser.find_element("id", "viewer")
    assert viewer.is_displayed()
    browser.find_element("tag name", "body").send_keys(Keys.ESCAPE)
    assert not viewer.is_displayed()


def test_script_in_a_value_shows_as_text(tmp_path: Path, browser: Any) -> None:
    """A value, key, agent and step holding markup show as text and run nothing."""
    memory = Memory([MemoryItem(step=HOSTILE, agent=HOSTILE, thought=HOSTILE, **{HOSTILE: 1})])
    open_page(browser, replay_html(memory, tmp_path / "hostile.html"))
    assert browser.execute_script("return window.kvPwned") is None
    card = cards(browser)[0]
    assert card.find_element("css selector", "dd").text == HOSTILE
    assert card.find_element("css selector", "h2").text.startswith(f"step {HOSTILE}")
    assert browser.find_element("css selector", ".lane-head .name").text == HOSTILE


def test_unreadable_image_is_named_on_its_card(tmp_path: Path, browser: Any) -> None:
    """An image path that cannot be read is shown as its field and value, with the reason, and the page still loads."""
    gone = tmp_path / "gone.png"
    memory = Memory([MemoryItem(step=1, screenshot=str(gone))])
    open_page(browser, replay_html(memory, tmp_path / "gone.html"))
    card = cards(browser)[0]
    assert card.find_element("css selector", "dt").text == "screenshot"
    value = card.find_element("css selector", "dd")
    assert value.text.startswith(str(gone))
    assert "gone.png" in value.find_element("css selector", ".missing").text
    assert console_errors(browser) == []


def test_search_finds_an_unshown_image_by_its_path(tmp_path: Path, browser: Any) -> None:
    """The search box matches an image field's value, and marks it on the card."""
    memory = Memory(
        [MemoryItem(step=1, screenshot=str(tmp_path / "gone.png")), MemoryItem(step=2, thought="x")]
    )
    open_page(browser, replay_html(memory, tmp_path / "gone.html"))
    set_control(browser, "#search", "gone.png")
    assert [card.find_element("css selector", "h2").text for card in cards(browser)] == ["step 1"]
    assert browser.find_element("css selector", ".card dd mark").text == "gone.png"


def test_a_non_image_value_in_an_image_field_stays_a_field(tmp_path: Path) -> None:
    """A number under an image key is shown as a plain field, even beside a real image reference."""
    page = page_text(
        tmp_path,
        Memory([MemoryItem(step=1, screenshot=str(tmp_path / "gone.png"), image_url=7)]),
    )
    assert '["image_url","7",0]' in page


def test_lane_headers_stay_in_view_when_scrolled(tmp_path: Path, browser: Any) -> None:
    """Scrolled deep into a long session, the lane headers stay visible below the page's header."""
    open_page(browser, replay_html(large_session(600), tmp_path / "long.html"))
    browser.execute_script("scrollTo(0, document.documentElement.scrollHeight / 2)")
    settle(browser)
    shown = browser.execute_script(
        """
        const head = document.querySelector('.lane-head'), box = head.getBoundingClientRect();
        const under = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
        return scrollY > 0 && box.top >= 0 && box.bottom <= innerHeight && head.contains(under);
        """
    )
    assert shown


def large_session(n: int = 10_000) -> Memory:
    """Return ``n`` steps over three agents, with thoughts of varied length (cards of varied height)."""
    return Memory(
        [
            MemoryItem(step=n, agent=f"agent-{n % 3}", thought="t" * (n % 50 * 7), cost=0.001)
            for n in range(n)
        ]
    )


def card_count(browser: Any) -> int:
    return int(browser.execute_script("return document.querySelectorAll('.card').length"))


def cards_in_view(browser: Any) -> list[int]:
    """Return the positions of the cards that intersect the window."""
    return list(
        browser.execute_script(
            """
            return Array.from(document.querySelectorAll('.card')).filter(function (card) {
              var box = card.getBoundingClientRect();
              return box.bottom > 0 && box.top < innerHeight;
            }).map(function (card) { return Number(card.dataset.position); });
            """
        )
    )


def settle(browser: Any) -> None:
    """Let the page handle the scroll events of the last action (two animation frames)."""
    browser.execute_async_script(
        "var done = arguments[0]; requestAnimationFrame(function () { requestAnimationFrame(done); });"
    )


def test_large_session_renders_only_what_is_in_view(tmp_path: Path, browser: Any) -> None:
    """A 10,000-step page counts every step but puts only a window of cards in the page."""
    open_page(browser, replay_html(large_session(), tmp_path / "large.html"))
    assert browser.find_element("id", "status").text == "10,000 items"
    assert browser.find_element("css selector", "h1").text.endswith(": 10,000 items")
    assert 0 < card_count(browser) < 1_000
    browser.execute_script("window.kvTimeline.reveal(9000)")
    assert browser.find_element("css selector", '.card[data-position="9000"]').is_displayed()
    assert card_count(browser) < 1_000


def test_jumping_to_the_end_keeps_the_document_small(tmp_path: Path, browser: Any) -> None:
    """A click on the chart's right end shows the last step with well under 1,000 cards in the page."""
    open_page(browser, replay_html(large_session(), tmp_path / "large.html"))
    chart = browser.find_element("css selector", "#chart svg")
    browser.execute_script(
        """
        var svg = arguments[0], box = svg.getBoundingClientRect();
        svg.dispatchEvent(new MouseEvent('click', {clientX: box.right - 1, clientY: box.top + 5, bubbles: true}));
        """,
        chart,
    )
    settle(browser)
    assert browser.find_element("css selector", '.card[data-position="9999"]').is_displayed()
    assert card_count(browser) < 1_000
    assert max(cards_in_view(browser)) >= 9_950


def test_end_key_and_scrolling_back_keep_the_window_bounded(tmp_path: Path, browser: Any) -> None:
    """Scrolling to the bottom (End) and back up moves the window; the page never holds every card."""
    open_page(browser, replay_html(large_session(), tmp_path / "large.html"))
    counts = []
    browser.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
    for _ in range(5):
        settle(browser)
        counts.append(card_count(browser))
    assert 9_999 in cards_in_view(browser)
    for _ in range(30):  # scroll up a few screens at a time: cards are put back above the view
        browser.execute_script("window.scrollBy(0, -2 * innerHeight)")
        settle(browser)
        counts.append(card_count(browser))
        assert cards_in_view(browser), "the view must never be left empty"
    assert min(cards_in_view(browser)) < 9_900
    browser.execute_script("window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    settle(browser)
    middle = cards_in_view(browser)
    assert middle
    assert 3_000 < min(middle) < 7_000
    assert max(counts) < 1_000


def test_cards_in_view_follow_in_order_after_scrolling(tmp_path: Path, browser: Any) -> None:
    """Scrolling down through the window shows consecutive steps, none skipped or repeated."""
    open_page(browser, replay_html(large_session(2_000), tmp_path / "large.html"))
    seen: list[int] = []
    for _ in range(40):
        seen.extend(p for p in cards_in_view(browser) if not seen or p > seen[-1])
        browser.execute_script("window.scrollBy(0, innerHeight * 0.9)")
        settle(browser)
    assert seen == list(range(seen[0], seen[-1] + 1))
    assert seen[0] == 0
    assert seen[-1] > 150


def test_line_separators_show_as_line_breaks(tmp_path: Path, browser: Any) -> None:
    """U+2028 and U+2029 inside a value break the line instead of vanishing."""
    memory = Memory([MemoryItem(step=1, thought="line one\u2028line two\u2029line three")])
    open_page(browser, replay_html(memory, tmp_path / "separators.html"))
    text = browser.find_element("css selector", ".card dd").text
    assert text.splitlines() == ["line one", "line two", "line three"]


def test_a_single_cost_is_named_but_not_drawn(tmp_path: Path) -> None:
    """One known cost gives a legend with its total and no chart line or lone dot."""
    page = page_text(tmp_path, Memory([MemoryItem(step=1, cost=0.25), MemoryItem(step=2)]))
    assert "total 0.25" in page
    assert "<svg" not in page
    assert "<circle" not in page


def test_scheme_references_are_not_read_as_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``javascript:alert(3)`` is named as not embedded, even when a file of that name exists."""
    monkeypatch.chdir(tmp_path)
    Path("javascript:alert(3)").write_bytes(png(2, 2, []))
    page = page_text(tmp_path, Memory([MemoryItem(step=1, screenshot="javascript:alert(3)")]))
    assert "data:image/png;base64" not in page
    assert "not a file path, an http(s) URL or an image data: URL" in page


def test_screenshot_of_the_demo_session(demo_page: Path, browser: Any) -> None:
    """The test run saves a screenshot of the demo page (build/screenshots/timeline.png)."""
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    size = browser.get_window_size()
    browser.set_window_size(1280, 1200)
    try:
        assert browser.save_screenshot(str(SCREENSHOT))
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert SCREENSHOT.read_bytes().startswith(b"\x89PNG")
