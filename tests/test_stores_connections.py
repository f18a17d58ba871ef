"""PostgreSQL connections: kills and restarts are lost connections, never damage; the pool heals; its size from the URL."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from agents.memory import MemoryItem
from agents.memory.exceptions import (
    InvalidStoreURLError,
    StoreArgumentError,
    StoreConnectionLostError,
    StoreUnreachableError,
)
from agents.memory.stores import PostgresStore, Store, open_async_store, open_store

if TYPE_CHECKING:
    from conftest import ThrowawayServer  # the own_postgres fixture's server

pytestmark = pytest.mark.postgres


def named(url: str, name: str) -> str:
    """Return ``url`` with libpq's ``application_name``, which tells the store's connections apart."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}application_name={name}"


def kill(server: str, name: str) -> int:
    """Terminate every connection named ``name`` until none is left; return how many were terminated."""
    killed = 0
    with psycopg.connect(server, autocommit=True) as con:
        for _ in range(1000):
            row = con.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (name,),
            ).fetchone()
            killed += int(row[0]) if row else 0
            if not row or not row[0]:
                return killed
            time.sleep(0.01)  # let the terminated ones exit; the pool may be opening another
    raise AssertionError(f"connections named {name!r} kept coming back")


@pytest.fixture
def name() -> str:
    """Return an application name of the test's own."""
    return f"kv_{uuid.uuid4().hex[:12]}"


class Killer:
    """A thread that kills the connections named ``name`` at random moments until stopped.

    Each kill waits until its backend has exited (``pg_terminate_backend``'s
    timeout), so that once the killer stops no kill is still on its way: a
    backend that ends a moment after its statement returned would otherwise
    die under the next call, after the killer had stopped.
    """

    def __init__(self, server: str, name: str, seed: int) -> None:
        self.kills = 0
        self._stop = threading.Event()
        self._random = random.Random(seed)
        self._thread = threading.Thread(target=self._run, args=(server, name), daemon=True)

    def _run(self, server: str, name: str) -> None:
        with psycopg.connect(server, autocommit=True) as con:
            while not self._stop.wait(self._random.uniform(0.0, 0.004)):
                row = con.execute(
                    "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                    " WHERE application_name = %s AND state = 'active'",
                    (name,),
                ).fetchone()
                self.kills += int(row[0]) if row else 0

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


class Outcomes:
    """What each write of a run did: returned, lost retryably (not applied), or lost unconfirmed."""

    def __init__(self) -> None:
        self.done: set[int] = set()
        self.not_applied: set[int] = set()
        self.unknown: set[int] = set()
        self.messages: list[str] = []

    def record(self, step: int, write: Callable[[], object]) -> None:
        """Run one write of ``step`` and file its outcome (any other error fails the test)."""
        try:
            write()
        except StoreConnectionLostError as exc:
            (self.not_applied if exc.retryable else self.unknown).add(step)
            self.messages.append(str(exc))
        else:
            self.done.add(step)

    def check(self, store: Store, sid: str) -> None:
        """Assert the session holds every returned write, no retryable one, and each write whole or not at all."""
        assert [m for m in self.messages if "rebuild_keyword_index" in m or "lost" not in m] == []
        stored = [item.get_value("step") for item in store.read(sid)]
        assert len(stored) == len(set(stored))
        present = set(stored)
        assert self.done <= present
        assert not (self.not_applied & present)
        assert present <= self.done | self.unknown
        assert store.count(sid) == len(present)
        for step in sorted(present)[:: max(len(present) // 20, 1)]:
            hits = store.search(sid, f"word{step}", k=3)
            assert [hit.item.get_value("step") for hit in hits] == [step]


def write_many(
    store: Store, sid: str, outcomes: Outcomes, n: int, *, first: int, seed: int
) -> None:
    """Make ``n`` writes of random kinds (appends, batches, updates, deletes, metadata)."""
    chance = random.Random(seed)
    for step in range(n):
        item = MemoryItem(step=step, note=f"word{step} common text")
        kind = chance.random()
        if kind < 0.6:
            outcomes.record(step, lambda item=item: store.append(sid, [item]))
        elif kind < 0.8:
            # The label after the append: its loss leaves the append done.
            outcomes.record(step, lambda item=item: store.append(sid, [item]))
            with contextlib.suppress(StoreConnectionLostError):
                store.set_metadata(sid, {"last": step})
        else:
            # A write with an update: the transaction path with the update trigger.
            def update(item: MemoryItem = item) -> None:
                with store.batch(sid) as b:
                    b.append([item])
                    b.update({first: MemoryItem(step=-1, note="first word")})

            outcomes.record(step, update)


def steps_of(store: Store, sid: str) -> list[Any]:
    return [item.get_value("step") for item in store.read(sid)]


def test_connection_lost_error_is_unreachable_and_pickles_with_retryable() -> None:
    """The new error is a StoreUnreachableError and ConnectionError, and keeps ``retryable`` through pickling."""
    error = StoreConnectionLostError("lost", retryable=False)
    assert isinstance(error, StoreUnreachableError)
    assert isinstance(error, ConnectionError)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.retryable) == (StoreConnectionLostError, "lost", False)


def test_kills_during_writes_are_lost_connections_never_damage(
    postgres_server: str, postgres_url: str, name: str
) -> None:
    """Connections killed at random points of writes raise StoreConnectionLostError; each write is whole or absent."""
    outcomes = Outcomes()
    with open_store(named(postgres_url, name)) as store:
        [first] = store.append("s", [MemoryItem(step=-1, note="first")])
        with Killer(postgres_server, name, seed=7) as killer:
            write_many(store, "s", outcomes, 400, first=first, seed=7)
        assert killer.kills > 0
        assert outcomes.not_applied or outcomes.unknown  # some kills landed in writes
        outcomes.done.add(-1)
        outcomes.check(store, "s")
        store.append("s", [MemoryItem(step=1000, note="word1000 after")])
        assert steps_of(store, "s")[-1] == 1000


@contextlib.contextmanager
def stalled_trigger(url: str, function: str) -> Iterator[None]:
    """Make kvmemory's count trigger ``function`` sleep (its name then in the killed statement's context), restored after."""
    with psycopg.connect(url, autocommit=True) as con:
        row = con.execute("SELECT pg_get_functiondef(%s::regproc)", (function,)).fetchone()
        assert row is not None
        con.execute(
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$"
        )
        try:
            yield
        finally:
            con.execute(row[0])


def kill_when_stalled(server: str, name: str) -> None:
    """Wait until a connection named ``name`` sleeps in the stalled trigger, then terminate it."""
    with psycopg.connect(server, autocommit=True) as con:
        for _ in range(6000):
            row = con.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND wait_event = 'PgSleep'",
                (name,),
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError("no write reached the stalled trigger")


@pytest.mark.parametrize(
    ("function", "write", "retryable"),
    [
        ("kvmemory_count_inserted", "append", False),
        ("kvmemory_count_inserted", "batch", True),
        ("kvmemory_count_updated", "update", True),
    ],
)
def test_a_kill_inside_the_keyword_index_triggers_is_a_lost_connection(
    postgres_server: str, postgres_url: str, name: str, function: str, write: str, retryable: bool
) -> None:
    """A write killed in the keyword index's count trigger raises StoreConnectionLostError, not CorruptStoreError."""
    url = named(postgres_url, name)
    with open_store(url) as store:
        [first] = store.append("s", [MemoryItem(step=0, note="zero")])

        def update() -> None:
            with store.batch("s") as batch:
                batch.update({first: MemoryItem(step=0, note="changed")})

        calls: dict[str, Callable[[], object]] = {
            "append": lambda: store.append("s", [MemoryItem(step=1, note="one")]),
            "batch": lambda: store.append_steps("s", [MemoryItem(note="one")]),
            "update": update,
        }
        killer = threading.Thread(target=kill_when_stalled, args=(postgres_server, name))
        with stalled_trigger(postgres_url, function):
            killer.start()
            with pytest.raises(
                StoreConnectionLostError, match="connection to the server was lost"
            ) as info:
                calls[write]()
            killer.join()
        assert info.value.retryable is retryable
        assert "rebuild_keyword_index" not in str(info.value)
        assert [(i.get_value("step"), i.get_value("note")) for i in store.read("s")] == [
            (0, "zero")
        ]
        store.append("s", [MemoryItem(step=2, note="two")])
        assert [hit.item.get_value("step") for hit in store.search("s", "two")] == [2]


def test_the_calls_after_a_kill_succeed(postgres_server: str, postgres_url: str, name: str) -> None:
    """After every pooled connection is killed, each next call succeeds without a retry by the caller."""
    url = named(postgres_url, name) + "&pool_min=4&pool_max=4"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=0, note="zero")])
        for round_ in range(3):
            assert kill(postgres_server, name) >= 1
            for n in range(6):
                step = round_ * 10 + n + 1
                store.append("s", [MemoryItem(step=step, note=f"word{step}")])
            assert kill(postgres_server, name) >= 1
            assert store.count("s") == 1 + 6 * (round_ + 1)
            assert kill(postgres_server, name) >= 1
            assert [hit.item.get_value("step") for hit in store.search("s", "zero")] == [0]
            assert kill(postgres_server, name) >= 1
            store.set_metadata("s", {"round": round_})
        assert store.session_info("s").metadata == {"round": 2}


def test_writes_recover_after_a_server_restart(own_postgres: ThrowawayServer) -> None:
    """A server restarted between calls: the next calls succeed on new connections."""
    with open_store(own_postgres.url + "?pool_min=2&pool_max=3") as store:
        store.append("s", [MemoryItem(step=0, note="zero")])
        for step in range(1, 4):
            own_postgres.stop("fast")
            own_postgres.start()
            store.append("s", [MemoryItem(step=step, note=f"word{step}")])
            assert steps_of(store, "s") == list(range(step + 1))


def test_a_restart_during_writes_loses_nothing_returned_and_writes_recover(
    own_postgres: ThrowawayServer,
) -> None:
    """Writes racing a restart either return (and are kept) or raise StoreUnreachableError; later writes succeed."""
    outcomes = Outcomes()
    url = own_postgres.url + "?pool_max=2&pool_timeout=2&connect_timeout=2"
    with open_store(url) as store:

        def restart() -> None:
            time.sleep(0.05)
            own_postgres.stop("fast")
            own_postgres.start()

        restarter = threading.Thread(target=restart)
        restarter.start()
        step = 0
        while restarter.is_alive() or step < 50:
            try:
                outcomes.record(
                    step, lambda s=step: store.append("s", [MemoryItem(step=s, note=f"word{s}")])
                )
            except StoreUnreachableError:  # the server was down: nothing written
                outcomes.not_applied.add(step)
            step += 1
        restarter.join()
        outcomes.check(store, "s")
        store.append("s", [MemoryItem(step=step, note="after")])
        assert steps_of(store, "s")[-1] == step


def test_a_call_while_the_server_is_down_raises_unreachable_after_the_pool_timeout(
    own_postgres: ThrowawayServer,
) -> None:
    """With the server stopped, a call waits pool_timeout and raises StoreUnreachableError naming it; nothing is written."""
    with PostgresStore(own_postgres.url, min_size=1, max_size=2, timeout=1) as store:
        store.append("s", [MemoryItem(step=0)])
        own_postgres.stop("fast")
        with pytest.raises(
            StoreUnreachableError, match=r"no connection within 1 s.*pool_max"
        ) as info:
            store.append("s", [MemoryItem(step=1)])
        assert not isinstance(info.value, StoreConnectionLostError)
    own_postgres.start()
    with open_store(own_postgres.url) as store:
        assert steps_of(store, "s") == [0]


def test_pool_size_and_timeout_come_from_the_url(postgres_url: str) -> None:
    """``?pool_min=&pool_max=&pool_timeout=`` size the pool and bound its wait."""
    with open_store(postgres_url + "&pool_min=2&pool_max=7&pool_timeout=3.5") as store:
        pool = store.backend.pool
        assert (pool.min_size, pool.max_size, pool.timeout) == (2, 7, 3.5)
        store.append("s", [MemoryItem(step=1)])
    with open_store(postgres_url + "&pool_min=0&pool_max=1") as store:
        assert (store.backend.pool.min_size, store.backend.pool.max_size) == (0, 1)
        assert steps_of(store, "s") == [1]


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("pool_min=-1", r"pool_min='-1'.*whole number >= 0"),
        ("pool_max=0", r"pool_max='0'.*whole number >= 1"),
        ("pool_max=many", r"pool_max='many'.*whole number"),
        ("pool_min=5&pool_max=2", r"pool_max=2.*below pool_min=5"),
        ("pool_timeout=0", r"pool_timeout='0'.*seconds > 0"),
        ("pool_timeout=inf", r"pool_timeout='inf'.*finite"),
        ("pool_max=2&pool_max=3", r"pool_max is given twice"),
        ("connect_timeout=soon", r"connect_timeout='soon'.*whole number of seconds"),
    ],
)
def test_bad_pool_options_in_the_url_are_refused(postgres_url: str, query: str, match: str) -> None:
    """A bad pool option names itself, the URL and what it must be, before connecting."""
    with pytest.raises(InvalidStoreURLError, match=match):
        open_store(f"{postgres_url}&{query}")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"min_size": -1}, r"min_size \(\?pool_min=\) must be an integer >= 0, got -1"),
        ({"max_size": 0}, r"max_size \(\?pool_max=\) must be an integer >= 1, got 0"),
        ({"min_size": 3, "max_size": 2}, r"max_size \(\?pool_max=\) is 2, below its min_size"),
        ({"timeout": float("nan")}, r"timeout \(\?pool_timeout=\) must be a finite number"),
        ({"max_size": 2.0}, r"max_size .* must be an integer >= 1, got 2\.0"),
    ],
)
def test_bad_pool_arguments_are_refused(
    postgres_url: str, options: dict[str, Any], match: str
) -> None:
    """PostgresStore refuses bad pool sizes and timeouts with StoreArgumentError, before connecting."""
    with pytest.raises(StoreArgumentError, match=match):
        PostgresStore(postgres_url, **options)


# -- the asyncio store ---------------------------------------------------------------


async def record_async(outcomes: Outcomes, step: int, write: Awaitable[object]) -> None:
    """Await one write of ``step`` and file its outcome (any other error fails the test)."""
    try:
        await write
    except StoreConnectionLostError as exc:
        (outcomes.not_applied if exc.retryable else outcomes.unknown).add(step)
        outcomes.messages.append(str(exc))
    else:
        outcomes.done.add(step)


def test_async_kills_during_writes_are_lost_connections_never_damage(
    postgres_server: str, postgres_url: str, name: str
) -> None:
    """On the asyncio store too, killed connections raise StoreConnectionLostError and writes stay whole."""
    outcomes = Outcomes()

    async def main() -> None:
        async with open_async_store(named(postgres_url, name)) as store:
            with Killer(postgres_server, name, seed=11) as killer:
                for step in range(300):
                    item = MemoryItem(step=step, note=f"word{step} common text")
                    if step % 3:
                        await record_async(outcomes, step, store.append("s", [item]))
                    else:

                        async def batch(item: MemoryItem = item) -> None:
                            async with store.batch("s") as b:
                                b.append([item])
                                b.keep_last(10_000)  # the transaction path

                        await record_async(outcomes, step, batch())
            assert killer.kills > 0
            assert outcomes.not_applied or outcomes.unknown
            await store.append("s", [MemoryItem(step=1000, note="word1000 after")])

    asyncio.run(main())
    outcomes.done.add(1000)
    with open_store(postgres_url) as store:
        outcomes.check(store, "s")


def test_async_calls_after_a_kill_succeed(
    postgres_server: str, postgres_url: str, name: str
) -> None:
    """After every pooled connection of an asyncio store is killed, each next call succeeds."""

    async def main() -> None:
        url = named(postgres_url, name) + "&pool_min=3&pool_max=3"
        async with open_async_store(url) as store:
            await store.append("s", [MemoryItem(step=0, note="zero")])
            for step in range(1, 5):
                assert kill(postgres_server, name) >= 1
                await store.append("s", [MemoryItem(step=step, note=f"word{step}")])
                assert kill(postgres_server, name) >= 1
                assert await store.count("s") == step + 1
                assert kill(postgres_server, name) >= 1
                hits = await store.search("s", f"word{step}")
                assert [hit.item.get_value("step") for hit in hits] == [step]

    asyncio.run(main())


def test_async_writes_recover_after_a_server_restart(own_postgres: ThrowawayServer) -> None:
    """An asyncio store's calls after a server restart succeed on new connections."""

    async def main() -> None:
        async with open_async_store(own_postgres.url + "?pool_min=2&pool_max=2") as store:
            await store.append("s", [MemoryItem(step=0, note="zero")])
            for step in range(1, 3):
                own_postgres.stop("fast")
                own_postgres.start()
                await store.append("s", [MemoryItem(step=step, note=f"word{step}")])
                items = await store.read("s")
                assert [item.get_value("step") for item in items] == list(range(step + 1))

    asyncio.run(main())


def test_async_pool_size_and_timeout_come_from_the_url(postgres_url: str) -> None:
    """``?pool_min=&pool_max=&pool_timeout=`` size an asyncio store's pool too."""

    async def main() -> None:
        async with open_async_store(
            postgres_url + "&pool_min=2&pool_max=5&pool_timeout=4"
        ) as store:
            pool = store.store.backend.pool
            assert (pool.min_size, pool.max_size, pool.timeout) == (2, 5, 4.0)
            await store.append("s", [MemoryItem(step=1)])

    asyncio.run(main())


def test_async_bad_pool_option_is_refused(postgres_url: str) -> None:
    """An asyncio store refuses a bad pool option as the sync one does."""

    async def main() -> None:
        with pytest.raises(InvalidStoreURLError, match=r"pool_max=1.*below pool_min=2"):
            await open_async_store(postgres_url + "&pool_min=2&pool_max=1")

    asyncio.run(main())


@pytest.mark.parametrize(("write", "retryable"), [("append", False), ("batch", True)])
def test_async_a_kill_inside_the_keyword_index_trigger_is_a_lost_connection(
    postgres_server: str, postgres_url: str, name: str, write: str, retryable: bool
) -> None:
    """On the asyncio store, a write killed in the count trigger raises StoreConnectionLostError, not damage."""

    async def main() -> None:
        async with open_async_store(named(postgres_url, name)) as store:
            await store.append("s", [MemoryItem(step=0, note="zero")])
            killer = threading.Thread(target=kill_when_stalled, args=(postgres_server, name))
            call = (
                store.append("s", [MemoryItem(step=1, note="one")])
                if write == "append"
                else store.append_steps("s", [MemoryItem(note="one")])
            )
            with stalled_trigger(postgres_url, "kvmemory_count_inserted"):
                killer.start()
                with pytest.raises(
                    StoreConnectionLostError, match="connection to the server was lost"
                ) as info:
                    await call
                killer.join()
            assert info.value.retryable is retryable
            assert "rebuild_keyword_index" not in str(info.value)
            assert [i.get_value("step") for i in await store.read("s")] == [0]
            await store.append("s", [MemoryItem(step=2, note="two")])
            hits = await store.search("s", "two")
            assert [hit.item.get_value("step") for hit in hits] == [2]

    asyncio.run(main())
