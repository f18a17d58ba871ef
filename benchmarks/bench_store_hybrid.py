"""What a hybrid `Store.search` costs on SQLite and PostgreSQL, for several versions of the library side by side.

Each version (a folder holding an ``agents`` package: a worktree, or a
commit extracted with ``git archive <commit> agents | tar -x -C DIR``) gets
its own store of a held-out family (``benchmarks/corpora_heldout.py``:
``--items`` items, ``--facts`` planted facts asked three ways, so ``3 *
--facts`` queries), built and embedded once by a process running that
version. Then, for ``--rounds`` rounds, a fresh process per version (the
versions alternating within a round) opens its store, runs every query
once untimed (the vector cache fills) and twice timed, and reports the
median milliseconds of a query. The table gives, per store and family, each
version's median over the rounds, the rounds themselves, and its ratio to
the first version, with the load average beside.

Usage::

    python benchmarks/bench_store_hybrid.py \\
        --versions before=/tmp/d38/before,main=/tmp/d38/main,branch=. \\
        [--stores sqlite,postgres] [--postgres URL] \\
        [--families agent-steps,crowded-steps] [--items 3000] [--facts 60] [--rounds 3]

The embedder is ``WordLlamaEmbedder`` (as ``bench_heldout.py``), or
``HashingEmbedder(256)`` with ``--hashing``. PostgreSQL runs only with
``--postgres`` (or ``KVMEMORY_BENCH_POSTGRES_URL``); each version gets a
schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def load() -> str:
    """Return the load average as ``uptime`` prints it."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def _embedder(hashing: bool) -> Any:
    from agents.memory.search import HashingEmbedder, WordLlamaEmbedder

    return HashingEmbedder(256) if hashing else WordLlamaEmbedder()


def _queries(family: str, items: int, facts: int) -> tuple[list[dict[str, Any]], list[str]]:
    sys.path.insert(0, HERE)
    import corpora_heldout as heldout

    made = heldout.make_family(family, items, facts, 1)
    return made.items, [query for kind in heldout.KINDS for query, _ in made.queries(kind)]


def child(args: argparse.Namespace) -> None:
    """Build the store (``--child build``) or time its queries (``--child query``), in this process's version."""
    from agents.memory import MemoryItem
    from agents.memory.stores import open_store

    rows, queries = _queries(args.family, args.items, args.facts)
    embedder = _embedder(args.hashing)
    with open_store(args.url) as store:
        if args.child == "build":
            store.append("s", [MemoryItem(**row) for row in rows])
            store.index_embeddings("s", embedder)
            print(json.dumps({"items": store.count("s")}))
            return
        for query in queries:  # untimed: the vector cache fills, the statements are prepared
            store.search("s", query, 5, mode="hybrid", embedder=embedder)
        took = []
        for _ in range(2):
            for query in queries:
                start = time.perf_counter()
                store.search("s", query, 5, mode="hybrid", embedder=embedder)
                took.append(time.perf_counter() - start)
    print(json.dumps({"median_ms": 1000 * statistics.median(took), "queries": len(queries)}))


def _run(version: str, argv: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(version)}
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{version}: {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _schema_url(postgres: str, schema: str) -> str:
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as con:
        con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        con.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres else "?"
    return f"{postgres}{sep}options=-csearch_path%3D{schema}"


def main() -> None:
    """Parse the options; build each version's stores, then time them in alternating processes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default="branch=.")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--postgres", default=os.environ.get("KVMEMORY_BENCH_POSTGRES_URL"))
    parser.add_argument("--families", default="agent-steps,crowded-steps")
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--facts", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hashing", action="store_true")
    parser.add_argument("--child", choices=["build", "query"])
    parser.add_argument("--url")
    parser.add_argument("--family")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    versions = dict(pair.split("=", 1) for pair in args.versions.split(","))
    stores = [s for s in args.stores.split(",") if s != "postgres" or args.postgres]
    common = ["--items", str(args.items), "--facts", str(args.facts)]
    common += ["--hashing"] if args.hashing else []
    print(f"== hybrid Store.search, {args.items} items, {3 * args.facts} queries; {load()}")
    with tempfile.TemporaryDirectory() as folder:
        urls: dict[tuple[str, str, str], str] = {}
        for store in stores:
            for family in args.families.split(","):
                for name, version in versions.items():
                    tag = f"{store}_{family}_{name}".replace("-", "_")
                    if store == "sqlite":
                        url = f"sqlite://{folder}/{tag}.db"
                    else:
                        url = _schema_url(args.postgres, f"kvmemory_bench_{tag}")
                    took = time.perf_counter()
                    built = _run(
                        version, ["--child", "build", "--url", url, "--family", family, *common]
                    )
                    print(
                        f"  built {tag}: {built['items']} items, {time.perf_counter() - took:.0f} s; {load()}",
                        flush=True,
                    )
                    urls[store, family, name] = url
        times: dict[tuple[str, str, str], list[float]] = {}
        for round_ in range(args.rounds):
            for store in stores:
                for family in args.families.split(","):
                    for name, version in versions.items():
                        url = urls[store, family, name]
                        got = _run(
                            version, ["--child", "query", "--url", url, "--family", family, *common]
                        )
                        times.setdefault((store, family, name), []).append(got["median_ms"])
            print(f"  round {round_ + 1} done; {load()}", flush=True)
        print(f"{'store':<10}{'family':<16}{'version':<10}{'median ms [rounds]':<34}ratio")
        first = next(iter(versions))
        for store in stores:
            for family in args.families.split(","):
                base = statistics.median(times[store, family, first])
                for name in versions:
                    runs = times[store, family, name]
                    med = statistics.median(runs)
                    shown = f"{med:.1f} [{', '.join(f'{t:.1f}' for t in runs)}]"
                    print(f"{store:<10}{family:<16}{name:<10}{shown:<34}{med / base:.2f}x")
        print(f"done; {load()}")
        if args.postgres:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as con:
                for (store, family, name), _ in urls.items():
                    if store == "postgres":
                        tag = f"{store}_{family}_{name}".replace("-", "_")
                        con.execute(f"DROP SCHEMA IF EXISTS kvmemory_bench_{tag} CASCADE")


if __name__ == "__main__":
    main()
