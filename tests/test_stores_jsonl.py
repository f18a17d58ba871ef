"""The JSONL store: migrations, generations across handles, links, permissions, damaged records."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agents.memory import MemoryItem
from agents.memory.exceptions import (
    CorruptStoreError,
    InvalidStoreURLError,
    StoreError,
    StoreNotFoundError,
)
from agents.memory.search import HashingEmbedder
from agents.memory.stores import JSONLStore, open_store


def write_v1_store(directory: Path) -> None:
    """Write a schema-v1 store by hand: a marker, a lock file and one log with a delete."""
    directory.mkdir()
    (directory / "kvmemory-store.json").write_bytes(
        b'{"format":"kvmemory.jsonl-store","version":1}'
    )
    (directory / "kvmemory-store.lock").write_bytes(b"")
    (directory / "run.jsonl").write_bytes(
        b'{"format":"kvmemory.jsonl-log","version":1,"session_id":"run","step_key":"step","created":1700000000.0}\n'
        b'{"seq":1,"t":1700000000.5,"s":"1","item":{"step":1,"action":"open"}}\n'
        b'{"seq":2,"t":1700000000.6,"s":"2","item":{"step":2,"action":"type"}}\n'
        b'{"seq":3,"t":1700000000.7,"s":"3","item":{"step":3}}\n'
        b'{"del":[3]}\n'
    )


def snapshot(directory: Path) -> dict[str, bytes]:
    """Return every file of a directory tree with its bytes."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_v1_store_is_migrated_to_v2_without_loss(tmp_path: Path) -> None:
    """A v1 store opened writable gets v2 logs with a generation; items, seqs and next seq are kept."""
    directory = tmp_path / "logs"
    write_v1_store(directory)
    with JSONLStore(directory) as store:
        assert [(r.seq, r.item.to_dict()) for r in store.records("run")] == [
            (1, {"step": 1, "action": "open"}),
            (2, {"step": 2, "action": "type"}),
        ]
        info = store.session_info("run")
        assert info is not None
        assert (info.step_key, info.metadata, info.created.timestamp()) == (
            "step",
            {},
            1700000000.0,
        )
        assert store.append("run", [MemoryItem(step=4)]) == [4]
    marker = json.loads((directory / "kvmemory-store.json").read_bytes())
    assert marker["version"] == JSONLStore.schema_version
    header = json.loads((directory / "run.jsonl").read_bytes().split(b"\n")[0])
    assert header["version"] == JSONLStore.schema_version
    assert len(header["generation"]) == 32


def test_v1_store_is_read_read_only_without_a_change(tmp_path: Path) -> None:
    """A v1 store opened read-only is read as it is and not migrated."""
    directory = tmp_path / "logs"
    write_v1_store(directory)
    before = snapshot(directory)
    with open_store(f"jsonl://{directory}", read_only=True) as store:
        assert [i["step"] for i in store.read("run")] == [1, 2]
        assert store.sessions() == ["run"]
    assert snapshot(directory) == before


def test_read_only_typo_path_creates_nothing(tmp_path: Path) -> None:
    """Opening a path that is not a store read-only raises and creates no directory."""
    with pytest.raises(StoreNotFoundError, match="is not a kvmemory JSONL store"):
        open_store(f"jsonl://{tmp_path / 'typo' / 'logs'}", read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_directory_of_other_files_is_refused_and_unchanged(tmp_path: Path) -> None:
    """A directory holding other files and no marker is not turned into a store."""
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(
        CorruptStoreError, match=r"not a kvmemory JSONL store: it holds other files \(notes\.txt"
    ):
        open_store(f"jsonl://{tmp_path}")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_files_are_private_to_their_owner(tmp_path: Path) -> None:
    """The directory is created 0700; marker, lock, logs and deleted-session records 0600."""
    directory = tmp_path / "logs"
    with open_store(f"jsonl://{directory}") as store:
        store.append("a", [MemoryItem(step=1)])
        store.append("b", [MemoryItem(step=1)])
        store.delete_session("b")
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["a.jsonl", "b.deleted", "kvmemory-store.json", "kvmemory-store.lock"]
    for name in names:
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name


def test_symlinked_log_is_not_followed(tmp_path: Path) -> None:
    """A session log that is a symbolic link is refused by name, and its target is not written."""
    directory = tmp_path / "logs"
    with open_store(f"jsonl://{directory}"):
        pass
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"keep me\n")
    os.symlink(target, directory / "s.jsonl")
    with open_store(f"jsonl://{directory}") as store:
        with pytest.raises(StoreError, match=r"log .*s\.jsonl' is a symbolic link"):
            store.read("s")
        with pytest.raises(StoreError, match="is a symbolic link"):
            store.append("s", [MemoryItem(step=1)])
    assert target.read_bytes() == b"keep me\n"


def test_symlinked_lock_file_is_not_followed(tmp_path: Path) -> None:
    """A lock file that is a symbolic link is refused by name when the store is opened."""
    directory = tmp_path / "logs"
    with open_store(f"jsonl://{directory}"):
        pass
    lock = directory / "kvmemory-store.lock"
    lock.unlink()
    os.symlink(tmp_path / "elsewhere", lock)
    with pytest.raises(StoreError, match=r"lock file .* is a symbolic link"):
        open_store(f"jsonl://{directory}")
    assert not (tmp_path / "elsewhere").exists()


def test_nul_byte_in_path_is_refused(tmp_path: Path) -> None:
    """A directory path holding a NUL character is refused by name."""
    with pytest.raises(InvalidStoreURLError, match="holds a NUL character"):
        open_store(f"jsonl://{tmp_path}/a%00b")


def test_compaction_by_another_handle_is_noticed(tmp_path: Path) -> None:
    """A handle reads afresh after another handle compacted the log and appended past its offset."""
    url = f"jsonl://{tmp_path / 'logs'}"
    with open_store(url) as reader, open_store(url) as writer:
        writer.append("s", [MemoryItem(step=i, pad="x" * 20) for i in range(10)])
        assert reader.count("s") == 10
        writer.keep_last("s", 1)
        writer.compact("s")  # type: ignore[attr-defined]  # JSONLStore's own call
        writer.append("s", [MemoryItem(step=100 + i, pad="y" * 200) for i in range(5)])
        assert [i["step"] for i in reader.read("s")] == [9, 100, 101, 102, 103, 104]


def test_recreated_log_of_the_same_size_is_noticed(tmp_path: Path) -> None:
    """A log deleted and recreated with the same length is read afresh, not taken for the old one."""
    url = f"jsonl://{tmp_path / 'logs'}"
    with open_store(url) as reader, open_store(url) as writer:
        writer.append("s", [MemoryItem(step=1, word="old")])
        assert [i["word"] for i in reader.read("s")] == ["old"]
        writer.delete_session("s")
        writer.append("s", [MemoryItem(step=1, word="new")])
        assert [i["word"] for i in reader.read("s")] == ["new"]


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        (b'{"seq":"2","t":1.0,"s":"2","item":{"step":2}}', "seq '2'"),
        (b'{"seq":2,"t":"now","s":"2","item":{"step":2}}', "t 'now'"),
        (b'{"seq":2,"t":1.0,"s":2,"item":{"step":2}}', "s 2"),
        (b'{"del":1}', 'the "del" record holds 1'),
        (b'{"del":["1"]}', "expected a list of int seqs"),
        (b'{"meta":[1]}', 'the "meta" record holds a list'),
        (b"[1,2]", "is a JSON list, not a record"),
        (b'{"what":1}', "not a record this kvmemory knows"),
    ],
)
def test_record_with_wrong_field_types_is_named_by_line(
    tmp_path: Path, line: bytes, complaint: str
) -> None:
    """A record whose fields have the wrong types raises CorruptStoreError naming the file and line."""
    url = f"jsonl://{tmp_path / 'logs'}"
    with open_store(url) as store:
        store.append("s", [MemoryItem(step=1)])
    log = tmp_path / "logs" / "s.jsonl"
    with log.open("ab") as stream:
        stream.write(line + b"\n" + b'{"clear":1}\n')
    with (
        open_store(url) as store,
        pytest.raises(CorruptStoreError, match=f"line 3 of JSONL log .*{complaint}"),
    ):
        store.read("s")


def test_damaged_header_fields_are_named(tmp_path: Path) -> None:
    """A header whose step key is not text raises CorruptStoreError naming the log."""
    directory = tmp_path / "logs"
    with open_store(f"jsonl://{directory}") as store:
        store.append("s", [MemoryItem(step=1)])
    log = directory / "s.jsonl"
    lines = log.read_bytes().split(b"\n")
    header = json.loads(lines[0])
    header["step_key"] = 5
    log.write_bytes(b"\n".join([json.dumps(header).encode(), *lines[1:]]))
    with (
        open_store(f"jsonl://{directory}") as store,
        pytest.raises(CorruptStoreError, match=r"header line of JSONL log .*step_key 5"),
    ):
        store.read("s")


def test_metadata_holding_an_item_key_reads_back(tmp_path: Path) -> None:
    """Metadata with a key named "item" is read back as metadata, not taken for an item record."""
    url = f"jsonl://{tmp_path / 'logs'}"
    with open_store(url) as store:
        store.set_metadata("s", {"a": 1, "item": {"seq": 2}})
    with open_store(url) as store:
        info = store.session_info("s")
        assert info is not None
        assert info.metadata == {"a": 1, "item": {"seq": 2}}


def test_copy_without_lock_file_is_read_read_only_and_unchanged(tmp_path: Path) -> None:
    """A store copied without its lock file is read read-only, and no lock file is created."""
    directory = tmp_path / "logs"
    with open_store(f"jsonl://{directory}") as store:
        store.append("s", [MemoryItem(step=1)])
    (directory / "kvmemory-store.lock").unlink()
    before = snapshot(directory)
    with open_store(f"jsonl://{directory}", read_only=True) as store:
        assert [i["step"] for i in store.read("s")] == [1]
    assert snapshot(directory) == before


def test_v2_store_is_migrated_and_gets_vectors(tmp_path: Path) -> None:
    """A v2 store opened writable is marked v3, keeps its items, and stores vector records in the log."""
    directory = tmp_path / "logs"
    write_v1_store(directory)
    with JSONLStore(directory):
        pass  # gives the log a v2-style header (generation, next seq) ...
    log = directory / "run.jsonl"
    current = f'"version":{JSONLStore.schema_version}'.encode()
    log.write_bytes(log.read_bytes().replace(current, b'"version":2', 1))
    marker = directory / "kvmemory-store.json"
    marker.write_bytes(b'{"format":"kvmemory.jsonl-store","version":2}')  # ... and marks it v2
    embedder = HashingEmbedder(32)
    with JSONLStore(directory) as store:
        assert store.index_embeddings("run", embedder) == 2
        hits = store.search("run", "open", 1, mode="semantic", embedder=embedder)
        assert [(hit.seq, hit.item["action"]) for hit in hits] == [(1, "open")]
    assert json.loads(marker.read_bytes())["version"] == JSONLStore.schema_version
    with JSONLStore(directory, read_only=True) as reader:
        assert sorted(reader.read_vectors("run", embedder)) == [1, 2]


def test_damaged_vector_record_is_named_by_store_session_and_seq(tmp_path: Path) -> None:
    """A vector record of the wrong byte length raises CorruptStoreError naming the store, session and seq."""
    directory = tmp_path / "logs"
    embedder = HashingEmbedder(32)
    with JSONLStore(directory) as store:
        seqs = store.append("s", [MemoryItem(step=1, note="a"), MemoryItem(step=2, note="b")])
        store.index_embeddings("s", embedder)
    with (directory / "s.jsonl").open("ab") as log:
        # filed as the default parts are: every field, windows of 8 words
        log.write(b'{"vec":[%d,"*|8/0","AAAAAA=="]}\n' % seqs[1])
    message = f"item {seqs[1]} of session 's' of jsonl:///{directory} holds 4 bytes; expected 128"
    with JSONLStore(directory) as store, pytest.raises(CorruptStoreError, match=message):
        store.search("s", "a", mode="semantic", embedder=embedder)


def test_compaction_keeps_the_vectors_of_live_items(tmp_path: Path) -> None:
    """A compacted log holds the model and the vectors of the items it keeps, and no others."""
    directory = tmp_path / "logs"
    embedder = HashingEmbedder(32)
    with JSONLStore(directory) as store:
        seqs = store.append("s", [MemoryItem(step=i, note=f"note {i}") for i in range(4)])
        store.index_embeddings("s", embedder)
        before = store.read_vectors("s", embedder)
        store.delete_seqs("s", seqs[:2])
        store.compact("s")
    with JSONLStore(directory) as store:
        after = store.read_vectors("s", embedder)
        assert sorted(after) == seqs[2:]
        assert all((after[seq] == before[seq]).all() for seq in seqs[2:])
        assert store.index_embeddings("s", embedder) == 2


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (b'{"vec":[1,"*"]}', r'"vec" record holds \[1, \'\*\'\]'),
        (b'{"vec":[1,"*","not base64!"]}', "not base64"),
        (b'{"vm":["model"]}', r'"vm" record holds \[\'model\'\]'),
    ],
    ids=["vec-shape", "vec-base64", "vm-shape"],
)
def test_damaged_vector_records_are_named_by_line(
    tmp_path: Path, record: bytes, match: str
) -> None:
    """A vector or model record of the wrong shape raises CorruptStoreError naming the log and line."""
    directory = tmp_path / "logs"
    with JSONLStore(directory) as store:
        store.append("s", [MemoryItem(step=1, note="a")])
    with (directory / "s.jsonl").open("ab") as log:
        log.write(record + b"\n")
    with JSONLStore(directory) as store, pytest.raises(CorruptStoreError, match=f"line 3.*{match}"):
        store.vector_model("s")


# -- records (schema version 4) -----------------------------------------------------------


def test_v3_store_is_migrated_and_keeps_records(tmp_path: Path) -> None:
    """A v3 store opened writable is marked v4; its items stay items, and records put after survive a reopen."""
    directory = tmp_path / "logs"
    with JSONLStore(directory) as store:
        store.append("run", [MemoryItem(step=1, key="lang", value="fr")])
    log = directory / "run.jsonl"
    current = f'"version":{JSONLStore.schema_version}'.encode()
    log.write_bytes(log.read_bytes().replace(current, b'"version":3', 1))
    marker = directory / "kvmemory-store.json"
    marker.write_bytes(b'{"format":"kvmemory.jsonl-store","version":3}')
    with JSONLStore(directory) as store:
        assert store.record_keys("run") == []
        store.put_record("run", "lang", {"value": "de"})
    assert json.loads(marker.read_bytes())["version"] == JSONLStore.schema_version == 4
    with JSONLStore(directory, read_only=True) as reader:
        assert reader.get_record("run", "lang") == MemoryItem(key="lang", value="de")
        assert [item["value"] for item in reader.read("run")] == ["fr", "de"]


def test_record_key_is_written_in_the_item_record(tmp_path: Path) -> None:
    """A put writes the key as "k" in the item's log record; a replace adds a "del" of the old seq."""
    directory = tmp_path / "logs"
    with JSONLStore(directory) as store:
        first = store.put_record("s", "lang", {"value": "fr"})
        second = store.put_record("s", "lang", {"value": "de"})
    lines = [json.loads(line) for line in (directory / "s.jsonl").read_bytes().splitlines()[1:]]
    assert lines == [
        {
            "seq": first,
            "t": lines[0]["t"],
            "s": None,
            "k": "lang",
            "item": {"key": "lang", "value": "fr"},
        },
        {"del": [first]},
        {
            "seq": second,
            "t": lines[2]["t"],
            "s": None,
            "k": "lang",
            "item": {"key": "lang", "value": "de"},
        },
    ]


def test_compaction_keeps_the_record_keys(tmp_path: Path) -> None:
    """A log compacted (by hand or after many replaces) files its records under their keys again."""
    directory = tmp_path / "logs"
    with JSONLStore(directory) as store:
        for n in range(40):
            store.put_record("s", "counter", {"n": n})
        store.put_record("s", "other", {"n": -1})
        store.compact("s")
        assert store.get_record("s", "counter") == MemoryItem(key="counter", n=39)
    assert len((directory / "s.jsonl").read_bytes().splitlines()) == 3  # the header, two records
    with JSONLStore(directory) as again:
        assert again.record_keys("s") == ["counter", "other"]
        assert again.get_record("s", "counter") == MemoryItem(key="counter", n=39)


def test_damaged_record_key_is_named(tmp_path: Path) -> None:
    """An item record whose "k" is not a non-empty string is reported as damage naming the line."""
    directory = tmp_path / "logs"
    with JSONLStore(directory) as store:
        store.put_record("s", "lang", {"value": "fr"})
    log = directory / "s.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"k":"lang"', b'"k":7'))
    with (
        JSONLStore(directory, read_only=True) as reader,
        pytest.raises(CorruptStoreError, match=r"line 2 of JSONL log .* and k 7; expected"),
    ):
        reader.get_record("s", "lang")
