"""A PostgreSQL database put back to a physical copy of itself (same name, same table oids: the same cache subfolder) and written again: the coded file saved at a number the sequence gives again must not be taken (schema version 14: a nonce beside the number)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

psycopg = pytest.importorskip("psycopg")

from coded_sessions import (  # noqa: E402  # below the skip, as the imports after it
    EMBEDDER,
    FIELDS,
    QUERIES,
    coded_handle,
    expected,
    found,
    more_steps,
    saved,
    steps,
    written,
)

from agents.memory import MemoryItem  # noqa: E402
from agents.memory.stores import open_store  # noqa: E402

# Each test twice: the coded rows bounded by simsimd, then by numpy (simsimd refused).
pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("int8_kernel")]


def copied(server: str, source: str, target: str) -> None:
    """Make database ``target`` a file copy of ``source`` (its catalog, so its tables' oids, and its sequences as they stand), dropping an older ``target``."""
    with psycopg.connect(server, autocommit=True) as con:
        con.execute(f"DROP DATABASE IF EXISTS {target}")
        con.execute(f"CREATE DATABASE {target} TEMPLATE {source} STRATEGY FILE_COPY")


def test_a_physical_restore_written_again_to_the_files_version_is_not_taken_for_it(
    own_postgres: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database put back to a physical copy taken before more steps were written and the coded file saved, then other steps written until the version sequence reaches the file's number: a fresh handle's hits are Memory.search's over the session now."""
    server = own_postgres.url
    base = server.rsplit("/", 1)[0]
    url = f"{base}/runs?vector_cache={quote(str(tmp_path / 'cache'))}"
    copied(server, "template1", "runs")
    items = steps(60, 3)
    written(url, items)
    copied(server, "runs", "backup")
    written(url, more_steps(70, 5))
    saved(url, [*items, *more_steps(70, 5)], monkeypatch)
    with open_store(url) as store:
        at = store.backend.vectors_version("s", FIELDS)
    copied(server, "backup", "runs")  # the restore
    now = list(items)
    with open_store(url) as store:
        while store.backend.vectors_version("s", FIELDS)[0] < at[0]:  # type: ignore[index]  # (number, nonce)
            step = MemoryItem(**{**steps(1, 40 + len(now))[0].to_dict(), "step": 2000 + len(now)})
            now.append(step)
            store.append("s", [step])
            store.index_embeddings("s", EMBEDDER)
    with coded_handle(url, [*items, *more_steps(70, 5)], monkeypatch) as store:  # its budget
        for mode in ("semantic", "hybrid"):
            assert found(store, QUERIES[0], 9, mode) == expected(now, QUERIES[0], 9, mode, None)
