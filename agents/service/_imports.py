"""Writing a memory read from another program's files into a store session, all or nothing."""

from __future__ import annotations

import os
from collections.abc import Callable

from agents.agent._replay import plural
from agents.memory import Memory
from agents.memory.exceptions import InvalidSessionIdError
from agents.memory.stores import Store, check_session_id, open_store

__all__ = ["import_memory"]


def import_memory(
    memory: Memory,
    store: Store | str | os.PathLike[str],
    session_id: str,
    *,
    append: bool = False,
    before_append: Callable[[Store, int], None] | None = None,
) -> int:
    """Write ``memory`` into a store session, all or nothing, and return the number of items written.

    What the importers (``kvmemory import ufo-log``, ``kvmemory import
    smolagents-dump``) share: the session must be empty unless ``append``;
    the items are appended under the memory's step key in one transaction,
    and the memory's metadata is added to what the session holds. If the
    metadata cannot be saved, the appended items are taken back.

    Args:
        memory: The items, step key and metadata to write.
        store: An open store (left open), or a store URL or path (opened and closed here).
        session_id: The session to write.
        append: Append to a session that already holds items (refused by default).
        before_append: Called with the open store and the number of items the
            session already holds, just before the items are appended (a
            smolagents dump numbers its run after the recorded ones).

    Raises:
        InvalidSessionIdError: for a bad session id, or a non-empty session without ``append``.
        StoreError: if the store cannot be written (also when the session was
            created with another step key); nothing is written.
    """
    check_session_id(session_id)
    opened = store if isinstance(store, Store) else open_store(store)
    try:
        held = opened.count(session_id)
        if held and not append:
            msg = f"Session {session_id!r} already holds {plural(held, 'item')}; import into a new session id, or pass append=True (--append)."
            raise InvalidSessionIdError(msg)
        if before_append is not None:
            before_append(opened, held)
        info = opened.session_info(session_id)
        metadata = {**(info.metadata if info is not None else {}), **memory.metadata}
        seqs = opened.append(session_id, memory.content, step_key=memory.step_key)
        try:
            opened.set_metadata(session_id, metadata, step_key=memory.step_key)
        except BaseException:
            opened.delete_seqs(session_id, seqs)
            raise
    finally:
        if opened is not store:
            opened.close()
    return len(memory)
