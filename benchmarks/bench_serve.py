"""Live view benchmark: what ``kvmemory serve`` pays to open and to poll a long session.

A SQLite store holds sessions of 100 and 1,000 items and a long one
(``--items``, default 200,000); the 1,000-item one opens on as many items
(500) as the long one, so the two differ in length only. Through the live view's app (``live_app``, in process,
with Starlette's test client) it times opening each session (the page and
its newest 500 items) and one poll that finds nothing new. The baselines are
the raw store calls those requests make (``store.tail(500)`` and
``store.records(after=last)``), so the ratios show what the web layer adds,
and the long/short ratio shows that opening does not grow with the session.
Best of ``--repeat`` runs.

Run: .venv/bin/python benchmarks/bench_serve.py [--items N] [--repeat R]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import best, make_rows
from starlette.testclient import TestClient

from agents.integrations.web import live_app
from agents.memory import MemoryItem
from agents.memory.stores import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{Path(folder) / 'runs.db'}"
        with open_store(url) as store:
            store.append("100", [MemoryItem(**row) for row in make_rows(100)])
            store.append("1000", [MemoryItem(**row) for row in make_rows(1000)])
            for start in range(0, args.items, 20_000):
                rows = make_rows(min(20_000, args.items - start), start)
                store.append("long", [MemoryItem(**row) for row in rows])
        with (
            open_store(url, read_only=True) as store,
            TestClient(live_app(store), base_url="http://127.0.0.1") as client,
        ):
            times: dict[str, float] = {}
            last: dict[str, int] = {}
            for sid in ("100", "1000", "long"):
                last[sid] = store.tail(sid, 1)[-1].seq

                def open_page(sid: str = sid) -> None:
                    client.get("/session", params={"id": sid}).raise_for_status()
                    client.get("/api/tail", params={"session": sid, "n": "500"}).raise_for_status()

                def poll(sid: str = sid) -> None:
                    answer = client.get(
                        "/api/after", params={"session": sid, "seq": str(last[sid])}
                    )
                    answer.raise_for_status()

                times[f"open {sid}"] = best(open_page, args.repeat)
                times[f"raw tail {sid}"] = best(lambda sid=sid: store.tail(sid, 500), args.repeat)
                times[f"poll {sid}"] = best(poll, args.repeat)
                times[f"raw records {sid}"] = best(
                    lambda sid=sid: store.records(sid, after=last[sid]), args.repeat
                )
    for name, seconds in times.items():
        print(f"{name:>20}: {seconds * 1000:8.2f} ms")
    for sid in ("100", "1000"):
        print(
            f"open long / open {sid}: {times['open long'] / times[f'open {sid}']:.2f}x "
            f"(sessions of {args.items:,} and {sid} items)"
        )
    for sid in ("100", "1000", "long"):
        print(
            f"open {sid} / raw tail: {times[f'open {sid}'] / times[f'raw tail {sid}']:.2f}x; "
            f"poll {sid} / raw records(after=): {times[f'poll {sid}'] / times[f'raw records {sid}']:.2f}x"
        )


if __name__ == "__main__":
    main()
