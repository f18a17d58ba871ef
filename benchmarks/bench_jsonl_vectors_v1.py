"""A fresh process's first semantic query over a JSONL session whose ``<sid>.vectors`` is of version 1, and a writable handle's save of it in version 2.

Version 1 of the vector file (written by kvmemory before the file's blocks
had sums of their own) checked every part whole as it was loaded. Each
measurement is a process of its own, with ``PYTHONPATH`` set to one of
``--checkouts`` in turn (A/B/A/B), over ``--store``, a JSONL store folder
that ``bench_first_process.py --stores jsonl`` wrote with a kvmemory whose
file was version 1 (its session ``first-<N>-parts``, ``EmbedParts()``,
256 wide):

- ``--case read-only``: the store opened read-only (the live view, the MCP
  server, the CLI), its first semantic query timed (wall and process CPU
  ms), and whether it read the log whole. Nothing is written, so
  ``--store`` itself is read.
- ``--case writable``: a folder of its own a run (the log hard-linked, the
  other files copied, untimed), opened writable, its first semantic query
  timed, then its second; the time spent saving the vector file
  (``SessionVectors._save``: building its bytes, ``file_bytes``, and
  writing them, ``atomic_write``, with its fsync) is printed apart, and the
  version of the file the run left.

The hits of each run are printed as a digest, to compare checkouts.

Run: .venv/bin/python benchmarks/bench_jsonl_vectors_v1.py --store DIR
     --checkouts /path/a,/path/b [--case read-only|writable] [--runs 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUERIES = ("press OK to save the file", "which window is focused")  # bench_first_process's


def child(folder: str, sid: str, read_only: bool) -> None:
    """Time, in this fresh process: the store's open, its first semantic query and its second; print them as JSON."""
    from agents.memory import _codec
    from agents.memory.search import EmbedParts, HashingEmbedder
    from agents.memory.stores import JSONLStore
    from agents.memory.stores._jsonl import vector_views

    spent: dict[str, float] = {"save": 0.0, "save cpu": 0.0, "bytes": 0.0, "write": 0.0}

    def timed(name: str, call: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                spent[name] += 1000 * (time.perf_counter() - wall)
                if f"{name} cpu" in spent:
                    spent[f"{name} cpu"] += 1000 * (time.process_time() - cpu)

        return wrapper

    # Timed in place, in this child process only: the save a query makes is what is measured.
    vector_views.SessionVectors._save = timed("save", vector_views.SessionVectors._save)  # type: ignore[method-assign]  # a method replaced by its timed wrapper
    vector_views.file_bytes = timed("bytes", vector_views.file_bytes)
    _codec.atomic_write = timed("write", _codec.atomic_write)
    embedder = HashingEmbedder(256)
    out: dict[str, Any] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    store = JSONLStore(folder, read_only=read_only)
    out["open"] = 1000 * (time.perf_counter() - wall)
    hits = []
    for name, query in zip(("first", "second"), QUERIES, strict=True):
        wall, cpu = time.perf_counter(), time.process_time()
        found = store.search(sid, query, 5, mode="semantic", embedder=embedder, parts=EmbedParts())
        out[name] = 1000 * (time.perf_counter() - wall)
        out[f"{name} cpu"] = 1000 * (time.process_time() - cpu)
        hits.append([(hit.seq, hit.score) for hit in found])
    out["log read whole"] = store.backend._logs.viewed(sid)
    store.close()
    out.update(spent)
    out["hits"] = hashlib.sha1(json.dumps(hits).encode()).hexdigest()[:12]
    with open(os.path.join(folder, f"{sid}.vectors"), "rb") as file:
        out["version after"] = json.loads(file.readline())["version"]
    print(json.dumps(out))


def workspace(store: str, work: str) -> str:
    """Return a folder of its own for a writable run: the log hard-linked (never written by a query), the rest copied."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for entry in os.scandir(store):
        target = os.path.join(work, entry.name)
        if entry.is_dir():
            shutil.copytree(entry.path, target)
        elif entry.name.endswith(".jsonl"):
            os.link(entry.path, target)
        else:
            shutil.copy2(entry.path, target)
    return work


def load() -> str:
    """Return the load average (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cell(values: list[float]) -> str:
    """Return ``median [spread]`` of some figures."""
    return f"{statistics.median(values):9.1f} [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    """Run the children in turn over the checkouts and print medians [spread]."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--store", required=False)
    parser.add_argument("--sid", default="first-100000-parts")
    parser.add_argument("--checkouts", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--case", choices=("read-only", "writable"), default="read-only")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--work", default=os.path.join(tempfile.gettempdir(), "kvmemory-bench-vectors-v1")
    )
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2] == "read-only")
        return
    with open(os.path.join(args.store, f"{args.sid}.vectors"), "rb") as file:
        version = json.loads(file.readline())["version"]
    print(f"{args.case} runs over {args.store} (vector file version {version}); load {load()}")
    runs: dict[str, list[dict[str, Any]]] = {}
    for run in range(args.runs):
        for checkout in args.checkouts.split(","):
            folder = args.store if args.case == "read-only" else workspace(args.store, args.work)
            env = {**os.environ, "PYTHONPATH": checkout}
            before = os.stat(os.path.join(folder, f"{args.sid}.jsonl"))
            done = subprocess.run(
                [sys.executable, __file__, "--child", folder, args.sid, args.case],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            after = os.stat(os.path.join(folder, f"{args.sid}.jsonl"))
            if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
                raise SystemExit("the log was written")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            runs.setdefault(checkout, []).append(figures)
            print(f"  run {run + 1} {checkout}: {figures} (load {load()})", file=sys.stderr)
    if args.case == "writable":
        shutil.rmtree(args.work, ignore_errors=True)
    print(f"\n== medians [spread] of {args.runs} runs, ms (load {load()})")
    for checkout, figures in runs.items():
        print(checkout)
        for key in ("open", "first", "first cpu", "second", "second cpu", "save", "save cpu"):
            print(f"  {key:12}", cell([run[key] for run in figures]))
        for key in ("bytes", "write"):
            print(f"  {key:12}", cell([run[key] for run in figures]))
        for key in ("log read whole", "version after", "hits"):
            print(f"  {key:12}", sorted({str(run[key]) for run in figures}))


if __name__ == "__main__":
    main()
