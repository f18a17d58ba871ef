"""A large product of cosines on one thread against row blocks scored on a few threads (tried for issue 34, not adopted).

numpy's ``einsum`` releases the GIL and sums each row alone, so a product
cut into blocks of rows and scored on several threads gives the floats
of one call over every row. This times the design that was tried: a
shared pool of ``threads - 1`` helpers, the product cut into
``2 * threads`` blocks, the calling thread taking blocks itself and
waiting only for the blocks a helper has begun (a busy pool costs no
queued wait). One thread and the blocks are timed in turn on the same
matrix, for a few table sizes (rows of 256 float32: every part scored;
rows of 39: the parts screen's bound), and the median wall and process
CPU time of each is printed with the load average. The floats are checked
equal first. See docs/search.md, "Row blocks on a few threads".

    python benchmarks/bench_row_blocks.py --rows 16000,40000,123000 --calls 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


class Blocks:
    """The row blocks of one product, taken one at a time by the caller and the helpers that start in time."""

    def __init__(self, matrix: np.ndarray, query: np.ndarray, blocks: int) -> None:
        rows = len(matrix)
        self.matrix, self.query = matrix, query
        self.cuts = [rows * block // blocks for block in range(blocks + 1)]
        self.out = np.empty(rows, dtype=np.result_type(matrix.dtype, query.dtype))
        self.taken = self.done = 0
        self.condition = threading.Condition()

    def work(self) -> None:
        """Score blocks until none is left to take."""
        total = len(self.cuts) - 1
        while True:
            with self.condition:
                block = self.taken
                if block >= total:
                    return
                self.taken += 1
            start, stop = self.cuts[block], self.cuts[block + 1]
            np.einsum("ij,j->i", self.matrix[start:stop], self.query, out=self.out[start:stop])
            with self.condition:
                self.done += 1
                self.condition.notify_all()

    def result(self, pool: ThreadPoolExecutor, helpers: int) -> np.ndarray:
        """Return the product, the blocks scored by the caller and the helpers."""
        for _ in range(helpers):
            pool.submit(self.work)
        self.work()
        with self.condition:
            while self.done < len(self.cuts) - 1:
                self.condition.wait()
        return self.out


def timed(call: object, calls: int) -> tuple[float, float]:
    """Return the median wall and CPU milliseconds of ``calls`` calls."""
    walls, cpus = [], []
    for _ in range(calls):
        wall, cpu = time.perf_counter(), time.process_time()
        call()  # type: ignore[operator]
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="16000,40000,123000")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=min(4, len(os.sched_getaffinity(0))))
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    helpers = max(1, args.threads - 1)
    pool = ThreadPoolExecutor(helpers, thread_name_prefix="bench-blocks")
    print(
        f"{args.threads} threads; rows x width | one thread wall / cpu ms | blocks wall / cpu ms | wall ratio | load"
    )
    for rows in (int(text) for text in args.rows.split(",")):
        matrix = rng.standard_normal((rows, args.width)).astype(np.float32)
        query = rng.standard_normal(args.width).astype(np.float32)

        def one(matrix: np.ndarray = matrix, query: np.ndarray = query) -> np.ndarray:
            return np.einsum("ij,j->i", matrix, query)

        def blocks(matrix: np.ndarray = matrix, query: np.ndarray = query) -> np.ndarray:
            return Blocks(matrix, query, 2 * args.threads).result(pool, helpers)

        assert one().tobytes() == blocks().tobytes()
        for _ in range(args.rounds):
            single = timed(one, args.calls)
            split = timed(blocks, args.calls)
            load = Path("/proc/loadavg").read_text().split()[0]
            print(
                f"{rows} x {args.width} | {single[0]:.3f} / {single[1]:.3f} | "
                f"{split[0]:.3f} / {split[1]:.3f} | {split[0] / single[0]:.2f} | {load}"
            )
    pool.shutdown()


if __name__ == "__main__":
    main()
