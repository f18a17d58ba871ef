"""Timeline benchmark: how long the HTML timeline of a large session takes to open in Chromium.

Writes the ``replay_html`` page of a session of 10,000 agent steps (two
agents, ten fields each, a screenshot per step) and opens it in a headless
Chromium (Debian's ``chromium`` and ``chromedriver``, as ``scripts/test``
installs them), best of several loads. The time is the page's own clock when
its first view is rendered (``performance.now()``: reading the file, parsing,
running the script). The baseline is a page holding the same data that only
parses it: the ratio shows what rendering adds on top of loading the data.
Prints the page size, both times and their ratio.

Run: .venv/bin/python benchmarks/bench_timeline.py [--items N] [--repeat R]
"""

from __future__ import annotations

import argparse
import base64
import pathlib
import re
import tempfile
import time

from _common import make_rows
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from agents.agent import replay_html
from agents.memory import Memory

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)


def load_ms(driver: webdriver.Chrome, page: pathlib.Path, repeat: int) -> float:
    """Return the best time, in ms, from navigation start until the page says it is ready."""
    times = []
    for _ in range(repeat):
        driver.get("about:blank")
        driver.get(page.as_uri())
        times.append(float(driver.execute_script("return window.kvTimeline.readyMs")))
    return min(times)


def main() -> None:
    """Write the pages, load them and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    folder = pathlib.Path(tempfile.mkdtemp(prefix="kvmemory-bench-"))
    shot = folder / "shot.png"
    shot.write_bytes(PIXEL)
    rows = make_rows(args.items)
    for row in rows:
        row["agent"] = "HostAgent" if row["step"] % 4 == 0 else "AppAgent"
        row["screenshot"] = str(shot)
    memory = Memory(session_id="bench")
    memory.from_list_of_dicts(rows)
    start = time.perf_counter()
    page = replay_html(memory, folder / "timeline.html")
    write_s = time.perf_counter() - start
    text = page.read_text(encoding="utf-8")
    data = re.search(r'<script id="kv-data" type="application/json">.*?</script>', text, re.S)
    assert data is not None
    baseline = folder / "baseline.html"
    baseline.write_text(
        "<!DOCTYPE html><meta charset=utf-8>"
        + data.group(0)
        + "<script>JSON.parse(document.getElementById('kv-data').textContent);"
        + "window.kvTimeline = {readyMs: performance.now()};</script>",
        encoding="utf-8",
    )

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={folder / 'profile'}")
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        timeline_ms = load_ms(driver, page, args.repeat)
        cards = len(driver.find_elements("css selector", ".card"))
        baseline_ms = load_ms(driver, baseline, args.repeat)
    finally:
        driver.quit()
    print(
        f"{args.items:,} steps: page {len(text) / 1e6:.1f} MB written in {write_s:.2f} s; "
        f"opens in {timeline_ms:.0f} ms vs {baseline_ms:.0f} ms to load and parse the data alone "
        f"(ratio {timeline_ms / baseline_ms:.2f}); {cards} cards in the page"
    )


if __name__ == "__main__":
    main()
