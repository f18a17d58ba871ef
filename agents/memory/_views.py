"""Read-only containers for properties whose changes would otherwise be lost.

A property such as ``Memory.content`` returns a snapshot: a fresh list each
time. In UFO ``content`` is the memory's own list, so UFO-style code that
appends to it would see the append vanish here (the item never reaches the
memory, its step index, its watchers or its store). These containers read
like the plain ``list`` and ``dict`` they subclass (equality, indexing,
slicing, iteration, JSON, ``copy``), and every method that would change them
raises :class:`~agents.memory.ReadOnlyViewError` naming the method to call
instead. Copies (``list(view)``, ``view[:]``, ``copy.copy(view)``) are plain,
changeable containers.

This module imports no other module of the memory room but its exceptions, so
``memory.py`` and ``_item.py`` can use it without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, NoReturn, SupportsIndex

from typing_extensions import Self

from agents.memory.exceptions import ReadOnlyViewError

__all__ = [
    "ConversationContext",
    "ItemAttributes",
    "MemoryContent",
    "MemoryListContent",
    "ReadOnlyDict",
    "ReadOnlyList",
]


def _refuse(what: str, fix: str, change: str) -> NoReturn:
    msg = (
        f"{what} is a read-only snapshot: {change} on it would change nothing but the snapshot, "
        f"and the change would be lost. {fix}"
    )
    raise ReadOnlyViewError(msg)


class ReadOnlyList(list[Any]):
    """A list snapshot that refuses every change, naming the method that makes it.

    Subclasses set ``what`` (the property, as ``Memory.content``) and ``fix``
    (the call to make instead).
    """

    __slots__ = ()
    what: ClassVar[str] = "This list"
    fix: ClassVar[str] = "Change the object it was read from through its methods."

    def _refuse(self, change: str) -> NoReturn:
        _refuse(self.what, self.fix, change)

    def append(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming the method to call."""
        self._refuse("append()")

    def extend(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming the method to call."""
        self._refuse("extend()")

    def insert(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming the method to call."""
        self._refuse("insert()")

    def remove(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming the method to call."""
        self._refuse("remove()")

    def pop(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming the method to call."""
        self._refuse("pop()")

    def clear(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming the method to call."""
        self._refuse("clear()")

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError`; ``sorted(view)`` gives a sorted copy."""
        self._refuse("sort() (sorted() gives a sorted copy)")

    def reverse(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError`; ``view[::-1]`` gives a reversed copy."""
        self._refuse("reverse() (view[::-1] gives a reversed copy)")

    def __setitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("assigning an element")

    def __delitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("del")

    # mypy checks in-place operators against list.__add__; these never return, so the check does not apply.
    def __iadd__(self, other: Iterable[Any]) -> Self:  # type: ignore[misc]
        self._refuse("+=")

    def __imul__(self, other: SupportsIndex) -> Self:
        self._refuse("*=")

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # Copies and pickles are plain lists: rebuilding this class would call append().
        return (list, (list(self),))


class ReadOnlyDict(dict[str, Any]):
    """A dict snapshot that refuses every change, naming what to do instead.

    Subclasses set ``what`` and ``fix``, as for :class:`ReadOnlyList`.
    """

    __slots__ = ()
    what: ClassVar[str] = "This dict"
    fix: ClassVar[str] = "Change the object it was read from through its methods."

    def _refuse(self, change: str) -> NoReturn:
        _refuse(self.what, self.fix, change)

    def __setitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("assigning a key")

    def __delitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("del")

    # mypy checks |= against dict.__or__; it never returns, so the check does not apply.
    def __ior__(self, other: Any) -> Self:  # type: ignore[misc,override]
        self._refuse("|=")

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming what to do instead."""
        self._refuse("update()")

    def setdefault(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming what to do instead."""
        self._refuse("setdefault()")

    def pop(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming what to do instead."""
        self._refuse("pop()")

    def popitem(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming what to do instead."""
        self._refuse("popitem()")

    def clear(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: raise :class:`~agents.memory.ReadOnlyViewError` naming what to do instead."""
        self._refuse("clear()")

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # Copies and pickles are plain dicts: rebuilding this class would assign keys.
        return (dict, (dict(self),))


class MemoryContent(ReadOnlyList):
    """What ``Memory.content`` returns: the items in order, read-only."""

    __slots__ = ()
    what = "Memory.content"
    fix = (
        "Change the memory through its methods, which keep its step index, watchers, "
        "bound and store: add_memory_item(item), add_memory_items(items), "
        "delete_memory_item(step), clear() or load(items)."
    )


class MemoryListContent(ReadOnlyList):
    """What ``Memory.list_content`` returns: each item as a fresh dict, in order, read-only."""

    __slots__ = ()
    what = "Memory.list_content"
    fix = (
        "Add an item with memory.add_memory_item(MemoryItem(**fields)) (or delete_memory_item(step), "
        "clear()); memory.to_list_of_dicts() gives a list of your own to change."
    )


class ItemAttributes(ReadOnlyList):
    """What ``MemoryItem.attributes`` returns: the field names in order, read-only."""

    __slots__ = ()
    what = "MemoryItem.attributes"
    fix = "Add a field with item.set_value(key, value) and remove one with item.delete_value(key)."


class ConversationContext(ReadOnlyDict):
    """What ``Conversation.context`` returns: the context keys it was opened for, read-only."""

    __slots__ = ()
    what = "Conversation.context"
    fix = (
        "A conversation's context is fixed when it is opened: open the conversation of another "
        "context with Conversation.for_context(store, context)."
    )
