"""The cost of one ``Backend.vectors_version`` call on an SQLite (or ``--url``'s) session with vectors (a query asks it about twice).

Two sessions of ``--items`` steps each, embedded with ``HashingEmbedder(64)``;
``--runs`` runs of ``--calls`` calls on one handle, each run's wall and
process CPU per call in µs; the median and spread printed with the load
average. Run it on two checkouts in turn (``PYTHONPATH=<checkout>``) to
compare them. ``--url`` names another store, empty (a PostgreSQL database of
its own for each checkout: a newer schema is not opened by an older one).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_vectors_version.py --runs 15``
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
    """Time ``vectors_version`` and print its median and spread per call."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--url", help="an empty store's URL (default: an SQLite file of its own)")
    args = parser.parse_args()
    fields = fields_text(None, EmbedParts())
    with tempfile.TemporaryDirectory() as folder:
        url = args.url or f"sqlite://{Path(folder) / 'bench.db'}"
        with open_store(url) as store:
            for sid in ("s", "t"):
                store.append(
                    sid, [MemoryItem(step=i, thought=f"w{i} x") for i in range(args.items)]
                )
                store.index_embeddings(sid, HashingEmbedder(64))
        with open_store(url) as store:
            backend = store.backend
            print("version", backend.vectors_version("s", fields))
            print(per_call(lambda: backend.vectors_version("s", fields), args.runs, args.calls))


if __name__ == "__main__":
    main()
