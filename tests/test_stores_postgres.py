"""The PostgreSQL store: migrations, exact projections, read-only opens, unreachable hosts."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import (
    CorruptStoreError,
    InvalidStoreURLError,
    SchemaVersionError,
    StoreError,
    StoreUnreachableError,
)
from agents.memory.search import EmbedParts, HashingEmbedder
from agents.memory.stores import PostgresStore, open_store
from agents.memory.stores.testing import assert_ranks_as_memory, ranking_corpus

psycopg = pytest.importorskip("psycopg")

from agents.memory.stores._postgres import schema as _pg_schema  # noqa: E402  # after the skip: the postgres extra

# The layout kvmemory wrote as schema version 1, statement for statement.
V1_DDL = (
    "CREATE TABLE IF NOT EXISTS kvmemory_schema (version integer NOT NULL)",
    """CREATE TABLE IF NOT EXISTS kvmemory_sessions (
        session_id text PRIMARY KEY,
        step_key text NOT NULL,
        next_seq bigint NOT NULL DEFAULT 0,
        created double precision NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kvmemory_items (
        session_id text NOT NULL REFERENCES kvmemory_sessions ON DELETE CASCADE,
        seq bigint NOT NULL,
        step text,
        created double precision NOT NULL,
        data bytea NOT NULL,
        doc jsonb,
        PRIMARY KEY (session_id, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_step ON kvmemory_items (session_id, step)",
    "CREATE INDEX IF NOT EXISTS kvmemory_items_created ON kvmemory_items (session_id, created)",
)


def write_v1_store(url: str) -> None:
    """Write a schema-v1 store by hand: two sessions, three items."""
    with psycopg.connect(url, autocommit=True) as con:
        for statement in V1_DDL:
            con.execute(statement)
        con.execute("INSERT INTO kvmemory_schema VALUES (1)")
        con.execute(
            "INSERT INTO kvmemory_sessions VALUES ('a', 'step', 3, 1700000000.0), ('b', 'Step', 1, 1700000001.0)"
        )
        rows = [
            ("a", 1, "1", 1700000000.5, b'{"step":1,"action":"open"}'),
            ("a", 2, "2", 1700000000.6, b'{"step":2,"action":"type"}'),
            ("b", 1, "7", 1700000001.5, b'{"Step":7}'),
        ]
        for sid, seq, step, created, data in rows:
            con.execute(
                "INSERT INTO kvmemory_items VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                (sid, seq, step, created, data, data.decode()),
            )


def tables(url: str) -> set[str]:
    """Return the names of the tables in the URL's schema."""
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.postgres
def test_v1_store_is_migrated_to_v2_without_loss(postgres_url: str) -> None:
    """v1 tables opened writable get schema v2; every session, item and seq is kept, none reused."""
    write_v1_store(postgres_url)
    with open_store(postgres_url) as store:
        assert store.sessions() == ["a", "b"]
        assert [(r.seq, r.item.to_dict()) for r in store.records("a")] == [
            (1, {"step": 1, "action": "open"}),
            (2, {"step": 2, "action": "type"}),
        ]
        info = store.session_info("b")
        assert info is not None
        assert (info.step_key, info.metadata) == ("Step", {})
        store.set_metadata("a", {"agent": "planner"})
        assert store.append("a", [MemoryItem(step=4)]) == [4]
        store.delete_session("b")
        assert store.append("b", [MemoryItem(Step=8)], step_key="Step") == [2]
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]


@pytest.mark.postgres
def test_v1_store_opened_read_only_is_refused_and_unchanged(postgres_url: str) -> None:
    """Read-only never migrates: v1 tables are refused with a clear error and keep their layout."""
    write_v1_store(postgres_url)
    with pytest.raises(
        SchemaVersionError,
        match=f"read-only it cannot be migrated to {PostgresStore.schema_version}",
    ):
        open_store(postgres_url, read_only=True)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(1,)]


@pytest.mark.postgres
def test_read_only_open_of_an_empty_database_creates_no_tables(postgres_url: str) -> None:
    """A database without kvmemory tables reads as an empty store and gets no tables."""
    with open_store(postgres_url, read_only=True) as store:
        assert store.sessions() == []
        assert store.read("s") == []
        assert store.session_info("s") is None
    assert tables(postgres_url) == set()


@pytest.mark.postgres
def test_read_only_handle_runs_read_only_transactions(postgres_url: str) -> None:
    """A read-only handle's connections refuse writes on the server too."""
    with open_store(postgres_url) as store:
        store.append("s", [MemoryItem(step=1)])
    with open_store(postgres_url, read_only=True) as reader:
        with pytest.raises(StoreError, match="open read-only"):
            reader.append("s", [MemoryItem(step=2)])
        with reader.backend.pool.connection() as con:  # the server's own setting is the point
            assert con.execute("SHOW default_transaction_read_only").fetchone() == ("on",)


@pytest.mark.postgres
def test_pooled_connections_run_without_jit(postgres_url: str) -> None:
    """A store's pooled connections have JIT compilation off (it cost a 100,000-row ranking 1 s)."""
    with open_store(postgres_url) as store:
        store.append("s", [MemoryItem(step=1)])
        with store.backend.pool.connection() as con:  # the session's own setting is the point
            assert con.execute("SHOW jit").fetchone() == ("off",)


@pytest.mark.postgres
def test_indexed_read_runs_without_sequential_scans(postgres_url: str) -> None:
    """A read with indexed=True (the keyword ranking's) plans with enable_seqscan off, for it alone."""
    with open_store(postgres_url) as store:
        assert store.backend.query_rows("SHOW enable_seqscan", indexed=True) == [("off",)]
        assert store.backend.query_rows("SHOW enable_seqscan") == [("on",)]


@pytest.mark.postgres
def test_project_of_a_large_row_keeps_float_text(postgres_url: str) -> None:
    """project() of a row cut on the server keeps 1e16 a float and -0.0 negative, as read() does."""
    with open_store(postgres_url) as store:
        item = MemoryItem(step=1, big=1e16, negzero=-0.0, tiny=5e-324, pad="p" * 5000)
        store.append("s", [item])
        (projected,) = store.project("s", ["big", "negzero", "tiny"])
    assert type(projected["big"]) is float
    assert projected["big"] == 1e16
    assert str(projected["negzero"]) == "-0.0"
    assert projected["tiny"] == 5e-324


@pytest.mark.postgres
def test_project_of_a_large_typed_row_keeps_float_text(postgres_url: str) -> None:
    """A wrapped (typed) item cut on the server keeps exact floats too."""
    from agents.memory.stores.testing import Step

    with open_store(postgres_url) as store:
        store.append("s", [Step(step=1, cost=-0.0, big=1e16, pad="p" * 5000)])
        assert [str(v) for v in store.project("s", ["cost", "big"])[0].values()] == [
            "-0.0",
            "1e+16",
        ]


def test_unresolvable_host_fails_at_once_with_the_resolver_error() -> None:
    """A host name that does not resolve raises StoreUnreachableError with the resolver's reason."""
    with pytest.raises(
        StoreUnreachableError, match=r"no-such-host\.invalid.*(resolve|known)"
    ) as info:
        open_store("postgresql://me:secret@no-such-host.invalid/db")
    assert "secret" not in str(info.value)
    assert "pool" not in str(info.value).lower()


@pytest.mark.postgres
def test_large_rows_keep_a_jsonb_copy_unless_it_would_change_a_float(postgres_url: str) -> None:
    """A large row gets a JSONB copy for cutting on the server, except one holding 1e16 or -0.0."""
    with open_store(postgres_url) as store:
        plain, exact = store.append(
            "s",
            [MemoryItem(step=1, f=0.5, pad="p" * 5000), MemoryItem(step=2, f=-0.0, pad="p" * 5000)],
        )
    with psycopg.connect(postgres_url, autocommit=True) as con:
        rows = con.execute("SELECT seq, doc IS NULL FROM kvmemory_items ORDER BY seq").fetchall()
    assert rows == [(plain, False), (exact, True)]


@pytest.mark.postgres
def test_migration_drops_jsonb_copies_that_changed_a_float(postgres_url: str) -> None:
    """Moving to v2 clears the v1 JSONB copy of a large row holding 1e16, so project() is exact."""
    write_v1_store(postgres_url)
    data = b'{"step":3,"big":1e16,"pad":"' + b"p" * 5000 + b'"}'
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(
            "INSERT INTO kvmemory_items VALUES ('a', 3, '3', 1700000000.7, %s, %s::jsonb)",
            (data, data.decode()),
        )
    with open_store(postgres_url) as store:
        assert store.project("a", ["big"], steps=[3]) == [{"big": 1e16}]
        assert type(store.project("a", ["big"], steps=[3])[0]["big"]) is float


@pytest.mark.postgres
def test_v2_store_is_migrated_and_gets_vectors(postgres_url: str) -> None:
    """v2 tables opened writable gain the vector tables, keep their items, and embed and search them."""
    write_v1_store(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        # What the v2 migration did, so the tables are v2 as kvmemory left them.
        con.execute(
            "ALTER TABLE kvmemory_sessions ADD COLUMN metadata bytea NOT NULL DEFAULT '\\x7b7d'::bytea"
        )
        con.execute(
            "ALTER TABLE kvmemory_sessions ADD COLUMN deleted boolean NOT NULL DEFAULT false"
        )
        con.execute("UPDATE kvmemory_schema SET version = 2")
    embedder = HashingEmbedder(32)
    with open_store(postgres_url) as store:
        assert store.index_embeddings("a", embedder) == 2
        hits = store.search("a", "open", 1, mode="semantic", embedder=embedder)
        assert [(hit.seq, hit.item["action"]) for hit in hits] == [(1, "open")]
        assert [r.seq for r in store.records("b")] == [1]
    assert {"kvmemory_vectors", "kvmemory_embedders"} <= tables(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]


@pytest.mark.postgres
def test_damaged_vector_row_is_named_by_store_session_and_seq(postgres_url: str) -> None:
    """A vector row of the wrong byte length raises CorruptStoreError naming the store, session and seq."""
    embedder = HashingEmbedder(32)
    with open_store(postgres_url) as store:
        seqs = store.append("s", [MemoryItem(step=1, note="a"), MemoryItem(step=2, note="b")])
        store.index_embeddings("s", embedder)
        url = store.url
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(
            "UPDATE kvmemory_vectors SET vector = '\\x00000000'::bytea WHERE seq = %s", (seqs[1],)
        )
    message = f"item {seqs[1]} of session 's' of {re.escape(url)} holds 4 bytes; expected 128"
    # Where the vectors are read (without pgvector, and read_vectors with it).
    with open_store(postgres_url) as store, pytest.raises(CorruptStoreError, match=message):
        store.read_vectors("s", embedder)
    with (
        PostgresStore(postgres_url, pgvector=False) as store,
        pytest.raises(CorruptStoreError, match=message),
    ):
        store.search("s", "a", mode="semantic", embedder=embedder)


# -- the keyword index (schema version 4) ------------------------------------------------


# Schema version 3 added the tables of stored vectors.
V3_VECTOR_DDL = (
    """CREATE TABLE IF NOT EXISTS kvmemory_embedders (
        session_id text PRIMARY KEY REFERENCES kvmemory_sessions ON DELETE CASCADE,
        model text NOT NULL,
        dimension integer NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kvmemory_vectors (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        fields text NOT NULL,
        vector bytea NOT NULL,
        PRIMARY KEY (session_id, seq, fields),
        FOREIGN KEY (session_id, seq) REFERENCES kvmemory_items ON DELETE CASCADE
    )""",
)


def write_corpus_store(url: str, version: int) -> None:
    """Write tables of schema version 2 or 3 by hand holding the ranking corpus in session 'a' and one item in 'b'."""
    with psycopg.connect(url, autocommit=True) as con:
        for statement in V1_DDL:
            con.execute(statement)
        con.execute(
            "ALTER TABLE kvmemory_sessions ADD COLUMN metadata bytea NOT NULL DEFAULT '\\x7b7d'::bytea"
        )
        con.execute(
            "ALTER TABLE kvmemory_sessions ADD COLUMN deleted boolean NOT NULL DEFAULT false"
        )
        if version == 3:
            for statement in V3_VECTOR_DDL:
                con.execute(statement)
        con.execute("INSERT INTO kvmemory_schema VALUES (%s)", (version,))
        items = ranking_corpus()
        con.execute(
            "INSERT INTO kvmemory_sessions (session_id, step_key, next_seq, created)"
            " VALUES ('a', 'step', %s, 1700000000.0), ('b', 'step', 1, 1700000000.0)",
            (len(items),),
        )
        rows = [("a", seq, item.to_json_bytes()) for seq, item in enumerate(items, 1)]
        rows.append(("b", 1, b'{"step":1,"note":"file"}'))
        for sid, seq, data in rows:
            con.execute(
                "INSERT INTO kvmemory_items VALUES (%s, %s, NULL, 1700000000.5, %s, NULL)",
                (sid, seq, data),
            )


@pytest.mark.postgres
@pytest.mark.parametrize("version", [2, 3])
def test_older_store_is_migrated_and_searched_by_its_new_index(
    postgres_url: str, version: int
) -> None:
    """v2 or v3 tables opened writable get the keyword index over their items and rank as Memory.search."""
    write_corpus_store(postgres_url, version)
    with open_store(postgres_url) as store:
        assert store.keyword_index
        assert_ranks_as_memory(store, "a")
        assert_ranks_as_memory(store, "b")


@pytest.mark.postgres
def test_v3_store_opened_read_only_searches_by_scanning(postgres_url: str) -> None:
    """v3 tables (before the keyword index) opened read-only are not migrated; they search by reading the session, ranking the same."""
    write_corpus_store(postgres_url, 3)
    with open_store(postgres_url, read_only=True) as store:
        assert not store.keyword_index
        assert_ranks_as_memory(store, "a")
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(3,)]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("dropped", "where"),
    [
        ("ALTER TABLE kvmemory_items DROP COLUMN terms", None),
        ("DROP TABLE kvmemory_postings", None),
        ("DROP TABLE kvmemory_postings_stale", {"step": range(10)}),
        ("DROP TABLE kvmemory_postings_folded", None),
    ],
)
def test_a_missing_index_is_named_on_search_and_write_and_can_be_rebuilt(
    postgres_url: str, dropped: str, where: dict[str, Any] | None
) -> None:
    """With the terms column or the posting blocks dropped, searches that read them (every keyword search, filtered or not, reads the blocks; none reads the terms column) and writes raise naming the repair, and write nothing."""
    with open_store(postgres_url) as store:
        store.append("s", ranking_corpus())
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(dropped)
    with open_store(postgres_url) as store:
        if "terms" in dropped:
            assert_ranks_as_memory(store, "s")  # the blocks are whole
        else:
            with pytest.raises(CorruptStoreError, match="rebuild_keyword_index"):
                store.search("s", "file", where=where)
        with pytest.raises(CorruptStoreError, match="rebuild_keyword_index"):
            store.append("s", [MemoryItem(step=99, note="file")])
        assert store.count("s") == len(ranking_corpus())
        store.rebuild_keyword_index()
        store.append("s", [MemoryItem(step=99, note="file")])
        assert_ranks_as_memory(store, "s")


# -- pgvector: semantic ranking in the server ----------------------------------------------


@pytest.fixture
def pgvector_url(postgres_url: str) -> str:
    """The test schema's URL, on a server that offers pgvector (scripts/test builds it; fail under CI, else skip)."""
    with psycopg.connect(postgres_url, autocommit=True) as con:
        offered = con.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    if not offered:
        reason = "the PostgreSQL server does not offer pgvector (scripts/test builds it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return postgres_url


PGVECTOR_TEXTS = [
    "export the quarterly report as pdf",
    "send the pdf to the manager by email",
    "open the spreadsheet of monthly costs",
    "the dialog asks to save changes",
    "",  # no text: no vector, never a hit
    "close the spreadsheet and the dialog",
    "email the costs to finance",
    "export the report",  # the same text twice: tied cosines keep session order
    "export the report",
]
# pgvector computes one cosine per vector row, so it ranks vectors of whole items only;
# the tests of that path ask for them (parts, the default, are scored with numpy).
WHOLE = EmbedParts.WHOLE
PGVECTOR_QUERIES = ["export the report", "email", "spreadsheet costs", "zebra crossing"]


def semantic_hits(store: PostgresStore, **options: object) -> list[tuple[str, str, float]]:
    """Every semantic and hybrid hit of the queries: mode, the item's text and its score.

    Items of the same text are told apart by nothing but rounding (numpy
    and pgvector sum products in different orders), so hits name texts.
    Vectors of whole items unless ``options`` say otherwise.
    """
    options = {"parts": WHOLE, **options}
    out = []
    for mode in ("semantic", "hybrid"):
        for query in PGVECTOR_QUERIES:
            for k in (1, 3, 20):
                for hit in store.search("s", query, k, mode=mode, embedder=PG_EMBEDDER, **options):  # type: ignore[arg-type]
                    out.append((f"{mode} {query} {k}", hit.item["note"], hit.score))
    return out


def assert_same_hits(got: list[tuple[str, str, float]], want: list[tuple[str, str, float]]) -> None:
    """The same hits in the same order, scores equal to float32 rounding."""
    assert [hit[:2] for hit in got] == [hit[:2] for hit in want]
    assert [hit[2] for hit in got] == pytest.approx([hit[2] for hit in want], abs=1e-5)


def unranked_rows(url: str) -> int:
    """Count the stored vectors that have no pgvector copy (scored in Python)."""
    with psycopg.connect(url, autocommit=True) as con:
        row = con.execute(
            "SELECT count(*) FROM kvmemory_vectors WHERE embedding IS NULL AND length(vector) > 0"
        ).fetchone()
    assert row is not None
    return int(row[0])


class RandomEmbedder:
    """Dense seeded random unit vectors per text: cosines far apart (no near-ties from rounding), equal texts tie exactly."""

    name = "random-64"
    dimension = 64

    def __call__(self, texts: Sequence[str]) -> Any:
        rows = [
            np.random.default_rng(list(hashlib.sha256(text.encode()).digest())).standard_normal(64)
            for text in texts
        ]
        matrix = np.array(rows, dtype=np.float32)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


PG_EMBEDDER = RandomEmbedder()


@pytest.mark.postgres
def test_pgvector_ranks_as_numpy_over_the_same_vectors(pgvector_url: str) -> None:
    """With pgvector, semantic and hybrid hits equal the numpy ranking of the same rows, ties in session order."""
    with PostgresStore(pgvector_url) as store, PostgresStore(pgvector_url, pgvector=False) as plain:
        assert store.uses_pgvector
        assert not plain.uses_pgvector
        seqs = store.append("s", [MemoryItem(step=i, note=t) for i, t in enumerate(PGVECTOR_TEXTS)])
        store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        assert_same_hits(semantic_hits(store), semantic_hits(plain))
        assert_same_hits(semantic_hits(store, keys=["note"]), semantic_hits(plain, keys=["note"]))
        tied = [
            hit.seq
            for hit in store.search(
                "s", "export the report", 2, mode="semantic", embedder=PG_EMBEDDER, parts=WHOLE
            )
        ]
        assert tied == seqs[7:9]
        # Changed and deleted items: their vectors go with them, new ones are ranked.
        with store.batch("s") as batch:
            batch.update({seqs[0]: MemoryItem(step=0, note="email the spreadsheet")})
            batch.delete([seqs[1]])
        store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        assert_same_hits(semantic_hits(store), semantic_hits(plain))
    assert unranked_rows(pgvector_url) == 0  # every vector a pgvector handle writes is ranked there


@pytest.mark.postgres
def test_pgvector_arriving_later_fills_stored_vectors_and_ranks_rows_of_older_handles(
    pgvector_url: str,
) -> None:
    """A store embedded without pgvector gets its embedding column filled; rows an older handle writes still rank."""
    with PostgresStore(pgvector_url, pgvector=False) as before:
        seqs = before.append(
            "s", [MemoryItem(step=i, note=t) for i, t in enumerate(PGVECTOR_TEXTS)]
        )
        before.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        with psycopg.connect(pgvector_url, autocommit=True) as con:
            assert con.execute(
                "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
            ).fetchone() == (0,)
        with PostgresStore(pgvector_url) as store:
            assert store.uses_pgvector
            assert unranked_rows(pgvector_url) == 0  # filled from the stored vectors
            assert_same_hits(semantic_hits(store), semantic_hits(before))
            # The older handle does not know the column: its vectors are stored without it.
            before.append("s", [MemoryItem(step=20, note="export the pdf report by email")])
            with before.batch("s") as batch:
                batch.update({seqs[2]: MemoryItem(step=2, note="report costs by email")})
            before.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
            assert unranked_rows(pgvector_url) == 2
            assert_same_hits(semantic_hits(store), semantic_hits(before))
            with PostgresStore(pgvector_url, read_only=True) as reader:
                assert reader.uses_pgvector
                assert_same_hits(semantic_hits(reader), semantic_hits(before))


@pytest.mark.postgres
def test_read_vectors_keeps_a_table_only_while_some_vector_has_no_pgvector_copy(
    pgvector_url: str,
) -> None:
    """Whole-item vectors pgvector ranks are read without keeping a table; once an older handle stores one without a copy (numpy scores them), the table is kept."""
    with PostgresStore(pgvector_url, pgvector=False) as before:
        before.append("s", [MemoryItem(step=i, note=t) for i, t in enumerate(PGVECTOR_TEXTS)])
        before.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        with PostgresStore(pgvector_url) as store:
            assert store.backend.ranks_vectors("s", "*")
            store.read_vectors("s", PG_EMBEDDER, parts=WHOLE)
            assert store._vectors._cache.sizes() == {}
            before.append("s", [MemoryItem(step=20, note="export the pdf report by email")])
            before.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
            assert not store.backend.ranks_vectors("s", "*")
            store.read_vectors("s", PG_EMBEDDER, parts=WHOLE)
            assert list(store._vectors._cache.sizes()) == [("s", "*")]
            assert_same_hits(semantic_hits(store), semantic_hits(before))


@pytest.mark.postgres
def test_read_only_pgvector_handle_embeds_what_has_no_vector_yet(pgvector_url: str) -> None:
    """A read-only handle ranks stored vectors in the server and embeds, for the query only, items without one."""
    with PostgresStore(pgvector_url) as store:
        store.append("s", [MemoryItem(step=i, note=t) for i, t in enumerate(PGVECTOR_TEXTS)])
        store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        store.append("s", [MemoryItem(step=30, note="export the report again")])
        with PostgresStore(pgvector_url, read_only=True) as reader:
            assert reader.uses_pgvector
            got = semantic_hits(reader)
        store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        assert_same_hits(got, semantic_hits(store))


@pytest.mark.postgres
def test_damaged_pgvector_copy_is_named_and_changes_nothing(pgvector_url: str) -> None:
    """A pgvector copy of another dimension than the query raises CorruptStoreError naming the session and the fix."""
    with PostgresStore(pgvector_url) as store:
        assert store.uses_pgvector
        seqs = store.append("s", [MemoryItem(step=1, note="a"), MemoryItem(step=2, note="b")])
        store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        with psycopg.connect(pgvector_url, autocommit=True) as con:
            con.execute(
                "UPDATE kvmemory_vectors SET embedding = '[1,0]' WHERE seq = %s", (seqs[1],)
            )
        before = store.read_vectors("s", PG_EMBEDDER, parts=WHOLE)
        message = r"session 's' of .* the store is damaged .*drop_vectors"
        for mode in ("semantic", "hybrid"):
            with pytest.raises(CorruptStoreError, match=message):
                store.search("s", "a", mode=mode, embedder=PG_EMBEDDER, parts=WHOLE)  # type: ignore[arg-type]
        after = store.read_vectors("s", PG_EMBEDDER, parts=WHOLE)
        assert after.keys() == before.keys()
        assert all((after[seq] == before[seq]).all() for seq in before)


@pytest.mark.postgres
def test_login_that_may_not_create_pgvector_ranks_with_numpy(pgvector_url: str) -> None:
    """A login that may not create the extension opens the store without it and ranks the same with numpy."""
    role = "kvmemory_plain_" + re.sub(r"\W", "", pgvector_url.rsplit("%3D", 1)[-1])
    schema = pgvector_url.rsplit("%3D", 1)[-1]
    with psycopg.connect(pgvector_url, autocommit=True) as con:
        con.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        con.execute(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
    try:
        url = pgvector_url.replace("://kvmemory@", f"://{role}@", 1)
        with PostgresStore(url) as store:
            assert not store.uses_pgvector
            store.append("s", [MemoryItem(step=i, note=t) for i, t in enumerate(PGVECTOR_TEXTS)])
            store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
            got = semantic_hits(store)
        with psycopg.connect(pgvector_url, autocommit=True) as con:
            assert con.execute(
                "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
            ).fetchone() == (0,)
        with PostgresStore(pgvector_url) as owner:  # a superuser: creates it and fills the copies
            assert owner.uses_pgvector
            assert_same_hits(semantic_hits(owner), got)
    finally:
        with psycopg.connect(pgvector_url, autocommit=True) as con:
            con.execute(f"DROP OWNED BY {role} CASCADE")
            con.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_pgvector_url_option(pgvector_url: str) -> None:
    """?pgvector=off in a store URL ranks with numpy and never creates the extension; a bad value is named."""
    with open_store(pgvector_url + "&pgvector=off") as store:
        assert not store.uses_pgvector  # type: ignore[attr-defined]  # a PostgresStore
        store.append("s", [MemoryItem(step=1, note="export the report")])
        store.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
        assert [
            h.seq
            for h in store.search("s", "report", mode="semantic", embedder=PG_EMBEDDER, parts=WHOLE)
        ]
    with psycopg.connect(pgvector_url, autocommit=True) as con:
        assert con.execute(
            "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
        ).fetchone() == (0,)
    with open_store(pgvector_url + "&pgvector=auto") as store:
        assert store.uses_pgvector  # type: ignore[attr-defined]  # a PostgresStore
    for bad in ("&pgvector=on", "&pgvector=off&pgvector=auto"):
        with pytest.raises(InvalidStoreURLError, match="pgvector"):
            open_store(pgvector_url + bad)


@pytest.mark.postgres
def test_damaged_vector_met_when_pgvector_arrives_is_named_on_search(pgvector_url: str) -> None:
    """Filling the pgvector copies skips a damaged vector (no copy); the session's search then names it."""
    with PostgresStore(pgvector_url, pgvector=False) as before:
        seqs = before.append(
            "s", [MemoryItem(step=i, note=t) for i, t in enumerate(PGVECTOR_TEXTS)]
        )
        before.index_embeddings("s", PG_EMBEDDER, parts=WHOLE)
    with psycopg.connect(pgvector_url, autocommit=True) as con:
        con.execute(
            "UPDATE kvmemory_vectors SET vector = '\\x000000'::bytea WHERE seq = %s", (seqs[2],)
        )
    with PostgresStore(pgvector_url) as store:
        assert store.uses_pgvector
        assert unranked_rows(pgvector_url) == 1
        message = f"item {seqs[2]} of session 's' of .* holds 3 bytes"
        with pytest.raises(CorruptStoreError, match=message):
            store.search("s", "report", mode="semantic", embedder=PG_EMBEDDER, parts=WHOLE)


def explained(store: PostgresStore) -> list[str]:
    """Return a list that fills with the plan of every statement the store runs from now on.

    The store must have a pool of one connection: auto_explain, loaded into
    that connection's session, sends each statement's plan to the client as
    a notice, which a handler on the connection collects.
    """
    plans: list[str] = []
    with store.backend.pool.connection() as con:
        assert store.backend.pool.max_size == 1
        con.execute("LOAD 'auto_explain'")
        con.execute("SET auto_explain.log_min_duration = 0")
        con.execute("SET auto_explain.log_level = notice")
        con.add_notice_handler(lambda notice: plans.append(notice.message_primary))
    return plans


@pytest.mark.postgres
def test_step_filters_read_through_the_step_index(postgres_url: str) -> None:
    """The statements the store runs for step-filtered reads (read, project, tail) use the (session_id, step) index."""
    with PostgresStore(postgres_url, min_size=1, max_size=1) as store:
        for start in range(0, 6000, 2000):
            store.append("s", [MemoryItem(step=i, n=i) for i in range(start, start + 2000)])
        store.append("other", [MemoryItem(step=i) for i in range(2000)])
        with store.backend.pool.connection() as con:
            con.execute("ANALYZE kvmemory_items")
        plans = explained(store)
        wanted = list(range(100, 150))
        calls = {
            "read": lambda: [i["n"] for i in store.read("s", steps=wanted)],
            "project": lambda: [i["n"] for i in store.project("s", ["n"], steps=wanted)],
            "tail": lambda: [r.item["n"] for r in store.tail("s", 10, steps=wanted)],
        }
        for name, call in calls.items():
            plans.clear()
            assert call() == (wanted[-10:] if name == "tail" else wanted)
            reads = [plan for plan in plans if "kvmemory_items" in plan]
            assert reads, (name, plans)  # the rows were read by a statement, and explained
            for plan in reads:
                assert "step = ANY" in plan, (name, plan)
                assert "kvmemory_items_step" in plan, (name, plan)
                assert "kvmemory_items_pkey" not in plan, (name, plan)


@pytest.mark.postgres
def test_query_of_thousands_of_distinct_words_ranks_as_memory(postgres_url: str) -> None:
    """A query of 2,500 distinct words searches (no column or parameter limit) and ranks as Memory.search."""
    from agents.memory import Memory

    items = [
        MemoryItem(step=i, note=" ".join(f"w{(i * 13 + j) % 3000}" for j in range(40)))
        for i in range(60)
    ]
    query = " ".join(f"w{j}" for j in range(2500))
    with open_store(postgres_url) as store:
        store.append("s", items)
        got = store.search("s", query, 10)
    want = Memory(items).search(query, 10)
    assert [hit.item.to_dict() for hit in got] == [hit.item.to_dict() for hit in want]
    assert [hit.score for hit in got] == pytest.approx([hit.score for hit in want])


@pytest.mark.postgres
def test_item_of_more_than_a_megabyte_of_distinct_terms_is_stored_and_found(
    postgres_url: str,
) -> None:
    """An item whose distinct terms pass tsvector's 1 MB is stored, found by any of its terms, ranked as in RAM."""
    from agents.memory import Memory

    huge = MemoryItem(step=0, note=" ".join(f"term{j:07d}" for j in range(120_000)))
    items = [huge, MemoryItem(step=1, note="term0119999 and more"), MemoryItem(step=2, note="x")]
    with open_store(postgres_url) as store:
        store.append("s", items)
        ram = Memory(items)
        for query in ("term0000001", "term0119999", "term0119999 more", "x"):
            got = store.search("s", query, 3)
            want = ram.search(query, 3)
            assert [hit.item["step"] for hit in got] == [hit.item["step"] for hit in want]
            assert [hit.score for hit in got] == pytest.approx([hit.score for hit in want])
        assert store.search("s", "absent", 3) == []
        with store.batch("s") as batch:
            batch.update({store.records("s")[0].seq: MemoryItem(step=0, note="small now")})
        assert [hit.item["step"] for hit in store.search("s", "term0119999", 3)] == [1]


def write_v4_store(url: str) -> None:
    """Leave tables of schema version 4 (before record keys) holding two items, one with a "key" field."""
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1, key="lang", note="open the report")])
        store.append("s", [MemoryItem(step=2, note="save the report")])
    with psycopg.connect(url, autocommit=True) as con:
        # What the v5 migration added, taken away again.
        con.execute("DROP INDEX kvmemory_items_key")
        con.execute("ALTER TABLE kvmemory_items DROP COLUMN key")
        con.execute("UPDATE kvmemory_schema SET version = 4")


@pytest.mark.postgres
def test_v4_store_is_migrated_to_record_keys(postgres_url: str) -> None:
    """v4 tables opened writable get the key column and its unique index; their items stay items."""
    write_v4_store(postgres_url)
    with open_store(postgres_url) as store:
        assert store.record_keys("s") == []
        store.put_record("s", "lang", {"value": "fr", "note": "french report"})
        assert store.get_record("s", "lang") == MemoryItem(
            key="lang", value="fr", note="french report"
        )
        assert len(store.search("s", "report", 5)) == 3
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]
        assert (
            con.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'kvmemory_items_key'"
                " AND schemaname = current_schema()"
            )
            .fetchone()[0]
            .endswith("(session_id, key) WHERE (key IS NOT NULL)")
        )


@pytest.mark.postgres
def test_v4_store_opened_read_only_reads_without_records(postgres_url: str) -> None:
    """v4 tables opened read-only are not migrated: the items read as before, and there are no records."""
    write_v4_store(postgres_url)
    with open_store(postgres_url, read_only=True) as reader:
        assert [item["step"] for item in reader.read("s")] == [1, 2]
        assert reader.record_keys("s") == []
        assert reader.get_record("s", "lang") is None
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(4,)]


VERSION_QUERY = "pay the invoice for March"


def write_vector_session(url: str) -> list[int]:
    """Store 40 steps in session 's' (and 5 in 't') with their vectors; return the seqs of 's'."""
    embedder = HashingEmbedder(32)
    with open_store(url) as store:
        seqs = store.append(
            "s", [MemoryItem(step=i, thought=f"open the report {i}") for i in range(40)]
        )
        store.append("t", [MemoryItem(step=i, thought=f"close the chart {i}") for i in range(5)])
        store.index_embeddings("s", embedder)
        store.index_embeddings("t", embedder)
    return seqs


def version_hits(store: Any) -> list[tuple[int, float]]:
    """Return ``(seq, score)`` of the best 5 semantic hits of session 's' for :data:`VERSION_QUERY`."""
    hits = store.search("s", VERSION_QUERY, 5, mode="semantic", embedder=HashingEmbedder(32))
    return [(hit.seq, hit.score) for hit in hits]


def _vector_write(change: str, url: str, seqs: list[int]) -> None:
    """Change the vector rows of session 's' one way, through a second handle or plain SQL."""
    embedder = HashingEmbedder(32)
    if change.startswith("sql"):  # a process that is not kvmemory at all
        with psycopg.connect(url, autocommit=True) as con:
            if change == "sql update":
                con.execute(
                    "UPDATE kvmemory_vectors SET vector = (SELECT vector FROM kvmemory_vectors"
                    " WHERE session_id = 's' AND seq = %s) WHERE session_id = 's' AND seq = %s",
                    (seqs[-2], seqs[-1]),  # the best hit's vector, given to the last step too
                )
            else:
                con.execute(
                    "DELETE FROM kvmemory_vectors WHERE session_id = 's' AND seq = %s", (seqs[3],)
                )
        return
    with open_store(url) as other:
        if change == "append":
            other.append("s", [MemoryItem(step=99, thought=VERSION_QUERY)])
            other.index_embeddings("s", embedder)
        elif change == "update":
            with other.batch("s") as batch:
                batch.update({seqs[-1]: MemoryItem(step=99, thought=VERSION_QUERY)})
            other.index_embeddings("s", embedder)
        elif change == "delete steps":  # the vector rows go by the items' cascade
            other.delete_seqs("s", seqs[:5])
        else:
            other.drop_vectors("s")
            other.index_embeddings("s", embedder)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "change",
    ["append", "update", "delete steps", "drop and embed again", "sql update", "sql delete"],
)
def test_a_vector_write_by_a_second_handle_changes_the_version_and_the_next_query_sees_it(
    postgres_url: str, change: str
) -> None:
    """Every write to a session's vector rows, by another handle or plain SQL, gives it a version never seen before; a handle that kept the vectors then ranks by the new ones."""
    seqs = write_vector_session(postgres_url)
    with open_store(postgres_url) as kept:
        backend = kept.backend
        fields = "*|8/0"  # how the default parts name the vectors over every field
        seen = [backend.vectors_version("s", fields)]
        before = version_hits(kept)
        assert version_hits(kept) == before  # kept now
        other = backend.vectors_version("t", fields)
        _vector_write(change, postgres_url, seqs)
        seen.append(backend.vectors_version("s", fields))
        after = version_hits(kept)
        assert backend.vectors_version("t", fields) == other
    assert seen[1] != seen[0]
    with open_store(postgres_url) as fresh:
        assert after == version_hits(fresh)
    if change not in ("drop and embed again", "sql delete"):  # (the same vectors made again)
        assert after != before


def write_v5_store(url: str) -> list[int]:
    """Leave tables of schema version 5 (before the vectors' version) holding sessions 's' and 't' with vectors."""
    seqs = write_vector_session(url)
    with psycopg.connect(url, autocommit=True) as con:
        # What the v6 migration added, taken away again.
        for event in ("insert", "update", "delete"):
            con.execute(f"DROP TRIGGER kvmemory_vectors_{event} ON kvmemory_vectors")
        con.execute("DROP FUNCTION kvmemory_vectors_written()")
        con.execute("ALTER TABLE kvmemory_sessions DROP COLUMN vectors_version")
        con.execute("DROP SEQUENCE kvmemory_vectors_versions")
        con.execute("UPDATE kvmemory_schema SET version = 5")
    return seqs


@pytest.mark.postgres
def test_v5_store_is_migrated_to_a_vectors_version_kept_with_the_session(postgres_url: str) -> None:
    """v5 tables opened writable get the vectors' version on each session's row: a number of its own per session, new at every vector write."""
    seqs = write_v5_store(postgres_url)
    with open_store(postgres_url) as store:
        want = version_hits(store)
        with psycopg.connect(postgres_url, autocommit=True) as con:
            assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
                (PostgresStore.schema_version,)
            ]
            kept = {  # (number, nonce) from schema version 14
                sid: (number, nonce)
                for sid, number, nonce in con.execute(
                    "SELECT session_id, vectors_version, vectors_nonce FROM kvmemory_sessions"
                ).fetchall()
            }
        assert len({number for number, _ in kept.values()}) == 2
        assert store.backend.vectors_version("s", "*|8/0") == kept["s"]
        assert version_hits(store) == want
        _vector_write("update", postgres_url, seqs)
        assert store.backend.vectors_version("s", "*|8/0") not in kept.values()
        assert version_hits(store)[0][0] == seqs[-1]


@pytest.mark.postgres
def test_v5_store_opened_read_only_versions_its_vectors_by_their_rows(postgres_url: str) -> None:
    """v5 tables opened read-only are not migrated: semantic queries rank as before, and a write to the vector rows is seen by the next one."""
    seqs = write_v5_store(postgres_url)
    with open_store(postgres_url, read_only=True) as reader:
        before = version_hits(reader)
        assert version_hits(reader) == before
        _vector_write("sql update", postgres_url, seqs)
        after = version_hits(reader)
    assert after != before
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(5,)]


@pytest.mark.postgres
def test_record_lookup_can_use_the_key_index(postgres_url: str) -> None:
    """PostgreSQL can answer a lookup by keys from the partial (session_id, key) index."""
    with open_store(postgres_url) as store:
        store.put_records("s", {f"k{n}": {"n": n} for n in range(50)})
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute("SET enable_seqscan = off")
        con.execute("SET enable_bitmapscan = off")
        plan = " ".join(
            row[0]
            for row in con.execute(
                "EXPLAIN SELECT key, seq, created, data FROM kvmemory_items"
                " WHERE session_id = %s AND key = ANY(%s)",
                ("s", ["k1", "k7"]),
            )
        )
    assert "kvmemory_items_key" in plan


@pytest.mark.postgres
def test_keyword_search_computes_its_statistics_once_when_planner_statistics_are_stale(
    postgres_url: str,
) -> None:
    """A session added after the last ANALYZE is searched (a filtered query: the blocks' ranking, then SQL judging its rows) with each aggregate run once, not once per matched row, and the rows judged or scored alone looked up by key, not found among the session's rows."""
    with PostgresStore(postgres_url, min_size=1, max_size=1) as store:
        with store.backend.pool.connection() as con:
            con.execute("ALTER TABLE kvmemory_items SET (autovacuum_enabled = false)")
        store.append("old", [MemoryItem(step=i, note=f"save the file {i}") for i in range(300)])
        with store.backend.pool.connection() as con:
            con.execute("ANALYZE kvmemory_items")  # the statistics know session "old" only
        store.append("new", [MemoryItem(step=i, note=f"press OK to save {i}") for i in range(300)])
        plans = explained(store)
        with store.backend.pool.connection() as con:
            con.execute("SET auto_explain.log_analyze = on")
        hits = store.search("new", "press OK to save the file", 5, where={"step": range(300)})
        assert [hit.item.step for hit in hits] == [0, 1, 2, 3, 4]
        searches = [plan for plan in plans if "kvmemory_items" in plan]
        assert searches, plans
        judged = [plan for plan in searches if "wanted" in plan]
        assert judged, searches
        assert all("Rows Removed by Filter" not in plan for plan in judged), judged
        loops = [
            int(n) for plan in searches for n in re.findall(r"Aggregate .*? loops=(\d+)", plan)
        ]
        assert loops, searches
        assert max(loops) == 1, searches
        # The rows a rare filter keeps, scored alone, are looked up by key too.
        before = len(plans)
        scored = store.backend.keyword_among("new", ["press", "save"], [5, 250])
        assert scored is not None
        assert sorted(seq for _, seq in scored) == [5, 250]
        among = [plan for plan in plans[before:] if "wanted" in plan]
        assert among, plans[before:]
        assert all("Rows Removed by Filter" not in plan for plan in among), among


def write_v6_store(url: str) -> list[int]:
    """Leave tables of schema version 6 (before the vector change log) holding sessions 's' and 't' with vectors."""
    seqs = write_vector_session(url)
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(_pg_schema._VECTORS_VERSION_FUNCTION)  # the v6 trigger body, without the log
        con.execute("DROP TABLE kvmemory_vector_changes")
        con.execute("UPDATE kvmemory_schema SET version = 6")
    return seqs


@pytest.mark.postgres
def test_v6_store_is_migrated_to_the_vector_change_log(postgres_url: str) -> None:
    """v6 tables opened writable get the change log: a write by plain SQL is named by vector_changes, and a kept handle ranks as a fresh one.

    The version the migration leaves is no logged write's (its nonce is on no change row, schema version 14): a cache kept at it is built again once.
    """
    seqs = write_v6_store(postgres_url)
    with open_store(postgres_url) as kept:
        migrated = kept.backend.vectors_version("s", "*|8/0")
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute(
                "UPDATE kvmemory_vectors SET vector = vector WHERE session_id = 's' AND seq = %s",
                (seqs[0],),
            )
        since = kept.backend.vectors_version("s", "*|8/0")
        assert kept.backend.vector_changes("s", "*|8/0", migrated, since) is None
        before = version_hits(kept)
        assert version_hits(kept) == before  # kept now
        _vector_write("sql update", postgres_url, seqs)
        now = kept.backend.vectors_version("s", "*|8/0")
        assert kept.backend.vector_changes("s", "*|8/0", since, now) == {seqs[-1]}
        after = version_hits(kept)
    with open_store(postgres_url) as fresh:
        assert after == version_hits(fresh)
    assert after != before


@pytest.mark.postgres
def test_v6_store_opened_read_only_cannot_tell_changes_and_still_sees_writes(
    postgres_url: str,
) -> None:
    """v6 tables opened read-only are not migrated: vector_changes answers None, and a write is seen by the next query."""
    seqs = write_v6_store(postgres_url)
    with open_store(postgres_url, read_only=True) as reader:
        before = version_hits(reader)
        assert version_hits(reader) == before
        since = reader.backend.vectors_version("s", "*|8/0")
        _vector_write("sql update", postgres_url, seqs)
        now = reader.backend.vectors_version("s", "*|8/0")
        assert reader.backend.vector_changes("s", "*|8/0", since, now) is None
        assert version_hits(reader) != before
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(6,)]


def leave_v13_tables(url: str) -> None:
    """Take the tables back to schema version 13: no vectors nonce (numbers alone)."""
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(_pg_schema._LOGGED_VECTORS_VERSION_FUNCTION)  # the trigger body before it
        con.execute("ALTER TABLE kvmemory_sessions DROP COLUMN vectors_nonce")
        con.execute("ALTER TABLE kvmemory_vector_changes DROP COLUMN nonce")
        con.execute("UPDATE kvmemory_schema SET version = 13")


@pytest.mark.postgres
def test_v13_tables_opened_read_only_tell_the_changes_between_numbers(postgres_url: str) -> None:
    """v13 tables opened read-only (no nonce column) name the seqs written between two numbers, where the nonce check failed on the missing column."""
    seqs = write_vector_session(postgres_url)
    leave_v13_tables(postgres_url)
    with open_store(postgres_url, read_only=True) as reader:
        since = reader.backend.vectors_version("s", "*|8/0")
        assert type(since) is int
        _vector_write("sql update", postgres_url, seqs)
        now = reader.backend.vectors_version("s", "*|8/0")
        assert reader.backend.vector_changes("s", "*|8/0", since, now) == {seqs[-1]}
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(13,)]


@pytest.mark.postgres
def test_a_v13_reader_keeps_reading_while_another_handle_migrates_and_writes(
    postgres_url: str,
) -> None:
    """A handle opened read-only on v13 tables goes on across another handle's migration to 14 and its writes: the changes between its numbers, and hits as a fresh handle's."""
    seqs = write_vector_session(postgres_url)
    leave_v13_tables(postgres_url)
    with open_store(postgres_url, read_only=True) as reader:
        before = version_hits(reader)
        since = reader.backend.vectors_version("s", "*|8/0")
        with open_store(postgres_url) as writer:  # migrated, the reader still open
            assert isinstance(writer.backend.vectors_version("s", "*|8/0"), tuple)
            assert version_hits(writer) == before
            _vector_write("update", postgres_url, seqs)
            now = reader.backend.vectors_version("s", "*|8/0")
            assert type(now) is int
            assert reader.backend.vector_changes("s", "*|8/0", since, now) == {seqs[-1]}
            after = version_hits(reader)
            assert after == version_hits(writer)
    assert after != before
    with open_store(postgres_url) as fresh:
        assert version_hits(fresh) == after


@pytest.mark.postgres
def test_the_vector_change_log_keeps_the_newest_rows_of_a_session_and_marks_the_cut(
    postgres_url: str,
) -> None:
    """Past CHANGES_KEPT rows a session's log is pruned: a version from before the cut gets None, a recent one the seqs written since."""
    seqs = write_vector_session(postgres_url)
    with open_store(postgres_url) as store:
        backend = store.backend
        since = backend.vectors_version("s", "*|8/0")
        with psycopg.connect(postgres_url, autocommit=True) as con:
            for _ in range(_pg_schema.CHANGES_KEPT // len(seqs) + 3 * 64):
                con.execute("UPDATE kvmemory_vectors SET vector = vector WHERE session_id = 's'")
            middle = backend.vectors_version("s", "*|8/0")
            con.execute(
                "DELETE FROM kvmemory_vectors WHERE session_id = 's' AND seq = %s", (seqs[5],)
            )
            rows = con.execute(
                "SELECT count(*) FROM kvmemory_vector_changes WHERE session_id = 's'"
            ).fetchone()[0]
        now = backend.vectors_version("s", "*|8/0")
        assert backend.vector_changes("s", "*|8/0", since, now) is None
        assert backend.vector_changes("s", "*|8/0", middle, now) == {seqs[5]}
    assert _pg_schema.CHANGES_KEPT < rows <= _pg_schema.CHANGES_KEPT + 64 * len(seqs) + 1


@pytest.mark.postgres
def test_vector_changes_are_told_only_while_the_change_rows_hold_the_kept_versions_nonce(
    postgres_url: str,
) -> None:
    """A kept version whose number's change rows now hold another nonce (the database put back and that number given again) gets None; with its nonce, the seqs written since (schema version 14)."""
    seqs = write_vector_session(postgres_url)
    with open_store(postgres_url) as store:
        backend = store.backend
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute(
                "UPDATE kvmemory_vectors SET vector = vector WHERE session_id = 's' AND seq = %s",
                (seqs[0],),
            )
            since = backend.vectors_version("s", "*|8/0")
            _vector_write("sql update", postgres_url, seqs)
            now = backend.vectors_version("s", "*|8/0")
            assert backend.vector_changes("s", "*|8/0", since, now) == {seqs[-1]}
            number, nonce = since
            assert backend.vector_changes("s", "*|8/0", (number, nonce + 1), now) is None
            assert backend.vector_changes("s", "*|8/0", number, now) is None  # saved before v14
            con.execute(
                "UPDATE kvmemory_vector_changes SET nonce = nonce + 1"
                " WHERE session_id = 's' AND version = %s",
                (number,),
            )
            assert backend.vector_changes("s", "*|8/0", since, now) is None


def _crowded_steps(n: int) -> list[MemoryItem]:
    """Return ``n`` steps that all hold "the", with rarer words spread over them (no step holds every word of "the invoice window" side by side)."""
    words = ("file", "report", "chart", "invoice", "window", "saved", "moved", "closed")
    return [
        MemoryItem(step=i, text=f"the {words[i % 8]} was {words[(i * 7) % 8]} the {i % 37}")
        for i in range(n)
    ]


def _frequency_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Return a list that gets each later statement of a pooled connection that counts the query words' items, over every row matching them or from their posting blocks (apart from a ranking)."""
    scans: list[str] = []
    real = psycopg.Connection.execute
    counting = ("count(*) FILTER (WHERE c.tf ?", "GROUP BY q.t", "sum(n)::bigint", "sum(p.n)")

    def execute(self: Any, query: Any, params: Any = None, **options: Any) -> Any:
        if any(part in str(query) for part in counting):
            scans.append(str(query))
        return real(self, query, params, **options)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return scans


def _hits(found: Sequence[Any]) -> list[tuple[Any, float]]:
    return [(hit.item["step"], hit.score) for hit in found]


def test_a_hybrid_query_counts_its_words_items_in_its_ranking_only(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid query whose keyword leader misses a word counts each word's items in its ranking only (the words' frequencies and the chosen rows' scores reuse its statistics), and its hits are Memory.search's."""
    embedder = HashingEmbedder(32)
    items = _crowded_steps(600)
    with open_store(postgres_url) as store:
        store.append("s", items)
        store.index_embeddings("s", embedder)
        scans = _frequency_scans(monkeypatch)
        hits = store.search("s", "the invoice window", 5, mode="hybrid", embedder=embedder)
    want = Memory(items).search("the invoice window", 5, mode="hybrid", embedder=embedder)
    assert _hits(hits) == _hits(want)
    assert scans == []


def test_a_query_sees_what_another_handle_wrote_after_the_last_query(postgres_url: str) -> None:
    """Two hybrid and keyword queries of one handle with another handle's append between them: the second ranks the new items with the new statistics, as Memory.search does."""
    embedder = HashingEmbedder(32)
    items = _crowded_steps(300)
    more = [MemoryItem(step=300 + i, text=f"the invoice window {i} invoice") for i in range(40)]
    query = "the invoice window"
    with open_store(postgres_url) as reader, open_store(postgres_url) as writer:
        writer.append("s", items)
        writer.index_embeddings("s", embedder)
        before = [reader.search("s", query, 5, mode=mode, embedder=embedder) for mode in MODES]
        writer.append("s", more)
        writer.index_embeddings("s", embedder)
        after = [reader.search("s", query, 5, mode=mode, embedder=embedder) for mode in MODES]
    for found, memory in ((before, Memory(items)), (after, Memory([*items, *more]))):
        want = [memory.search(query, 5, mode=mode, embedder=embedder) for mode in MODES]
        assert [_hits(hits) for hits in found] == [_hits(hits) for hits in want]
    assert _hits(before[0]) != _hits(after[0])


MODES = ("keyword", "hybrid")


def test_a_search_scope_keeps_the_ranking_statistics_for_its_block_only(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside search_scope a ranking's statistics answer keyword_frequencies, keyword_among and count with the same values and no count of the words' items; after the block they are counted again."""
    terms = ["the", "invoice", "window"]
    with open_store(postgres_url) as store:
        store.append("s", _crowded_steps(200))
        backend = store.backend
        seqs = [record.seq for record in store.records("s")][::7]
        fresh = (
            backend.keyword_frequencies("s", terms),
            backend.keyword_among("s", terms, seqs),
            backend.count("s"),
        )
        scans = _frequency_scans(monkeypatch)
        with backend.search_scope("s"):
            backend.keyword_top("s", terms, 5)
            kept = (
                backend.keyword_frequencies("s", terms),
                backend.keyword_among("s", terms, seqs),
                backend.count("s"),
            )
            assert scans == []
        assert backend.keyword_frequencies("s", terms) == fresh[0]
    assert kept == fresh
    assert len(scans) == 1


def test_a_write_by_the_handle_inside_a_search_scope_drops_the_kept_statistics(
    postgres_url: str,
) -> None:
    """A handle that writes inside a search's scope counts the words afresh after the write (its own append is seen)."""
    terms = ["the", "invoice"]
    with open_store(postgres_url) as store:
        store.append("s", _crowded_steps(80))
        backend = store.backend
        with backend.search_scope("s"):
            backend.keyword_top("s", terms, 5)
            store.append("s", [MemoryItem(step=80, text="the invoice")] * 3)
            counted = backend.keyword_frequencies("s", terms)
            items = backend.count("s")
    assert counted == {"the": 83, "invoice": 23}  # 20 of the 80 steps, and the 3 appended
    assert items == 83


def write_v7_store(url: str) -> list[tuple[int, float]]:
    """Leave tables of schema version 7 (term counts compressed with pglz, the default) holding session 's'; return its hits for a query."""
    notes = [" ".join(f"word{(i * 7 + j) % 400}" for j in range(220)) for i in range(30)]
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=i, note=note) for i, note in enumerate(notes)])
        hits = [(hit.seq, hit.score) for hit in store.search("s", "word3 word12 word377", 10)]
    with psycopg.connect(url, autocommit=True) as con:
        if _pg_schema.offers_lz4(con):
            con.execute("ALTER TABLE kvmemory_items ALTER COLUMN tf SET COMPRESSION pglz")
            con.execute("UPDATE kvmemory_items SET tf = tf || '{}'::jsonb")
        con.execute("UPDATE kvmemory_schema SET version = 7")
    assert compressions(url) in ({"pglz"}, set())  # set(): a server before PostgreSQL 14
    return hits


def compressions(url: str) -> set[str]:
    """Return the compression methods of the rows' term counts (empty before PostgreSQL 14, which cannot tell)."""
    with psycopg.connect(url, autocommit=True) as con:
        if not con.execute("SELECT to_regproc('pg_column_compression')").fetchone()[0]:
            return set()
        rows = con.execute(
            "SELECT DISTINCT pg_column_compression(tf) FROM kvmemory_items"
            " WHERE pg_column_compression(tf) IS NOT NULL"
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.postgres
def test_v7_store_is_migrated_to_term_counts_compressed_with_lz4(postgres_url: str) -> None:
    """v7 tables opened writable compress the term counts written since with lz4 where the server offers it, keep the rows before as stored, and rank the same."""
    hits = write_v7_store(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        lz4 = _pg_schema.offers_lz4(con)
    with open_store(postgres_url) as store:
        assert [
            (hit.seq, hit.score) for hit in store.search("s", "word3 word12 word377", 10)
        ] == hits
        store.append("s", [MemoryItem(step=30, note=" ".join(f"word{j}" for j in range(400)))])
    if lz4:
        assert compressions(postgres_url) == {
            "pglz",
            "lz4",
        }  # the rows before kept, the new one lz4
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [
            (PostgresStore.schema_version,)
        ]


@pytest.mark.postgres
def test_v7_store_opened_read_only_ranks_the_same_and_is_not_migrated(postgres_url: str) -> None:
    """v7 tables opened read-only are searched as before and keep their version and compression."""
    hits = write_v7_store(postgres_url)
    with open_store(postgres_url, read_only=True) as reader:
        assert [
            (hit.seq, hit.score) for hit in reader.search("s", "word3 word12 word377", 10)
        ] == hits
    assert compressions(postgres_url) in ({"pglz"}, set())
    with psycopg.connect(postgres_url, autocommit=True) as con:
        assert con.execute("SELECT version FROM kvmemory_schema").fetchall() == [(7,)]


# Finite float32 values whose bytes a wrong encoding would change: signed zeros,
# subnormals, the extremes, and every byte value (0x00, "\\", quotes, braces)
# somewhere in the vector. NaN and infinities never reach a store (the embedder's
# output is refused with EmbeddingError).
AWKWARD_FLOATS = np.array(
    [-0.0, 0.0, 1e-45, -1e-45, 1.1754942e-38, 1.17549435e-38, 3.4028235e38, -3.4028235e38, 1 / 3],
    dtype=np.float32,
)


def awkward_vector(dimension: int, seed: int) -> bytes:
    """A little-endian float32 vector of ``dimension`` holding every awkward value and every byte value."""
    every_byte = np.frombuffer(bytes(range(256)), dtype="<f4")
    every_byte = every_byte[np.isfinite(every_byte)]
    rest = np.random.default_rng(seed).standard_normal(dimension).astype("<f4")
    values = np.concatenate([AWKWARD_FLOATS, every_byte, rest])[:dimension]
    return values.astype("<f4").tobytes()


@pytest.mark.postgres
@pytest.mark.parametrize("dimension", [16, 256, 4096])
def test_put_vectors_are_read_back_bit_for_bit_with_their_pgvector_copy(
    pgvector_url: str, dimension: int
) -> None:
    """Vectors of awkward floats written in binary read back byte for byte, and the pgvector copy holds the same float32 values."""
    with PostgresStore(pgvector_url) as store:
        assert store.uses_pgvector
        seqs = store.append("s", [MemoryItem(step=i, note=f"n{i}") for i in range(3)])
        with psycopg.connect(pgvector_url, autocommit=True) as con:
            datas = dict(con.execute("SELECT seq, data FROM kvmemory_items").fetchall())
        whole = {seq: awkward_vector(dimension, seq) for seq in seqs}
        parted = {seq: awkward_vector(dimension, seq) * 2 for seq in seqs}
        with store.backend.transaction("s") as tx:
            rows = [(seq, bytes(datas[seq]), whole[seq]) for seq in seqs]
            assert store.backend.put_vectors(tx, "s", "*", rows) == len(seqs)
            rows = [(seq, bytes(datas[seq]), parted[seq]) for seq in seqs]
            assert store.backend.put_vectors(tx, "s", "note|*", rows) == len(seqs)
    with psycopg.connect(pgvector_url, autocommit=True) as con:
        stored = con.execute(
            "SELECT fields, seq, vector, embedding::real[] FROM kvmemory_vectors ORDER BY 1, 2",
            binary=True,
        ).fetchall()
    assert [(fields, seq, bytes(vector)) for fields, seq, vector, _ in stored] == [
        *(("*", seq, whole[seq]) for seq in seqs),
        *(("note|*", seq, parted[seq]) for seq in seqs),
    ]
    copies = [np.array(copy, dtype="<f4").tobytes() if copy else None for *_, copy in stored]
    assert copies == [*(whole[seq] for seq in seqs), *(None for _ in seqs)]


@pytest.mark.postgres
def test_login_that_may_not_create_tables_is_told_the_servers_reason(postgres_url: str) -> None:
    """Opening a store where the login may not create its tables names the server's refusal and the store."""
    schema = postgres_url.rsplit("%3D", 1)[-1]
    role = "kvmemory_reader_" + re.sub(r"\W", "", schema)
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        con.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    try:
        url = postgres_url.replace("://kvmemory@", f"://{role}@", 1)
        with pytest.raises(StoreError, match=r"Cannot open PostgreSQL store .*permission denied"):
            PostgresStore(url)
        assert tables(postgres_url) == set()
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute(f"DROP OWNED BY {role} CASCADE")
            con.execute(f"DROP ROLE {role}")
