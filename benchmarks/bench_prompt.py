"""Prompt benchmark: a token-budget window against projecting the whole memory.

Builds a memory of 100,000 agent steps and times, best of several runs, a
window of the newest steps under a 2,000-token budget next to projecting the
same keys of the whole memory, measured in one process. A window should cost
in proportion to what it keeps, not to the memory: the target ratio is below
0.01. Prints one line per case: both times and their ratio (window / whole).

Run: .venv/bin/python benchmarks/bench_prompt.py [--items N] [--repeat R] [--budget T]
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from _common import best, make_rows

from agents.memory import Memory, MemoryItem
from agents.memory.prompt import Window, project, select_window

KEYS = ["step", "thought", "action", "observation"]
TARGET = 0.01


def make_memory(n: int) -> Memory:
    """Return a memory of ``n`` agent steps with ten fields each."""
    memory = Memory()
    memory.from_list_of_dicts(make_rows(n))
    return memory


def main() -> None:
    """Run the cases and print their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--budget", type=int, default=2_000)
    args = parser.parse_args()
    warnings.simplefilter("error")

    memory = make_memory(args.items)
    window = Window(max_tokens=args.budget, image_keys=())
    sample: dict[str, Any] = {}

    def whole() -> None:
        sample["whole"] = project(memory, KEYS)

    def windowed() -> None:
        sample["window"] = select_window(memory, window, keys=KEYS)

    def budgeted() -> None:
        sample["budget"] = project(memory, KEYS, budget=args.budget)

    counter = [args.items]

    def append_one() -> None:
        # A new step before each window, as in an agent loop: nothing cached
        # from the previous call can be reused.
        memory.add_memory_item(MemoryItem(step=counter[0], action="click", thought="t"))
        counter[0] += 1

    t_whole = best(whole, args.repeat)
    t_raw = best(lambda: memory.filter_memory_from_keys(KEYS), args.repeat)
    cases = [
        ("select_window, newest first", best(windowed, args.repeat)),
        ("project(budget=...)", best(budgeted, args.repeat)),
        ("select_window after an append", best(windowed, args.repeat, setup=append_one)),
    ]
    result = sample["window"]
    print(
        f"memory: {args.items:,} items; window: {len(result.records)} items, "
        f"{result.tokens} of {args.budget} tokens; whole projection: {len(sample['whole']):,} records"
    )
    print(
        f"whole projection: project() {t_whole * 1e3:.2f}ms, "
        f"Memory.filter_memory_from_keys() {t_raw * 1e3:.2f}ms (ratios use the faster)"
    )
    t_whole = min(t_whole, t_raw)
    print(f"{'case':34} {'window':>10} {'whole':>10} {'ratio':>8}  target < {TARGET}")
    for name, seconds in cases:
        ratio = seconds / t_whole
        verdict = "ok" if ratio < TARGET else "OVER"
        print(f"{name:34} {seconds * 1e3:8.3f}ms {t_whole * 1e3:8.2f}ms {ratio:8.5f}  {verdict}")


if __name__ == "__main__":
    main()
