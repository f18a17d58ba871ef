"""The cost of one JSONL ``Backend.vector_changes`` call that reads the log file: a fresh handle catching a coded file up.

A session of ``--items`` steps embedded with ``HashingEmbedder(64)``; the
version is kept, ``--written`` more steps are recorded and embedded by
another handle, and a fresh handle (which has not followed those appends)
asks which seqs changed between the two versions: it checks the log's tail
at the kept length and reads the records appended since. ``--runs`` runs of
``--calls`` calls, each run's wall and process CPU per call in µs; the
median and spread printed with the load average. Run it on two checkouts in
turn (``PYTHONPATH=<checkout>``) to compare them.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_jsonl_catchup.py --runs 15``
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import per_call

from agents.memory import MemoryItem
from agents.memory._vectors import fields_text
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import open_store


def main() -> None:
    """Time ``vector_changes`` read from the file and print its median and spread per call."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--written", type=int, default=20)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    fields = fields_text(None, EmbedParts())
    embedder = HashingEmbedder(64)
    with tempfile.TemporaryDirectory() as folder:
        url = f"jsonl://{Path(folder) / 'store'}"
        with open_store(url) as store:
            store.append("s", [MemoryItem(step=i, thought=f"w{i} x") for i in range(args.items)])
            store.index_embeddings("s", embedder)
            since = store.backend.vectors_version("s", fields)
        with open_store(url) as store:
            more = range(args.items, args.items + args.written)
            store.append("s", [MemoryItem(step=i, thought=f"w{i} y") for i in more])
            store.index_embeddings("s", embedder)
            now = store.backend.vectors_version("s", fields)
        with open_store(url) as store:
            backend = store.backend
            changed = backend.vector_changes("s", fields, since, now)
            print("changed", None if changed is None else len(changed))
            print(
                per_call(
                    lambda: backend.vector_changes("s", fields, since, now), args.runs, args.calls
                )
            )


if __name__ == "__main__":
    main()
