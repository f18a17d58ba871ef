"""Stores under real processes: a writer killed with SIGKILL, and writers at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.memory import MemoryItem
from agents.memory.stores import open_store

ROOT = str(Path(__file__).resolve().parent.parent)

APPENDER = textwrap.dedent(
    """
    import sys
    from agents.memory import MemoryItem
    from agents.memory.stores import open_memory

    url, session, writer, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with open_memory(url, session) as memory:
        for i in range(count):
            memory.add_memory_item(MemoryItem(step=i, writer=writer, text="x" * 200))
            # The append has returned: acknowledge it to the parent.
            sys.stdout.write(f"{i}\\n")
            sys.stdout.flush()
    """
)


def spawn(url: str, session: str, writer: str, count: int) -> subprocess.Popen[str]:
    """Start a process that appends ``count`` items and acknowledges each on stdout."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, "-c", APPENDER, url, session, writer, str(count)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_sigkill_loses_no_acknowledged_append(kind: str, durable_url: Callable[[str], str]) -> None:
    """Every append acknowledged before SIGKILL is there on reopen, and the store opens cleanly."""
    url = durable_url(kind)
    child = spawn(url, "crash", "w", 100_000)
    assert child.stdout is not None
    acknowledged = -1
    for line in child.stdout:
        acknowledged = int(line)
        if acknowledged >= 300:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    with open_store(url) as store:
        steps = [item["step"] for item in store.read("crash")]
        # The killed process may have finished appends it had no time to acknowledge.
        assert steps[: acknowledged + 1] == list(range(acknowledged + 1))
        assert steps == list(range(len(steps)))
        store.append("crash", [MemoryItem(step=len(steps))])
        assert store.count("crash") == len(steps) + 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
def test_concurrent_writers_lose_nothing(kind: str, durable_url: Callable[[str], str]) -> None:
    """Four processes appending to one session at once: exact count, exact set, each writer in order."""
    url = durable_url(kind)
    writers, per_writer = 4, 150
    children = [spawn(url, "shared", f"w{n}", per_writer) for n in range(writers)]
    for child in children:
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        assert out.split() == [str(i) for i in range(per_writer)]
    with open_store(url) as store:
        records = store.records("shared")
    assert len(records) == writers * per_writer
    pairs = [(r.item["writer"], r.item["step"]) for r in records]
    assert set(pairs) == {(f"w{n}", i) for n in range(writers) for i in range(per_writer)}
    for n in range(writers):
        assert [s for w, s in pairs if w == f"w{n}"] == list(range(per_writer))
    seqs = [r.seq for r in records]
    assert seqs == sorted(set(seqs))


NUMBERER = textwrap.dedent(
    """
    import sys
    from agents.memory import MemoryItem
    from agents.memory.stores import open_store

    url, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open_store(url) as store:
        for i in range(count):
            (record,) = store.append_steps("shared", [MemoryItem(writer=writer, call=i)])
            sys.stdout.write(f"{record.item['step']}\\n")
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "postgres"])
def test_processes_numbering_steps_at_once_never_give_one_twice(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Four processes taking the next step of one session at once get 1..n between them, each once."""
    url = durable_url(kind)
    with open_store(url):
        pass  # created once, so the writers do not race to make it
    writers, per_writer = 4, 60
    env = {**os.environ, "PYTHONPATH": ROOT}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", NUMBERER, url, f"w{n}", str(per_writer)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for n in range(writers)
    ]
    told = []
    for child in children:
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        told += [int(line) for line in out.split()]
    everything = list(range(1, writers * per_writer + 1))
    assert sorted(told) == everything
    with open_store(url) as store:
        records = store.records("shared")
    assert [r.item["step"] for r in records] == everything
    for n in range(writers):
        assert [r.item["call"] for r in records if r.item["writer"] == f"w{n}"] == list(
            range(per_writer)
        )


OPENER = textwrap.dedent(
    """
    import sys
    from agents.memory import MemoryItem
    from agents.memory.stores import open_store

    with open_store(sys.argv[1]) as store:
        store.append("s", [MemoryItem(step=1)])
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_processes_creating_one_store_at_once_all_succeed(kind: str, tmp_path: Path) -> None:
    """Processes that create the same new store together never take it for a foreign file."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    for round_ in range(4):
        url = f"{kind}://{tmp_path / f'store-{round_}'}"
        children = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, url],
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(6)
        ]
        errors = [child.communicate()[1] for child in children]
        assert [child.returncode for child in children] == [0] * 6, errors
        with open_store(url) as store:
            assert store.count("s") == 6
