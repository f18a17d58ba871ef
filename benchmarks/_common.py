"""What the benchmarks share: the agent-step rows they time, the timer, and a PostgreSQL schema of their own."""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any


def make_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Return ``n`` agent-step dicts with 10 fields each (text, numbers, a flag), steps from ``start``."""
    actions = ["click", "type", "scroll", "select", "wait"]
    return [
        {
            "step": i,
            "thought": f"Step {i}: the dialog is open, so I should press OK to close it and go on.",
            "action": actions[i % 5],
            "observation": f"window 'Report {i % 97}.docx' is focused; 3 controls visible",
            "cost": 0.0005 * (i % 13),
            "tokens": 800 + i % 400,
            "screenshot": f"/runs/2024-05-01/step_{i}.png",
            "status": "CONTINUE",
            "plan": "close the dialog, then save the document as PDF",
            "ok": i % 7 != 0,
        }
        for i in range(start, start + n)
    ]


def make_ufo_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Return ``n`` nested agent-step dicts shaped as UFO records them (arguments dict, control lists)."""
    actions = ["click_input", "set_edit_text", "wheel_mouse_input", "select", "wait"]
    apps = ["WINWORD.EXE", "EXCEL.EXE", "explorer.exe"]
    return [
        {
            "step": i,
            "subtask": f"Save the report {i % 97} as PDF",
            "action": actions[i % 5],
            "arguments": {"x": 100 + i % 800, "y": 40 + i % 600, "button": "left", "double": False},
            "observation": f"window 'Report {i % 97}.docx' is focused; 3 controls visible",
            "thought": f"Step {i}: the dialog is open, so I should press OK to close it and go on.",
            "cost": 0.0005 * (i % 13),
            "status": "CONTINUE",
            "application": apps[i % 3],
            "round": i // 50,
            "controls": [
                {"label": str(k), "control_text": f"Button {k}", "control_type": "Button"}
                for k in range(3)
            ],
            "selected": [f"{i % 7}", "OK"],
        }
        for i in range(start, start + n)
    ]


def best(
    fn: Callable[[], object],
    repeat: int,
    setup: Callable[[], object] | None = None,
    *,
    gc_on: bool = False,
) -> float:
    """Return the best wall time of ``repeat`` calls of ``fn`` (``setup`` runs untimed before each).

    The collector is off while ``fn`` runs unless ``gc_on`` (then a build pays
    for the collections its allocations trigger, as in a real process).
    """
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        gc.collect()
        if not gc_on:
            gc.disable()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        gc.enable()
    return min(times)


def per_call(fn: Callable[[], object], runs: int, calls: int) -> str:
    """Run ``fn`` ``calls`` times in each of ``runs`` runs; return each run's wall and process CPU per call, median [min-max] in µs, with the load average."""
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        walls.append((time.perf_counter() - wall) / calls * 1e6)
        cpus.append((time.process_time() - cpu) / calls * 1e6)
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        load = loadavg.read().split()[0]
    return (
        f"wall {statistics.median(walls):.2f} us [{min(walls):.2f}-{max(walls):.2f}]"
        f" cpu {statistics.median(cpus):.2f} us [{min(cpus):.2f}-{max(cpus):.2f}] load {load}"
    )


@contextlib.contextmanager
def postgres_schema(base: str, *, pgvector: bool = True, prefix: str = "bench") -> Iterator[str]:
    """Yield ``base`` with a fresh schema as its search path, dropped (with its tables) afterwards.

    ``pgvector=False`` adds ``pgvector=off`` to the URL, so no extension is
    created (an extension is database-wide and would outlive the schema).
    """
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options=-csearch_path%3D{schema}" + ("" if pgvector else "&pgvector=off")
    finally:
        with psycopg.connect(base, autocommit=True) as con:
            con.execute(f"DROP SCHEMA {schema} CASCADE")
