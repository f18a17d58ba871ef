"""SmolagentsRecorder: write an agent's memory to a kvmemory memory as it changes, and restore it."""

from __future__ import annotations

import contextlib
import operator
import warnings
import weakref
from collections.abc import Mapping
from typing import Any, Final

from agents.integrations.smolagents._decode import (
    check_names,
    recorded,
    restore_python_state,
    restored,
)
from agents.integrations.smolagents._fields import (
    EXECUTOR_INTERNALS,
    OWN_FIELDS,
    STATE,
    STATE_LEFT_OUT,
    STATE_REMOVED,
    UnsavedValueWarning,
    field_names,
    kind_of,
    load_smolagents,
    step_fields,
    type_name,
)
from agents.integrations.smolagents._watch import call_after_agent_init, watch_memory, watch_of
from agents.memory import Memory, MemoryItem
from agents.memory.exceptions import ArgumentTypeError, InvalidArgumentError

# Values of these types cannot change while the executor holds the same object.
_IMMUTABLE: Final = frozenset({int, float, complex, str, bytes, bool, type(None)})
# Lists up to this long have their elements in a step's signature (images, tool calls).
_SIGNATURE_ELEMENTS: Final = 64


def _signature(step: Any) -> list[tuple[Any, ...]]:
    """Return what each of a step's fields is now: the value, and a list's length and elements.

    Comparing two signatures by identity tells, without encoding anything,
    which fields were set again or had a list grow, shrink or have an
    element replaced since the step was written.
    """
    out: list[tuple[Any, ...]] = []
    for name in field_names(step):
        value = getattr(step, name)
        if type(value) is list:
            count = len(value)
            out.append((value, count, *value) if count <= _SIGNATURE_ELEMENTS else (value, count))
        else:
            out.append((value,))
    return out


def _ids(step: Any) -> tuple[int, ...]:
    """Return the identities in :func:`_signature`, flat: equal tuples mean no field changed.

    The fields' ids come first, then each list's length and its elements'
    ids. The record keeps the signature's objects alive, so their ids
    cannot be reused by new objects while they are compared.
    """
    values = _getter(step)(step)
    ids = tuple(map(id, values))
    lists = [value for value in values if type(value) is list]
    if not lists:
        return ids
    tail: list[int] = []
    for value in lists:
        tail.append(len(value))
        if len(value) <= _SIGNATURE_ELEMENTS:
            tail.extend(map(id, value))
    return ids + tuple(tail)


_GETTERS: dict[type, Any] = {}


def _getter(step: Any) -> Any:
    """Return a function that reads all of a step's fields at once, as a tuple (made once per class)."""
    cls = type(step)
    getter = _GETTERS.get(cls)
    if getter is None:
        names = field_names(step)
        read = operator.attrgetter(*names)
        getter = _GETTERS[cls] = read if len(names) > 1 else (lambda s: (read(s),))
    return getter


def _same(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if a is not b and not (type(a) is int and type(b) is int and a == b):
            return False
    return True


def _changed_names(
    step: Any, old: list[tuple[Any, ...]], new: list[tuple[Any, ...]]
) -> frozenset[str]:
    names = field_names(step)
    if len(old) != len(new):
        return frozenset(names)
    return frozenset(
        name for name, was, now in zip(names, old, new, strict=True) if not _same(was, now)
    )


def _differs(stored: Any, value: Any) -> bool:
    try:
        return bool(stored != value)
    except Exception:  # values without a truthful == (arrays): write them again
        return True


def _ends_run(step: Any, sm: Any) -> bool:
    """Return whether ``step`` is the last of an ``agent.run``: the final answer, or the step at max_steps.

    smolagents calls step callbacks with its ``FinalAnswerStep`` only since
    late 2025; the final action step is recognised on every version.
    """
    if isinstance(step, sm.memory.FinalAnswerStep):
        return True
    if not isinstance(step, sm.memory.ActionStep):
        return False
    return bool(step.is_final_answer) or isinstance(step.error, sm.utils.AgentMaxStepsError)


class _Record:
    """A step of the current run, the item it was written to, and its signature when written."""

    __slots__ = ("ids", "item", "kind", "listed", "signature", "step")

    def __init__(self, step: Any, kind: str, item: MemoryItem, *, listed: bool) -> None:
        self.step = step
        self.kind = kind
        self.item = item
        self.listed = listed  # seen in agent.memory.steps (not only passed as the current step)
        self.signature = _signature(step)
        self.ids = _ids(step)


class SmolagentsRecorder:
    """Write a smolagents agent's memory to a kvmemory ``Memory`` as it changes.

    Pass it as a step callback (``ToolCallingAgent(..., step_callbacks=[recorder])``)
    or call :meth:`attach`. Either way it follows ``agent.memory`` however
    steps get there: ``agent.run()``, ``agent.step()`` in a loop of your own
    (smolagents fires no step callbacks there), and steps appended,
    inserted, replaced, deleted or cleared through ``agent.memory.steps``, or
    a new list assigned to it, each written as it happens (see
    :meth:`attach`). Creating a recorder makes every smolagents agent given
    it in ``step_callbacks`` attach it when the agent is made. In a step it
    writes after every other callback of that step has run: it registers
    itself once more for every step kind (as :meth:`attach` does) to run
    last and writes from there, so a screenshot a later callback attaches
    is in the record.

    Each time it runs it writes, in order, the steps of ``agent.memory`` it
    has not written yet (the task step of each run included), the step being
    finalized, the system prompt whenever it changes, and for a
    ``CodeAgent`` the Python variables its code changed. It also looks again
    at the ``recheck_last`` steps written before and, at the end of each
    ``agent.run``, at every step written during it, and writes what changed
    since (a callback that clears older steps' images). A new
    ``agent.memory.steps`` list (``agent.run(task)`` resets it) starts a new
    ``run``. The recorder's own work per step is the same whatever the
    length of the run; the model inputs smolagents keeps with each step grow
    with it (see ``keep_model_inputs``).

    A value that cannot be saved (``range(3)``, an instance of a class the
    agent's code defined) never stops the run: the rest of the step is
    written, the field is named in the item's ``left_out`` (variables in
    ``python_state_left_out``) and an :class:`UnsavedValueWarning` says so.

    Args:
        memory: Where the steps go; a stored memory (``open_memory``) makes them durable.
        recheck_last: How many earlier steps to compare again at each step (0: only at the end of a run).
        keep_model_inputs: Write each step's ``model_input_messages``. They hold
            the whole history so far, so writing them costs more at each step of
            a long run; without them a restored step has ``None`` there, and
            the model's next input is the same (smolagents builds it from the
            other fields).

    Raises:
        InvalidArgumentError: if ``recheck_last`` is not a whole number of at
            least 0, or ``keep_model_inputs`` not a bool.
        CorruptSessionError: if an item of ``memory`` recorded before holds a
            ``run`` that is not an int from 0 to 2**63 - 1 (naming the item).
    """

    def __init__(
        self, memory: Memory, *, recheck_last: int = 4, keep_model_inputs: bool = True
    ) -> None:
        if type(recheck_last) is not int or recheck_last < 0:
            msg = f"recheck_last must be a whole number of at least 0, got {recheck_last!r}."
            raise InvalidArgumentError(msg)
        if not isinstance(keep_model_inputs, bool):
            msg = f"keep_model_inputs must be True or False, got {keep_model_inputs!r}."
            raise InvalidArgumentError(msg)
        self.memory = memory
        self.recheck_last = recheck_last
        self.keep_model_inputs = keep_model_inputs
        self._skip = frozenset() if keep_model_inputs else frozenset({"model_input_messages"})
        self.run = max((number for number, _ in recorded(memory)), default=0)
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        self._start_run(None)
        call_after_agent_init(_attach_listed)

    def _start_run(self, steps: list[Any] | None) -> None:
        self._steps = steps  # the agent's steps list this run writes
        self._rearranged = (
            False  # steps were changed before the end of the list since the last write
        )
        self._seen = 0  # how many entries of it were looked at
        self._last: Any = None  # the entry at _seen - 1 then
        self._records: dict[int, _Record] = {}  # id(step) -> record
        self._order: list[_Record] = []
        self._swept = 0  # records before this were compared at the end of an agent.run
        self._system: str | None = None
        # A CodeAgent's variables as last written: name -> (value, its encoding or None).
        self._vars: dict[str, tuple[Any, bytes | None]] = {}

    def attach(self, agent: Any) -> None:
        """Follow ``agent``'s memory: watch its steps, and register for every step kind after the callbacks registered so far.

        Watching makes ``agent.memory.steps`` a subclass of ``list`` (of the
        list's own class) whose changing methods call :meth:`write` after
        they ran, and gives ``agent.memory`` (an instance of a subclass of its
        class) a ``steps`` attribute that puts a list assigned to it into a
        new watched list with the same steps and calls :meth:`write`. Copies
        and pickles of both are of smolagents' own classes. A store error
        comes out of the call that changed the list (the change stays made;
        the next write writes it). A memory whose class cannot be changed
        (``__slots__``) is not watched: then steps are written at step
        callbacks and :meth:`write` calls only.
        """
        watch_memory(agent, self._steps_changed)
        if agent in self._attached:
            return
        sm = load_smolagents()
        agent.step_callbacks.register(sm.memory.MemoryStep, self._record)
        self._attached.add(agent)

    def __call__(self, memory_step: Any, agent: Any = None) -> None:
        """Make sure the recorder runs after every other callback of each step (see the class).

        Raises:
            ArgumentTypeError: if smolagents did not pass the agent (register the recorder as a step callback).
        """
        if agent is None:
            msg = "SmolagentsRecorder needs the agent: register it as a step callback (step_callbacks=[recorder] or recorder.attach(agent))."
            raise ArgumentTypeError(msg)
        # smolagents calls the callbacks of the step's class before those of
        # MemoryStep, so the registration made here runs later in this very
        # step, after the callbacks listed behind the recorder.
        self.attach(agent)

    def _record(self, memory_step: Any, agent: Any = None) -> None:
        if agent is None:
            msg = "SmolagentsRecorder needs the agent: register it as a step callback (step_callbacks=[recorder] or recorder.attach(agent))."
            raise ArgumentTypeError(msg)
        self.write(agent, memory_step)

    def write(self, agent: Any, current: Any = None) -> None:
        """Write what ``agent.memory`` holds that is not written yet, then ``current`` (a step being finalized).

        Also writes what changed in the last ``recheck_last`` steps written
        before and, when ``current`` ends an ``agent.run`` (smolagents'
        ``FinalAnswerStep``, the final-answer action step or the one at
        ``max_steps``), in every step written since the last run ended.
        Values that cannot be saved are left out (see the class).

        Raises:
            StoreError: if a stored memory cannot write (the agent's steps are unchanged).
        """
        sm = load_smolagents()
        steps: list[Any] = agent.memory.steps
        if steps is not self._steps and watch_memory(agent, self._steps_changed):
            steps = agent.memory.steps  # now the watched list
        moved = False  # whether steps may have changed places (a full pass over them follows)
        if steps is not self._steps:
            self._start_run(steps)
            self.run += 1
        elif (
            self._rearranged
            or self._seen > len(steps)
            or (self._seen and steps[self._seen - 1] is not self._last)
        ):
            self._forget_removed(steps)
            moved = True
        step_key = self.memory.step_key
        # What this call changes, to undo if the memory refuses the items (a store error).
        undo = (self._seen, self._last, self._system, self._swept, dict(self._vars))
        items: list[MemoryItem] = []
        system = agent.memory.system_prompt.system_prompt
        if system != self._system:
            items.append(MemoryItem(kind="system_prompt", run=self.run, system_prompt=system))
            self._system = system
        before = len(self._order)
        for step in steps[self._seen :]:
            record = self._records.get(id(step))
            if record is not None:
                record.listed = True
            else:
                self._add(step, sm, step_key, items, listed=True)
        if steps:
            self._seen = len(steps)
            self._last = steps[-1]
        if current is not None and id(current) not in self._records:
            self._add(current, sm, step_key, items, listed=False)
        added = self._order[before:]
        actions = [record for record in added if record.kind == "action"]
        if actions:
            newest = actions[-1]
            newest.item.add_values_from_dict(self._python_state(agent, newest))
        start = max(before - self.recheck_last, 0)
        if _ends_run(current, sm):
            start = min(start, self._swept)
            self._swept = len(self._order)
        changed: list[tuple[_Record, list[tuple[Any, ...]], frozenset[str]]] = []
        for record in self._order[start:before]:
            ids = _ids(record.step)
            if ids == record.ids:
                continue
            now = _signature(record.step)
            names = _changed_names(record.step, record.signature, now)
            if names:
                changed.append((record, now, names))
            else:
                record.signature, record.ids = now, ids
        if items:
            try:
                self.memory.add_memory_items(items)
            except BaseException:
                # Nothing was added: forget this call's steps, so the next call writes them.
                for record in self._order[before:]:
                    del self._records[id(record.step)]
                del self._order[before:]
                self._seen, self._last, self._system, self._swept, self._vars = undo
                raise
        for record, now, names in changed:
            self._update(record, step_key, names)
            record.signature, record.ids = now, _ids(record.step)
        if moved:
            self._keep_order(steps)
        self._rearranged = False

    def _steps_changed(self, agent: Any, rearranged: bool) -> None:
        """Write a change to the watched ``agent.memory.steps`` (``rearranged``: not only at its end)."""
        self._rearranged = self._rearranged or rearranged
        self.write(agent)

    def _keep_order(self, steps: list[Any]) -> None:
        """Write again, in the agent's order, the items from the first step that changed places.

        A step inserted or replaced before the end of ``agent.memory.steps``
        (or a sort) was written after the others; its item and those that
        should follow it are deleted and added again in the list's order.
        """
        listed = {id(step): self._records[id(step)] for step in steps if id(step) in self._records}
        wanted = [*listed.values(), *(record for record in self._order if not record.listed)]
        if len(wanted) != len(self._order):
            return  # not one record per step (cannot happen after _forget_removed): keep the order
        first = next(
            (
                i
                for i, (was, now) in enumerate(zip(self._order, wanted, strict=True))
                if was is not now
            ),
            None,
        )
        if first is None:
            return
        self.memory.delete_items([record.item for record in self._order[first:]])
        fresh = [MemoryItem(**record.item.to_dict()) for record in wanted[first:]]
        self.memory.add_memory_items(fresh)
        for record, item in zip(wanted[first:], fresh, strict=True):
            record.item = item
        self._order = wanted
        self._swept = min(self._swept, first)

    def sync(self, agent: Any) -> None:
        """Write every change to the steps of the run since they were written, comparing each in full.

        For changes the recorder does not see by itself: a step older than
        ``recheck_last`` changed between two ``agent.run`` calls, or an
        object changed in place (an image's pixels). Costs one encoding of
        every step of the run.
        """
        self.write(agent)
        step_key = self.memory.step_key
        for record in self._order:
            self._update(record, step_key)

    def _add(
        self, step: Any, sm: Any, step_key: str, items: list[MemoryItem], *, listed: bool
    ) -> None:
        kind = kind_of(step, sm)
        if kind is None:
            return
        fields, left_out = step_fields(step, kind, self.run, step_key, skip=self._skip)
        if left_out:
            self._warn_fields(step, kind, left_out)
        record = _Record(step, kind, MemoryItem(**fields), listed=listed)
        self._records[id(step)] = record
        self._order.append(record)
        items.append(record.item)

    def _update(self, record: _Record, step_key: str, names: frozenset[str] | None = None) -> None:
        """Write what changed in a recorded step: the fields ``names`` (default: all of them)."""
        item = record.item
        step = record.step
        fields, left_out = step_fields(
            step, record.kind, self.run, step_key, names, skip=self._skip
        )
        read = field_names(step) if names is None else names
        keys = {step_key if name == "step_number" else name for name in read}
        stored = item.get_value("left_out")
        before = dict(stored) if isinstance(stored, dict) else {}
        after = {
            key: why for key, why in before.items() if key.split(".")[0] not in keys
        } | left_out
        if any(before.get(key) != why for key, why in left_out.items()):
            self._warn_fields(step, record.kind, left_out)
        if names is None:
            fields.pop("left_out", None)
            keys |= {key for key in item.attributes if key not in OWN_FIELDS}
        for key, value in fields.items():
            if key not in item or _differs(item[key], value):
                item.set_value(key, value)
        for key in keys:
            if key not in fields and key != "left_out" and key in item:
                item.delete_value(key)
        if after != before:
            if after:
                item.set_value("left_out", after)
            else:
                item.delete_value("left_out")
        if names is None:
            record.signature, record.ids = _signature(step), _ids(step)

    def _forget_removed(self, steps: list[Any]) -> None:
        """Delete the items of steps taken out of ``agent.memory.steps`` (found by one pass over it)."""
        present = {id(step) for step in steps}
        gone = [r for r in self._order if r.listed and id(r.step) not in present]
        if gone:
            self.memory.delete_items([record.item for record in gone])
            kept = [r for r in self._order if not (r.listed and id(r.step) not in present)]
            self._order = kept
            self._records = {id(record.step): record for record in kept}
        self._swept = min(self._swept, len(self._order))
        self._seen = 0
        self._last = None

    def _where(self, step: Any, kind: str) -> str:
        number = getattr(step, "step_number", None)
        return f"{kind} step {number}" if number is not None else f"{kind} step"

    def _warn_fields(self, step: Any, kind: str, left_out: Mapping[str, str]) -> None:
        names = ", ".join(f"{name!r} (got {why})" for name, why in left_out.items())
        msg = (
            f"Field(s) {names} of {self._where(step, kind)} of run {self.run} cannot be saved; "
            "the rest of the step was written, the item's 'left_out' names them, and a restored "
            "step has their defaults (None). Keep such values as text, numbers, lists or dicts to save them."
        )
        warnings.warn(msg, UnsavedValueWarning, stacklevel=4)

    def _python_state(self, agent: Any, record: _Record) -> dict[str, Any]:
        """Return the fields that record how the agent's Python variables changed since the last action step."""
        executor = getattr(agent, "python_executor", None)
        state = getattr(executor, "state", None)
        if not isinstance(state, dict):
            return {}  # not a CodeAgent, or an executor that keeps its state in another process
        changed: dict[str, Any] = {}
        left_out: dict[str, str] = {}
        present: set[str] = set()
        for name, value in list(state.items()):
            if type(name) is not str or name in EXECUTOR_INTERNALS:
                continue
            present.add(name)
            known = self._vars.get(name)
            if (
                known is not None
                and known[0] is value
                and (known[1] is None or type(value) in _IMMUTABLE)
            ):
                continue  # the same object: still unsaveable, or cannot have changed
            try:
                data = MemoryItem(v=value).to_json_bytes()
            except Exception:  # any failure means "cannot be saved": the run goes on
                left_out[name] = type_name(value)
                self._vars[name] = (value, None)
                continue
            if known is None or known[1] != data:
                changed[name] = MemoryItem.from_json(data)["v"]  # a copy, as a store keeps it
            self._vars[name] = (value, data)
        removed = [name for name in self._vars if name not in present]
        for name in removed:
            del self._vars[name]
        fields: dict[str, Any] = {}
        if changed:
            fields[STATE] = changed
        if removed:
            fields[STATE_REMOVED] = removed
        if left_out:
            fields[STATE_LEFT_OUT] = left_out
            names = ", ".join(f"{name!r} (got {why})" for name, why in left_out.items())
            msg = (
                f"Python variable(s) {names} of the CodeAgent after {self._where(record.step, 'action')} "
                f"of run {self.run} cannot be saved; the other variables were, the item's "
                f"{STATE_LEFT_OUT!r} names these, and after a restore they are undefined until the "
                "agent's code creates them again."
            )
            warnings.warn(msg, UnsavedValueWarning, stacklevel=4)
        return fields

    def restore(self, agent: Any, *, run: int | None = None) -> None:
        """Rebuild ``agent.memory`` (and a ``CodeAgent``'s Python variables) from the recorded run and go on recording it.

        After this, ``agent.run(next_task, reset=False)`` continues the run
        (the model sees the same messages it would have seen had the old
        process gone on), ``agent.replay()`` shows it, and ``agent.task`` is
        the run's last task. A ``CodeAgent`` with smolagents' local executor
        gets back the variables that were saved (see
        :func:`restore_python_state`); those that were not are named in an
        :class:`UnsavedValueWarning`.

        Args:
            agent: A new smolagents agent (its current memory is replaced).
            run: The run to restore (default: the newest).

        Raises:
            MissingDependencyError: if smolagents is not installed.
            CorruptSessionError: naming the item and field that cannot be read
                back as a step (see :func:`restore_steps`) or whose Python
                state is damaged; the agent is left as it was.
        """
        sm = load_smolagents()
        wanted, system, pairs = restored(self.memory, run, sm)
        if system is None and not pairs:
            self.attach(agent)  # nothing recorded: the agent's next run is the first
            return
        variables, left_out = restore_python_state(self.memory, run=wanted)
        executor: Any = getattr(agent, "python_executor", None)
        state = getattr(executor, "state", None)
        if isinstance(state, dict):
            check_names(variables, agent, executor, sm, wanted)
        watch_memory(agent, self._steps_changed)
        watch = watch_of(agent)
        with watch.quiet() if watch is not None else contextlib.nullcontext():
            agent.memory.steps = [step for _, step in pairs]
        steps = agent.memory.steps
        if system is not None:
            agent.memory.system_prompt = sm.memory.SystemPromptStep(system_prompt=system)
        tasks = [step.task for step in steps if isinstance(step, sm.memory.TaskStep)]
        if tasks:
            agent.task = tasks[-1]
        self._start_run(steps)
        self.run = wanted
        self._system = system
        for item, step in pairs:
            record = _Record(step, str(item.get_value("kind")), item, listed=True)
            self._records[id(step)] = record
            self._order.append(record)
        self._seen = len(steps)
        self._last = steps[-1] if steps else None
        self._swept = len(self._order)
        if isinstance(state, dict) and (variables or left_out):
            executor.send_variables(variables)
            self._vars = {
                name: (value, MemoryItem(v=value).to_json_bytes())
                for name, value in variables.items()
            }
            if left_out:
                names = ", ".join(f"{name!r} ({why})" for name, why in left_out.items())
                msg = (
                    f"Python variable(s) {names} of run {wanted} were not saved and are undefined "
                    "in the restored agent; a step that uses them fails until the agent's code "
                    "creates them again."
                )
                warnings.warn(msg, UnsavedValueWarning, stacklevel=2)
        self.attach(agent)


def _attach_listed(agent: Any, step_callbacks: Any) -> None:
    """Attach each recorder given in a new agent's ``step_callbacks`` (a list, or a dict of them by step class)."""
    if isinstance(step_callbacks, Mapping):
        given: list[Any] = []
        for value in step_callbacks.values():
            given.extend(value if isinstance(value, list) else [value])
    elif isinstance(step_callbacks, list):
        given = step_callbacks
    else:
        return
    for callback in given:
        if isinstance(callback, SmolagentsRecorder):
            callback.attach(agent)
