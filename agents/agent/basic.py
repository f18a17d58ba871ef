"""``BasicAgent``: the base class agent authors subclass (UFO's ``BasicAgent`` shape).

An agent owns a :class:`~agents.memory.memory.Memory` of its steps, a step
counter and a :class:`~agents.memory.blackboard.Blackboard` (its own, or its
host's when it works for a host agent). It records steps from fields, runs
step callbacks after each one, and builds prompt history from chosen keys
under a budget. It has no model client: calling a model is the subclass's
business.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any, Final

from agents.agent._replay import plural
from agents.agent._replay import replay as _replay
from agents.memory._item import MemoryItem
from agents.memory.blackboard import Blackboard
from agents.memory.exceptions import (
    ArgumentTypeError,
    CallbackError,
    FieldNotFoundError,
    InvalidArgumentError,
)
from agents.memory.memory import Memory
from agents.memory.prompt import (
    DEFAULT_IMAGE_KEYS,
    KeysLike,
    Window,
    WindowResult,
    image_refs,
    project,
    select_window,
)

__all__ = ["BasicAgent", "StepCallback", "drop_old_images"]

StepCallback = Callable[[MemoryItem, "BasicAgent"], object]
"""A function run after each recorded step as ``callback(item, agent)``; it may change memory."""


class BasicAgent:
    """A base class for agents: memory, step counter, blackboard and prompt history.

    Subclass it and add the model call. A step is recorded with
    :meth:`record_step`; prompt history comes from :meth:`build_history`.

    Example::

        class AppAgent(BasicAgent):
            def act(self, observation: str) -> None:
                history = self.build_history(["step", "action"], budget=2000)
                action = my_model(history, observation)
                self.record_step(observation=observation, action=action)

    Args:
        name: The agent's name.
        memory: The memory to use (default: a new one).
        blackboard: A blackboard to share; without one the host's is used,
            and without a host the agent makes its own when first asked.
        host: The agent this one works for.
        step_callbacks: Run after each recorded step as ``callback(item, agent)``.
        step_class: The item class :meth:`record_step` builds (a typed subclass validates fields).
        step_key: The field that holds the step number.
    """

    def __init__(
        self,
        name: str,
        *,
        memory: Memory | None = None,
        blackboard: Blackboard | None = None,
        host: BasicAgent | None = None,
        step_callbacks: Iterable[StepCallback] = (),
        step_class: type[MemoryItem] = MemoryItem,
        step_key: str = "step",
    ) -> None:
        if not (isinstance(step_class, type) and issubclass(step_class, MemoryItem)):
            msg = f"step_class must be a MemoryItem subclass, got {step_class!r}."
            raise ArgumentTypeError(msg)
        self.name = name
        self._memory = memory if memory is not None else Memory(step_key=step_key)
        self._blackboard = blackboard
        self._host = host
        self._step_callbacks: list[StepCallback] = list(step_callbacks)
        self._step_class = step_class
        self._step_key = step_key
        self._step = 0

    # -- UFO's API -----------------------------------------------------------

    @property
    def memory(self) -> Memory:
        """The agent's memory of its steps."""
        return self._memory

    @property
    def host(self) -> BasicAgent | None:
        """The agent this one works for, or ``None``."""
        return self._host

    @host.setter
    def host(self, host: BasicAgent | None) -> None:
        self._host = host

    @property
    def blackboard(self) -> Blackboard:
        """The blackboard: the one given, else the host's, else the agent's own."""
        if self._blackboard is not None:
            return self._blackboard
        if self._host is not None:
            return self._host.blackboard
        self._blackboard = Blackboard()
        return self._blackboard

    @property
    def step(self) -> int:
        """The number the next recorded step gets."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        if type(value) is not int or value < 0:
            msg = f"step must be an int >= 0, got {value!r}."
            raise InvalidArgumentError(msg)
        self._step = value

    @property
    def step_callbacks(self) -> tuple[StepCallback, ...]:
        """The step callbacks, in the order they run."""
        return tuple(self._step_callbacks)

    def add_step_callback(self, callback: StepCallback) -> None:
        """Run ``callback(item, agent)`` after each recorded step."""
        self._step_callbacks.append(callback)

    def add_memory(self, memory_item: MemoryItem) -> None:
        """Append an item to the agent's memory (no step number, no callbacks).

        Raises:
            ArgumentTypeError: if ``memory_item`` is not a ``MemoryItem``.
        """
        self._memory.add_memory_item(memory_item)

    def delete_memory(self, step: Any) -> int:
        """Delete the items of ``step`` and return how many were deleted."""
        return self._memory.delete_memory_item(step)

    def clear_memory(self) -> None:
        """Remove every item from the agent's memory (the step counter is kept)."""
        self._memory.clear()

    def set_memory_from_list_of_dicts(self, data: Iterable[Mapping[str, Any]]) -> None:
        """Replace the memory with one item per dict, all or nothing.

        The step counter moves past the highest integer step restored, so the
        next recorded step does not reuse a number.

        Raises:
            ArgumentTypeError: naming the position of an element that is not a dict.
        """
        self._memory.from_list_of_dicts(data)
        steps = [s for s in self._memory.steps() if type(s) is int]
        if steps:
            self._step = max(self._step, max(steps) + 1)

    # -- recording -----------------------------------------------------------

    def record_step(self, item: MemoryItem | None = None, /, **fields: Any) -> MemoryItem:
        """Record one step: build or take its item, number it, add it, run the callbacks.

        The item gets the current step number unless it already has a step
        field; then the counter moves on by one.

        Args:
            item: A ready item (fields are added to it); default: a new ``step_class`` item.
            **fields: The step's fields.

        Returns:
            The recorded item.

        Raises:
            FieldValidationError: if ``step_class`` refuses a field.
            CallbackError: if a step callback raised; the step stays recorded.
        """
        step = self._step
        if item is None:
            fields.setdefault(self._step_key, step)
            item = self._step_class(**fields)
        else:
            if not isinstance(item, MemoryItem):
                msg = f"record_step() takes a MemoryItem or fields, got {type(item).__name__}."
                raise ArgumentTypeError(msg)
            item.add_values_from_dict(fields)
            if self._step_key not in item:
                item.set_value(self._step_key, step)
        self._memory.add_memory_item(item)
        self._step = step + 1
        for callback in list(self._step_callbacks):
            try:
                callback(item, self)
            except Exception as exc:
                name = getattr(callback, "__qualname__", repr(callback))
                msg = (
                    f"Step callback {name} of agent {self.name!r} raised {type(exc).__name__}: {exc} "
                    f"(after step {item.get_value(self._step_key)!r}); the step stays recorded."
                )
                raise CallbackError(msg) from exc
        return item

    def inject_context(
        self, records: Iterable[Mapping[str, Any] | MemoryItem], **common: Any
    ) -> list[MemoryItem]:
        """Add earlier context (a previous task, past observations) as ordinary items.

        The items get no step number and do not move the counter; step
        callbacks do not run. ``common`` fields are added to every item, for
        example ``source="previous task"``.

        Returns:
            The added items.

        Raises:
            ArgumentTypeError: naming an element that is neither a dict nor an item; nothing is added.
        """
        items: list[MemoryItem] = []
        for position, record in enumerate(records):
            if isinstance(record, MemoryItem):
                item = record.copy()
            elif isinstance(record, Mapping):
                item = MemoryItem.from_mapping(record)
            else:
                msg = f"Context element {position} is a {type(record).__name__}, not a dict or MemoryItem; nothing was added."
                raise ArgumentTypeError(msg)
            item.add_values_from_dict(common)
            items.append(item)
        self._memory.add_memory_items(items)
        return items

    # -- prompts -------------------------------------------------------------

    def build_history(
        self,
        keys: KeysLike = None,
        *,
        budget: int | Window | None = None,
        last: int | None = None,
        where: Callable[[MemoryItem], bool] | None = None,
        strict: bool = False,
    ) -> list[dict[str, Any]]:
        """Return prompt history from the agent's memory: chosen keys, newest first under a budget.

        See :func:`agents.memory.prompt.project` for the arguments; the
        records come back in memory order.

        Raises:
            UnmatchedKeyError: in strict mode, naming a key no item holds.
        """
        return project(self._memory, keys, budget=budget, last=last, where=where, strict=strict)

    def history_window(
        self, window: Window, keys: KeysLike = None, *, strict: bool = False
    ) -> WindowResult:
        """Return the window of the agent's memory with its cost (see :func:`select_window`)."""
        return select_window(self._memory, window, keys=keys, strict=strict)

    def replay(self, *, file: IO[str] | None = None, color: bool | None = None) -> None:
        """Print the agent's session step by step (fields, errors, costs, images).

        Args:
            file: Where to print (default ``sys.stdout``).
            color: ``True`` for colour (needs ``kvmemory[rich]``), ``False`` for
                plain text, ``None`` for colour on a terminal when rich is installed.
        """
        _replay(
            self._memory,
            file=file,
            color=color,
            title=f"Agent {self.name}: {plural(len(self._memory), 'item')}",
        )

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r}: step {self._step}, {len(self._memory)} items>"
        )


_DROP_MARK: Final = "image_dropped"


def drop_old_images(
    keep: int = 2, *, image_keys: Sequence[str] = DEFAULT_IMAGE_KEYS
) -> StepCallback:
    """Return a step callback that removes image fields from all but the newest ``keep`` steps.

    Long sessions with a screenshot per step pay for every image in every
    prompt; this keeps the newest ones. An item whose images were removed gets
    ``image_dropped=True`` so a replay still shows that it had one. The
    callback reads the agent's memory newest first and stops where an earlier
    call left off, so each call costs about one step (after a deletion it
    reads the whole memory once).

    Args:
        keep: How many of the newest steps keep their images.
        image_keys: The fields that hold image paths or URLs.

    Raises:
        InvalidArgumentError: if ``keep`` is negative.
    """
    if type(keep) is not int or keep < 0:
        msg = f"keep must be an int >= 0, got {keep!r}."
        raise InvalidArgumentError(msg)

    # Items more than (new items + last call's kept items) from the end were
    # handled by an earlier call. When the memory shrank, everything is read.
    state = {"length": 0, "kept": 0}

    def callback(item: MemoryItem, agent: BasicAgent) -> None:
        memory = agent.memory
        length = len(memory)
        fresh = length - state["length"] if length >= state["length"] else length
        limit = fresh + state["kept"]
        step_key = memory.step_key
        seen_steps: list[Any] = []
        kept = 0
        for walked, older in enumerate(memory.iter_newest(), start=1):
            step = older.get_value(step_key)
            if step not in seen_steps:
                seen_steps.append(step)
            if len(seen_steps) <= keep:
                kept += 1
                continue
            if walked > limit:
                break
            keys = [k for k in image_keys if k in older and image_refs(older[k])]
            for key in keys:
                with contextlib.suppress(FieldNotFoundError):  # another thread was first
                    older.delete_value(key)
            if keys:
                older.set_value(_DROP_MARK, True)
        state["length"] = length
        state["kept"] = kept

    callback.__qualname__ = f"drop_old_images(keep={keep})"
    return callback
