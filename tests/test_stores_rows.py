"""RowTable, the rows of a session in RAM with their step index (the JSONL and in-process stores)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agents.memory.stores._core.rows import RowTable

ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, 30), st.sampled_from([None, "1", "2", "x"])),
        st.tuples(st.just("discard"), st.integers(0, 30), st.none()),
        st.tuples(st.just("clear"), st.just(0), st.none()),
    ),
    max_size=60,
)


@given(ops, st.lists(st.sampled_from([None, "1", "2", "x", "y"]), max_size=4), st.integers(-1, 30))
def test_row_table_step_index_matches_a_scan(
    changes: list[tuple[str, int, str | None]], steps: list[str | None], after: int
) -> None:
    """RowTable.of_steps gives what a scan of the rows gives, after any sets, discards and clears."""
    table = RowTable()
    plain: dict[int, tuple[str | None, float, bytes]] = {}
    for op, seq, step in changes:
        if op == "set":
            table[seq] = plain[seq] = (step, 0.0, str(seq).encode())
        elif op == "discard":
            assert table.discard(seq) == (plain.pop(seq, None) is not None)
        else:
            table.clear()
            plain.clear()
    wanted = [s for s in steps if s is not None]
    expected = [
        (seq, row[2]) for seq, row in sorted(plain.items()) if row[0] in wanted and seq > after
    ]
    assert table.of_steps(wanted, after=after) == expected
    assert dict(table) == plain


def apply(table: RowTable, changes: list[tuple[str, int, str | None]]) -> None:
    """Apply sets, discards and clears to a table."""
    for op, seq, step in changes:
        if op == "set":
            table[seq] = (step, 0.0, str(seq).encode())
        elif op == "discard":
            table.discard(seq)
        else:
            table.clear()


@given(ops, st.integers(0, 60))
def test_row_table_changed_since_names_every_row_changed_after_a_mark(
    changes: list[tuple[str, int, str | None]], cut: int
) -> None:
    """RowTable.changed_since(mark) names every seq whose row object changed after the mark (or answers None), however many changes the table forgot."""
    table = RowTable()
    apply(table, changes[:cut])
    mark = table.mark
    before = dict(table)
    apply(table, changes[cut:])
    changed = table.changed_since(mark)
    if changed is None:
        return
    moved = {seq for seq in before.keys() | table.keys() if before.get(seq) is not table.get(seq)}
    assert moved <= set(changed)


def test_row_table_forgets_old_changes_and_says_so() -> None:
    """A mark older than the changes a table keeps gets None, not a partial answer."""
    table = RowTable()
    table[1] = (None, 0.0, b"1")
    mark = table.mark
    for n in range(10_000):
        table[1] = (None, 0.0, str(n).encode())
    assert table.changed_since(mark) is None
    assert table.changed_since(table.mark) == []
