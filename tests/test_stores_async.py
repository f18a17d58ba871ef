"""The async API: open_async_store / open_async_memory on every store kind.

Each test runs its coroutine with ``asyncio.run`` (no plugin). The stores are
real: SQLite files, JSONL folders and the PostgreSQL server of ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agents.memory import (
    InvalidSessionIdError,
    ItemNotFoundError,
    MemoryItem,
    MissingDependencyError,
    StoreError,
)
from agents.memory.stores import (
    AsyncStore,
    AsyncStoredMemory,
    open_async_memory,
    open_async_store,
    open_memory,
    open_store,
)

T = TypeVar("T")


def run(coroutine: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coroutine()

    return asyncio.run(main())


def steps(n: int, *, start: int = 0, tag: str = "") -> list[MemoryItem]:
    return [
        MemoryItem(step=i, action=f"click {tag}{i}", arguments={"x": i, "y": -i}, cost=0.001)
        for i in range(start, start + n)
    ]


def test_every_store_call_answers_as_the_sync_store(store_url: str) -> None:
    """Each awaitable call returns what the same sync call returns on the same store."""

    async def main() -> None:
        async with open_async_store(store_url) as store:
            assert isinstance(store, AsyncStore)
            seqs = await store.append("a", steps(6), step_key="step")
            assert len(seqs) == 6
            await store.append("b", steps(2, tag="b"))
            got = {
                "read": await store.read("a"),
                "read_memory": list(await store.read_memory("a")),
                "read_with_terms": (await store.read_with_terms("a"))[0],
                "records": [r.seq for r in await store.records("a", after=seqs[2])],
                "project": await store.project("a", ["step", "action"], steps=[1, 4]),
                "tail": [r.item for r in await store.tail("a", 2)],
                "count": await store.count("a"),
                "sessions": sorted(await store.sessions()),
                "search": [h.item["step"] for h in await store.search("a", "click 3", k=2)],
                "summary": (await store.summary("a")).items,
                "info": (await store.session_info("a")).step_key,  # type: ignore[union-attr]
                "pages": [[r.item for r in page] async for page in store.pages("a", size=4)],
            }
            assert await store.delete_steps("a", [0]) == 1
            assert await store.keep_last("a", 4) == 1
            assert await store.delete_session("b") is True
        with open_store(store_url) as sync:
            expected = {
                "read": steps(6),
                "read_memory": steps(6),
                "read_with_terms": steps(6),
                "records": seqs[3:],
                "project": [{"step": 1, "action": "click 1"}, {"step": 4, "action": "click 4"}],
                "tail": steps(6)[4:],
                "count": 6,
                "sessions": ["a", "b"],
                "summary": 6,
                "info": "step",
                "pages": [steps(6)[:4], steps(6)[4:]],
            }
            assert {key: got[key] for key in expected} == expected
            assert got["search"][0] == 3
            assert sync.read("a") == steps(6)[2:]
            assert sync.sessions() == ["a"]

    run(main)


def test_batch_commits_at_the_end_of_the_block_and_not_on_error(store_url: str) -> None:
    """An async batch applies its writes in one transaction on exit, and none when the block raises."""

    async def main() -> None:
        async with open_async_store(store_url) as store:
            async with store.batch("s") as batch:
                batch.append(steps(3))
                batch.append(steps(1, start=3))
            assert len(batch.appended) == 4

            async def failing_batch() -> None:
                async with store.batch("s") as failing:
                    failing.clear()
                    raise RuntimeError("stop")

            with pytest.raises(RuntimeError, match="stop"):
                await failing_batch()
            assert await store.read("s") == steps(4)

    run(main)


def test_async_memory_writes_through_and_reopens(store_url: str) -> None:
    """Awaited adds and deletes are in the store on return; a sync or async reopen sees them."""

    async def main() -> None:
        async with open_async_memory(store_url, "run-1") as memory:
            assert isinstance(memory, AsyncStoredMemory)
            await memory.add_memory_item(MemoryItem(step=1, action="open"))
            await memory.add_memory_items(steps(3, start=2))
            await memory.delete_memory_item(3)
            assert [item["step"] for item in memory] == [1, 2, 4]
            assert memory.filter_memory_from_keys(["step"]) == [
                {"step": 1},
                {"step": 2},
                {"step": 4},
            ]
            assert memory.get_latest_item() == steps(1, start=4)[0]
        with open_memory(store_url, "run-1") as again:
            assert [item["step"] for item in again] == [1, 2, 4]
        async with open_async_memory(store_url, "run-1") as reopened:
            assert reopened.content == again.content
            hits = await reopened.search("open", k=1)
            assert hits[0].item["action"] == "open"

    run(main)


def test_a_second_handle_refreshes_to_see_another_writer(store_url: str) -> None:
    """An async memory refreshed after another handle appended holds the new items."""

    async def main() -> None:
        async with (
            open_async_store(store_url) as store,
            open_async_memory(store, "s") as first,
        ):
            with open_memory(store_url, "s") as writer:
                writer.add_memory_items(steps(3))
            assert len(first) == 0
            assert await first.refresh() == 3
            assert first.content == steps(3)

    run(main)


def test_read_only_async_store_reads_and_refuses_writes(store_url: str) -> None:
    """A read-only async store reads what another handle wrote and refuses to write."""
    with open_store(store_url) as sync:
        sync.append("s", steps(2))

    async def main() -> None:
        async with open_async_store(store_url, read_only=True) as store:
            assert await store.read("s") == steps(2)
            with pytest.raises(StoreError, match="read-only"):
                await store.append("s", steps(1))

    run(main)
    with open_store(store_url) as sync:
        assert sync.read("s") == steps(2)


def test_bad_session_id_is_refused_before_anything_opens(tmp_path: Path) -> None:
    """open_async_memory names a bad session id at once, and creates no store file."""
    with pytest.raises(InvalidSessionIdError):
        open_async_memory(tmp_path / "x.db", "")
    assert not (tmp_path / "x.db").exists()


def test_await_form_opens_and_leaves_closing_to_the_caller(tmp_path: Path) -> None:
    """``store = await open_async_store(url)`` opens; ``aclose`` closes, twice is harmless."""

    async def main() -> None:
        store = await open_async_store(tmp_path / "a.db")
        await store.append("s", steps(1))
        await store.aclose()
        await store.aclose()
        assert store.store.closed

    run(main)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_cancelled_writes_leave_store_and_memory_agreeing(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Cancelling an awaited add at any point leaves the store and the in-RAM view holding the same items."""
    url = durable_url(kind)

    async def main() -> None:
        async with open_async_memory(url, "s") as memory:
            for delay in range(12):
                task = asyncio.ensure_future(memory.add_memory_items(steps(50, start=100 * delay)))
                for _ in range(delay):
                    await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # A later call on the memory runs after the cancelled one: the views then agree.
                assert await memory.refresh() == 0
                stored = await memory.async_store.read("s")
                assert stored == memory.content
        with open_memory(url, "s") as again:
            assert again.content == stored

    run(main)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_concurrent_sessions_lose_nothing(kind: str, durable_url: Callable[[str], str]) -> None:
    """Fifty sessions appended concurrently with gather each hold all their items, in order."""
    url = durable_url(kind)

    async def one(store: AsyncStore, n: int) -> None:
        async with open_async_memory(store, f"s{n}") as memory:
            for i in range(5):
                await memory.add_memory_items(steps(4, start=4 * i, tag=f"{n}-"))

    async def main() -> None:
        async with open_async_store(url) as store:
            await asyncio.gather(*(one(store, n) for n in range(50)))
            for n in range(50):
                assert await store.read(f"s{n}") == steps(20, tag=f"{n}-")

    run(main)


def test_a_write_waiting_on_a_lock_does_not_block_the_loop(tmp_path: Path) -> None:
    """While an append waits for another process's SQLite write lock, other tasks keep running."""
    db = tmp_path / "locked.db"
    with open_store(db) as sync:
        sync.append("s", steps(1))
    locker = sqlite3.connect(db, check_same_thread=False)
    locker.execute("BEGIN IMMEDIATE")
    released = threading.Event()

    async def main() -> int:
        ticks = 0
        async with open_async_store(f"sqlite://{db}?timeout=20") as store:
            append = asyncio.ensure_future(store.append("s", steps(1, start=1)))
            while ticks < 20:
                await asyncio.sleep(0.01)
                assert not append.done()
                ticks += 1
            locker.rollback()
            released.set()
            await append
            assert await store.count("s") == 2
        return ticks

    try:
        assert run(main) == 20
    finally:
        if not released.is_set():
            locker.rollback()
        locker.close()


def test_store_errors_surface_from_the_await(tmp_path: Path) -> None:
    """A library error raised on the worker thread is raised by the await, with its message."""

    async def main() -> Any:
        async with open_async_store(tmp_path / "e.db") as store:
            with pytest.raises(InvalidSessionIdError):
                await store.append("", steps(1))
            return await store.sessions()

    assert run(main) == []


# -- PostgreSQL on psycopg's asyncio driver ------------------------------------------------


@pytest.mark.postgres
def test_postgres_and_sqlite_calls_run_off_the_program_loop_thread(
    durable_url: Callable[[str], str],
) -> None:
    """PostgreSQL writes run on the store's own loop thread (psycopg's async driver), SQLite's on its worker: never on the program's loop."""

    async def thread_of_a_write(url: str) -> int:
        seen: list[int] = []
        async with open_async_memory(
            url, "s", callbacks=[lambda memory, change: seen.append(threading.get_ident())]
        ) as memory:
            await memory.add_memory_item(MemoryItem(step=1))
        return seen[0]

    async def main() -> None:
        loop_thread = threading.get_ident()
        assert await thread_of_a_write(durable_url("postgres")) != loop_thread
        assert await thread_of_a_write(durable_url("sqlite")) != loop_thread

    run(main)


@pytest.mark.postgres
def test_cancelling_a_postgres_append_at_every_await_leaves_all_or_nothing(
    postgres_url: str,
) -> None:
    """An append cancelled after any number of loop steps commits whole (once started, its call runs on) or not at all."""

    async def main() -> list[MemoryItem]:
        expected: list[MemoryItem] = []
        for delay in range(16):
            batch = steps(20, start=100 * delay)
            store = await open_async_store(postgres_url)
            task = asyncio.ensure_future(store.append("s", batch))
            for _ in range(delay):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await store.aclose()  # waits for the call the cancelled await left running
            async with open_async_store(postgres_url) as reader:
                stored = await reader.read("s")
            # Cancelled before its coroutine ran: no call was made. Later: the call ran to its end.
            if delay > 0:
                expected += batch
            assert stored == expected, delay
        return expected

    expected = run(main)
    with open_store(postgres_url) as sync:
        assert sync.read("s") == expected


@pytest.mark.postgres
def test_many_tasks_appending_to_one_postgres_session_get_distinct_seqs_in_order(
    postgres_url: str,
) -> None:
    """Forty tasks appending to one session through the async pool lose nothing and share no seq."""

    async def main() -> None:
        async with open_async_store(postgres_url) as store:

            async def one(n: int) -> list[int]:
                seqs: list[int] = []
                for i in range(5):
                    seqs += await store.append("shared", steps(2, start=2 * i, tag=f"{n}-"))
                return seqs

            per_task = await asyncio.gather(*(one(n) for n in range(40)))
            records = await store.records("shared")
        every = [seq for seqs in per_task for seq in seqs]
        assert len(every) == len(set(every)) == 400
        assert [r.seq for r in records] == sorted(every)
        for n, seqs in enumerate(per_task):
            assert seqs == sorted(seqs)
            mine = [r.item for r in records if r.seq in set(seqs)]
            assert mine == steps(10, tag=f"{n}-")

    run(main)


@pytest.mark.postgres
def test_two_async_postgres_stores_see_each_others_commits(postgres_url: str) -> None:
    """Two async stores on one database: one's awaited append is read by the other at once."""

    async def main() -> None:
        async with (
            open_async_store(postgres_url) as first,
            open_async_store(postgres_url) as second,
            open_async_memory(second, "s") as memory,
        ):
            await asyncio.gather(*(first.append("s", steps(1, start=i)) for i in range(10)))
            assert await memory.refresh() == 10
            assert sorted(item["step"] for item in memory) == list(range(10))

    run(main)


@pytest.mark.postgres
def test_server_error_inside_an_awaited_write_rolls_back_and_is_a_store_error(
    postgres_url: str,
) -> None:
    """A statement the server refuses mid-transaction raises StoreError from the await; nothing is written."""
    import psycopg

    async def main() -> None:
        async with open_async_memory(postgres_url, "s") as memory:
            await memory.add_memory_items(steps(2))
            with psycopg.connect(postgres_url, autocommit=True) as con:
                con.execute(
                    "ALTER TABLE kvmemory_items ADD CONSTRAINT no_step_7"
                    " CHECK (step IS DISTINCT FROM '7')"
                )
            with pytest.raises(StoreError, match="PostgreSQL store"):
                await memory.add_memory_items(steps(3, start=5))
            assert memory.content == steps(2)
            assert await memory.async_store.read("s") == steps(2)
            await memory.add_memory_item(MemoryItem(step=8))
            assert await memory.async_store.count("s") == 3

    run(main)


@pytest.mark.postgres
def test_postgres_without_greenlet_names_the_async_extra(
    monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    """open_async_store on PostgreSQL without greenlet raises MissingDependencyError naming kvmemory[async]."""
    monkeypatch.setitem(sys.modules, "greenlet", None)
    monkeypatch.delitem(sys.modules, "agents.memory.stores._async.bridge", raising=False)
    monkeypatch.delattr(sys.modules["agents.memory.stores._async"], "bridge", raising=False)

    async def main() -> None:
        with pytest.raises(MissingDependencyError, match=r"kvmemory\[async\]"):
            await open_async_store(postgres_url)

    run(main)


@pytest.mark.postgres
def test_embedder_of_an_async_postgres_store_runs_off_the_loop(postgres_url: str) -> None:
    """index_embeddings and semantic search call the embedder on a thread, never on the loop's, with the same hits."""
    pytest.importorskip("numpy")
    from agents.memory.stores.testing import CountingEmbedder

    class Where(CountingEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.threads: set[int] = set()

        def __call__(self, texts: Any, /) -> Any:
            self.threads.add(threading.get_ident())
            return super().__call__(texts)

    embedder = Where()

    async def main() -> tuple[int, list[int]]:
        async with open_async_store(postgres_url) as store:
            assert store.runs_on_loop
            await store.append("s", steps(4))
            assert await store.index_embeddings("s", embedder) == 4
            hits = await store.search("s", "click 2", 1, mode="semantic", embedder=embedder)
            async with open_async_memory(store, "s") as memory:
                await memory.search("click 3", k=1, mode="semantic", embedder=embedder)
        return threading.get_ident(), [hit.item["step"] for hit in hits]

    loop_thread, found = run(main)
    assert embedder.threads
    assert loop_thread not in embedder.threads
    with open_store(postgres_url) as sync:
        assert [
            h.item["step"]
            for h in sync.search("s", "click 2", 1, mode="semantic", embedder=embedder)
        ] == found


def test_concurrent_append_steps_give_each_step_once(store_url: str) -> None:
    """Thirty tasks numbering steps of one session at once through one async store get 1..30, each once."""

    async def main() -> list[int]:
        async with open_async_store(store_url) as store:
            written = await asyncio.gather(
                *(store.append_steps("s", [MemoryItem(task=n)]) for n in range(30))
            )
            assert [r.item["step"] for r in await store.records("s")] == list(range(1, 31))
            return [records[0].item["step"] for records in written]

    assert sorted(asyncio.run(main())) == list(range(1, 31))


# -- What docs/stores.md promises: cancelled calls, closing, misuse, one behaviour --------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_ten_cancelled_calls_are_all_written_before_the_block_closes(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Ten adds whose awaits are cancelled all run to their end before ``async with`` closes the store."""
    url = durable_url(kind)

    async def main() -> None:
        async with open_async_memory(url, "s") as memory:
            tasks = [
                asyncio.ensure_future(memory.add_memory_item(MemoryItem(step=i))) for i in range(10)
            ]
            await asyncio.sleep(0)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    run(main)
    with open_memory(url, "s") as again:
        assert [item["step"] for item in again] == list(range(10))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_hundred_cancellations_at_random_points_leave_ram_and_store_agreeing(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """Adds and deletes cancelled after a random number of loop steps all run, in order: RAM, the store and a reopen end as a plain list does."""
    url = durable_url(kind)
    chance = random.Random(31)
    model: list[MemoryItem] = []

    async def main() -> list[MemoryItem]:
        async with open_async_memory(url, "s") as memory:
            for n in range(200):
                if n % 5 == 4 and model:
                    call = memory.delete_memory_item(model[0]["step"])
                    del model[0]
                else:
                    batch = steps(chance.randint(1, 4), start=10 * n)
                    call = memory.add_memory_items(batch)
                    model.extend(batch)
                task = asyncio.ensure_future(call)
                # One step at least: a task cancelled before its first step never made its call.
                for _ in range(chance.randint(1, 6)):
                    await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return memory.content

    assert run(main) == model
    with open_memory(url, "s") as again:
        assert again.content == model


def test_the_opener_used_without_async_with_says_async_with(tmp_path: Path) -> None:
    """A call on the opener itself, or a plain ``with``, raises an error that says to use ``async with``."""
    opener = open_async_memory(tmp_path / "m.db", "s")
    with pytest.raises(AttributeError, match=r"async with open_async_memory\(url, session_id\)"):
        opener.add_memory_item(MemoryItem(step=1))  # type: ignore[attr-defined]  # the misuse under test
    with pytest.raises(TypeError, match="async with"), opener:  # type: ignore[attr-defined]
        pass
    assert not hasattr(opener, "no_such_thing")  # an unknown name stays a plain miss
    assert not (tmp_path / "m.db").exists()


def test_an_opened_store_in_a_plain_with_says_async_with(tmp_path: Path) -> None:
    """``with`` on an opened async store raises an error that says to use ``async with``."""

    async def main() -> None:
        store = await open_async_store(tmp_path / "w.db")
        with pytest.raises(TypeError, match="async with"), store:  # type: ignore[attr-defined]
            pass
        await store.aclose()

    run(main)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_memory_used_from_a_second_loop_says_so_and_still_closes(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """A call from a second event loop raises a StoreError naming the loops, while the first is open or closed; aclose closes from either."""
    url = durable_url(kind)
    first = asyncio.new_event_loop()

    async def opened() -> AsyncStoredMemory:
        return await open_async_memory(url, "s")

    memory = first.run_until_complete(opened())
    first.run_until_complete(memory.add_memory_item(MemoryItem(step=1)))

    async def from_another_loop() -> None:
        with pytest.raises(StoreError, match=r"another event loop \(now still open\)"):
            await memory.add_memory_item(MemoryItem(step=2))

    asyncio.run(from_another_loop())
    first.close()

    async def after_the_first_closed() -> None:
        with pytest.raises(StoreError, match=r"now closed.*open_async_memory"):
            await memory.refresh()
        await memory.aclose()

    asyncio.run(after_the_first_closed())
    assert memory.async_store.store.closed
    with open_memory(url, "s") as again:
        assert [item["step"] for item in again] == [1]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_closed_async_store_names_open_async_store(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """A call after ``aclose`` raises a StoreError that says to reopen with open_async_store, not open_store."""
    url = durable_url(kind)

    async def main() -> None:
        store = await open_async_store(url)
        await store.aclose()
        with pytest.raises(
            StoreError, match=r"closed; open it again with `async with open_async_store"
        ):
            await store.count("s")

    run(main)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_setting_a_field_of_a_held_item_writes_through_on_every_engine(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """A plain field set on an item of the view, or its metadata assigned, is written on SQLite and PostgreSQL alike."""
    url = durable_url(kind)

    async def main() -> None:
        async with open_async_memory(url, "s") as memory:
            await memory.add_memory_items(steps(2))
            memory.content[0].set_value("done", True)
            memory.view.content[1]["note"] = "kept"
            memory.view.metadata = {"task": "save"}
            assert memory.metadata == {"task": "save"}

    run(main)
    with open_memory(url, "s") as again:
        assert again.content[0]["done"] is True
        assert again.content[1]["note"] == "kept"
        assert again.metadata == {"task": "save"}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_fields_and_metadata_set_by_awaitable_calls_reach_the_store(
    kind: str, durable_url: Callable[[str], str]
) -> None:
    """``await memory.set_value``, ``set_metadata`` and ``run(lambda: ...)`` write without blocking; a foreign item is refused."""
    url = durable_url(kind)

    async def main() -> None:
        async with open_async_memory(url, "s") as memory:
            await memory.add_memory_items(steps(2))
            await memory.set_value(memory.content[0], "done", True)
            await memory.set_metadata({"task": "save"})
            await memory.run(lambda: memory.view.content[1].set_value("note", "kept"))
            assert memory.metadata == {"task": "save"}
            with pytest.raises(ItemNotFoundError, match="not an item of"):
                await memory.set_value(MemoryItem(step=9), "done", True)

    run(main)
    with open_memory(url, "s") as again:
        assert again.content[0]["done"] is True
        assert again.content[1]["note"] == "kept"
        assert again.metadata == {"task": "save"}
        assert len(again) == 2


@pytest.mark.postgres
def test_a_sync_field_set_while_a_postgres_call_waits_its_turn_does_not_deadlock(
    postgres_url: str,
) -> None:
    """A plain field set on the view while an awaited add is queued completes, and both writes land."""

    async def main() -> None:
        async with open_async_memory(postgres_url, "s") as memory:
            await memory.add_memory_items(steps(1))
            queued = asyncio.ensure_future(memory.add_memory_items(steps(50, start=1)))
            await asyncio.sleep(0)
            memory.content[0].set_value("done", True)
            await queued

    run(main)
    with open_memory(postgres_url, "s") as again:
        assert len(again) == 51
        assert again.content[0]["done"] is True
