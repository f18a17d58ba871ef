"""Watching ``agent.memory.steps``, so that the recorder sees every change however it is made.

smolagents calls step callbacks only from ``agent.run()``: ``agent.step()``
in a user's own loop fires none, and neither does code that appends to,
replaces or clears ``agent.memory.steps``. So the recorder watches the list
itself:

* ``agent.memory.steps`` becomes a :class:`WatchedSteps`, a ``list``
  subclass (of the list's own class, when that is a subclass of ``list``)
  whose changing methods (``append``, ``extend``, ``insert``, ``pop``,
  ``remove``, ``clear``, item assignment and deletion, ``+=``, ``*=``,
  ``sort``, ``reverse``) tell the recorder after they ran;
* ``agent.memory`` becomes an instance of a subclass of its class whose
  ``steps`` attribute puts any list assigned to it (``memory.reset()``,
  ``agent.memory.steps = other.memory.steps``) into a new watched list with
  the same steps, and tells the recorder.

Copies (``copy``, ``deepcopy``, ``pickle``) of either are of the original
classes. A list assigned to ``agent.memory.steps`` is copied into the
watched one: keep using ``agent.memory.steps``, not the list assigned.

An agent made with a recorder in ``step_callbacks`` is attached at once
(:func:`call_after_agent_init` wraps ``MultiStepAgent.__init__`` once per
process), so a loop of ``agent.step()`` calls is recorded with no
``agent.run()`` at all.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, SupportsIndex

from typing_extensions import Self

_WATCH_KEY: Final = "_kvmemory_watch"
"""Where a watched memory and its watched steps list keep their :class:`Watch`."""


class Watch:
    """The recorders that follow one agent's memory, told of each change to its steps."""

    def __init__(self, agent: Any) -> None:
        self.agent = weakref.ref(agent)
        self.listeners: list[weakref.WeakMethod[Callable[[Any, bool], None]]] = []
        self.paused = 0

    def add(self, listener: Callable[[Any, bool], None]) -> None:
        """Call the bound method ``listener(agent, rearranged)`` at each change (held weakly, once)."""
        if all(ref() != listener for ref in self.listeners):
            self.listeners.append(weakref.WeakMethod(listener))

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Tell no one of the changes made inside the block (a restore sets the steps itself)."""
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def wrap(self, steps: Any) -> WatchedSteps:
        """Return a watched list holding the steps of ``steps``."""
        return _watched_list_class(type(steps))(steps, watch=self)

    def changed(self, steps: Any, *, rearranged: bool = True) -> None:
        """Tell each listener that ``steps`` changed (``rearranged``: not only at its end), if they are still the agent's steps."""
        agent = self.agent()
        if self.paused or agent is None:
            return
        memory = getattr(agent, "memory", None)
        if getattr(memory, "__dict__", {}).get("steps") is not steps:
            return  # a list the agent no longer holds
        for ref in list(self.listeners):
            listener = ref()
            if listener is not None:
                listener(agent, rearranged)


class WatchedSteps(list[Any]):
    """``agent.memory.steps`` as the recorder watches it: a list that reports each change made through it."""

    def __init__(self, steps: Any = (), *, watch: Watch | None = None) -> None:
        super().__init__(steps)
        self.__dict__[_WATCH_KEY] = watch

    def _changed(self, *, rearranged: bool = True) -> None:
        watch = self.__dict__.get(_WATCH_KEY)
        if watch is not None:
            watch.changed(self, rearranged=rearranged)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return (list, (list(self),))  # copies are plain lists, unwatched

    def append(self, step: Any) -> None:
        super().append(step)
        self._changed(rearranged=False)

    def extend(self, steps: Any) -> None:
        super().extend(steps)
        self._changed(rearranged=False)

    def insert(self, index: SupportsIndex, step: Any) -> None:
        super().insert(index, step)
        self._changed()

    def remove(self, step: Any) -> None:
        super().remove(step)
        self._changed()

    def pop(self, index: SupportsIndex = -1) -> Any:
        step = super().pop(index)
        self._changed()
        return step

    def clear(self) -> None:
        super().clear()
        self._changed()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        self._changed()

    def reverse(self) -> None:
        super().reverse()
        self._changed()

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._changed()

    def __delitem__(self, index: Any) -> None:
        super().__delitem__(index)
        self._changed()

    def __iadd__(self, steps: Iterable[Any], /) -> Self:  # type: ignore[misc]  # list.__add__ takes only lists; += takes any iterable, as list does
        super().__iadd__(steps)
        self._changed(rearranged=False)
        return self

    def __imul__(self, count: SupportsIndex) -> Self:
        super().__imul__(count)
        self._changed()
        return self


_LIST_CLASSES: dict[type, type[WatchedSteps]] = {list: WatchedSteps}


def _watched_list_class(cls: type) -> type[WatchedSteps]:
    """Return the watched class for a steps list of class ``cls`` (a subclass of it, made once)."""
    if isinstance(cls, type) and issubclass(cls, WatchedSteps):
        return cls
    if not (isinstance(cls, type) and issubclass(cls, list)):
        return WatchedSteps
    found = _LIST_CLASSES.get(cls)
    if found is None:
        try:
            found = type(f"Watched{cls.__name__}", (WatchedSteps, cls), {})
        except TypeError:  # a list class that cannot be combined (its own __slots__)
            found = WatchedSteps
        _LIST_CLASSES[cls] = found
    return found


class _StepsAttribute:
    """The ``steps`` attribute of a watched memory: a list assigned to it is watched, and the change told."""

    def __get__(self, memory: Any, owner: Any = None) -> Any:
        if memory is None:
            return self
        try:
            return memory.__dict__["steps"]
        except KeyError:
            msg = f"{type(memory).__name__!r} object has no attribute 'steps'"
            raise AttributeError(msg) from None  # attribute protocol

    def __set__(self, memory: Any, value: Any) -> None:
        watch = memory.__dict__.get(_WATCH_KEY)
        if watch is None:
            memory.__dict__["steps"] = value
            return
        steps = watch.wrap(value)
        memory.__dict__["steps"] = steps
        watch.changed(steps)


def _new(cls: type) -> Any:
    """Make an instance of ``cls`` without running its ``__init__`` (its state follows)."""
    return object.__new__(cls)


def _reduce_memory(memory: Any, protocol: SupportsIndex) -> Any:
    """Copy a watched memory as an instance of its original class, with a plain steps list."""
    base = type(memory).__bases__[0]
    state = {key: value for key, value in memory.__dict__.items() if key != _WATCH_KEY}
    if isinstance(state.get("steps"), list):
        state["steps"] = list(state["steps"])
    return (_new, (base,), state)


_MEMORY_CLASSES: dict[type, type] = {}


def _watched_memory_class(cls: type) -> type:
    if getattr(cls, "__kvmemory_watched__", False):
        return cls
    found = _MEMORY_CLASSES.get(cls)
    if found is None:
        namespace = {
            "steps": _StepsAttribute(),
            "__reduce_ex__": _reduce_memory,
            "__kvmemory_watched__": True,
            "__doc__": cls.__doc__,
        }
        found = _MEMORY_CLASSES[cls] = type(f"Watched{cls.__name__}", (cls,), namespace)
    return found


def watch_memory(agent: Any, listener: Callable[[Any, bool], None]) -> bool:
    """Make ``agent.memory`` call ``listener(agent, rearranged)`` (a bound method) at every change to its steps.

    Returns:
        Whether the memory is watched; ``False`` for a memory object whose
        class cannot be given the watched ``steps`` attribute (then only
        step callbacks and explicit ``write`` calls record).
    """
    memory = getattr(agent, "memory", None)
    state = getattr(memory, "__dict__", None)
    if state is None or not isinstance(state.get("steps"), list):
        return False
    watch = state.get(_WATCH_KEY)
    if not isinstance(watch, Watch) or watch.agent() is not agent:
        try:
            memory.__class__ = _watched_memory_class(type(memory))
        except TypeError:  # a class whose instances cannot change class (slots, a C type)
            return False
        watch = Watch(agent)
        state[_WATCH_KEY] = watch
        state["steps"] = watch.wrap(state["steps"])
    watch.add(listener)
    return True


def watch_of(agent: Any) -> Watch | None:
    """Return the watch on ``agent.memory``, if it has one."""
    watch = getattr(getattr(agent, "memory", None), "__dict__", {}).get(_WATCH_KEY)
    return watch if isinstance(watch, Watch) else None


_HOOKED: list[bool] = []


def call_after_agent_init(callback: Callable[[Any, Any], None]) -> None:
    """Call ``callback(agent, step_callbacks)`` after each smolagents agent is made (installed once per process).

    Wraps ``smolagents.agents.MultiStepAgent.__init__``, the constructor every
    smolagents agent runs, and reads its public ``step_callbacks`` argument;
    without smolagents, does nothing.
    """
    if _HOOKED:
        return
    try:
        from smolagents.agents import MultiStepAgent
    except ImportError:  # no smolagents: no agents to attach to
        return
    original = MultiStepAgent.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            given = signature.bind(self, *args, **kwargs).arguments.get("step_callbacks")
        except TypeError:  # a signature of another smolagents version: attach at the first callback
            return
        callback(self, given)

    MultiStepAgent.__init__ = __init__
    _HOOKED.append(True)
