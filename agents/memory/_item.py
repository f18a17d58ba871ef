"""``MemoryItem``: one agent step as an ordered set of key-value fields.

Fields live in a per-instance dict, never on the class, so a key can be any
string (``"to_json"``, ``"Bounding Box"``) without shadowing a method. Typed
subclasses declare fields with annotations; declared fields are validated,
come first in :meth:`MemoryItem.to_dict`, and extra dynamic fields are still
accepted.

An item is two objects for the garbage collector: the instance (slots for its
watchers and its cached encoding verdict) and its fields dict. The layouts
that make it one were prototyped and cost more than they save
(``benchmarks/bench_item_study.py``; docs/format.md, "Why an item stays two
objects"). The wire format is ``_codec``'s; this module keeps only one item's
own wire form and the class registry that decoding names classes by, and
``_wire`` encodes and decodes items in batches.
"""

from __future__ import annotations

import collections
import contextlib
import copy as _copy
import importlib
import inspect
import itertools
import operator
import reprlib
import sys
import threading
import types
import typing
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, ValuesView
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, TypeAlias, TypeVar

import attrs
from typing_extensions import Self

from agents.memory import _codec
from agents.memory._codec import OnUnknownClass
from agents.memory._views import ItemAttributes
from agents.memory.exceptions import (
    ArgumentTypeError,
    CorruptSessionError,
    FieldAttributeError,
    FieldNotFoundError,
    FieldValidationError,
    InvalidKeyError,
    SerializationError,
)

if TYPE_CHECKING:
    from agents.memory._codec import OnUnencodable

__all__ = [
    "NOTHING",
    "FieldSpec",
    "FieldWatcher",
    "MemoryItem",
    "OnUnknownClass",
    "OwnedRef",
    "cached_verdict",
    "decode_item",
    "dumps_item",
    "field",
    "filter_fields",
    "item_class",
    "item_fields",
    "item_from_fields",
    "item_verdict",
    "item_wire_form",
    "items_from_fields",
    "items_from_mappings",
    "unwatch_items",
    "watch_items",
    "wire_alone",
]


ItemT = TypeVar("ItemT", bound="MemoryItem")


class _Nothing:
    """The sentinel for "no value given" where ``None`` is a legitimate value."""

    _instance: ClassVar[_Nothing | None] = None

    def __new__(cls) -> _Nothing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOTHING"

    def __reduce__(self) -> str:
        return "NOTHING"


NOTHING: Final = _Nothing()
"""The sentinel for "no value given", where ``None`` is a value a field can hold."""


class _Validator(Protocol):
    def __call__(self, instance: Any, attribute: Any, value: Any, /) -> Any: ...


@attrs.frozen
class FieldSpec:
    """A field declared on a typed ``MemoryItem`` subclass.

    ``name`` is filled in when the class is created. ``validator`` follows the
    attrs convention ``validator(item, spec, value)``, so ``attrs.validators``
    (``instance_of``, ``ge``, ``in_`` ...) work as they are.
    """

    name: str = ""
    annotation: Any = None
    default: Any = NOTHING
    factory: Callable[[], Any] | None = None
    validator: _Validator | None = None
    converter: Callable[[Any], Any] | None = None

    @property
    def required(self) -> bool:
        """Whether the field has neither a default nor a factory."""
        return self.default is NOTHING and self.factory is None

    def make_default(self) -> Any:
        """Return a fresh default value (calling the factory, if any)."""
        return self.factory() if self.factory is not None else self.default


def field(
    *,
    default: Any = NOTHING,
    factory: Callable[[], Any] | None = None,
    validator: _Validator | None = None,
    converter: Callable[[Any], Any] | None = None,
) -> Any:
    """Declare a field of a typed ``MemoryItem`` subclass with options.

    Example::

        class Step(MemoryItem):
            step: int
            cost: float = field(default=0.0, validator=attrs.validators.ge(0))
            tags: list[str] = field(factory=list)

    Args:
        default: The value used when the field is not given.
        factory: Called to make a fresh default (for mutable defaults).
        validator: ``validator(item, spec, value)``; raise to refuse a value.
        converter: Applied to every value before validation.

    Raises:
        ArgumentTypeError: if both ``default`` and ``factory`` are given.
    """
    if default is not NOTHING and factory is not None:
        msg = "field() takes either default= or factory=, not both."
        raise ArgumentTypeError(msg)
    return FieldSpec(default=default, factory=factory, validator=validator, converter=converter)


# Every MemoryItem subclass by "module:qualname", registered when the class is
# created. Loading resolves item classes here and nowhere else (unless the
# caller opts in to importing), so a session file cannot make the process
# import a module: the classes it can name are those the program defined.
_CLASSES: Final[dict[str, type[MemoryItem]]] = {}

# kvmemory's modules that define item classes and that agents.memory imports
# on first use only (see agents/memory/__init__.py).
_OWN_LAZY_MODULES: Final = frozenset({"agents.memory.blackboard"})


def item_class(
    path: str | None,
    *,
    on_unknown_class: OnUnknownClass = "error",
    trusted_import: bool = False,
    where: str = "the session",
) -> type[MemoryItem]:
    """Return the ``MemoryItem`` class stored under ``path`` (``None`` is the base).

    Classes are found among those already defined in this process (every
    subclass registers itself when it is created), so loading runs no code a
    file names. A class whose module the program has not imported is unknown
    unless ``trusted_import`` is set.

    Args:
        path: ``"module:QualName"`` as written in the session.
        on_unknown_class: ``"base"`` returns ``MemoryItem`` for an unknown
            class instead of raising; its fields load, its class is lost.
        trusted_import: Import the module named by ``path`` when the class is
            not defined yet. This runs that module's code: only for input you trust.
        where: Names the item in error messages.

    Raises:
        CorruptSessionError: if the class is unknown or not a ``MemoryItem``.
    """
    if path is None:
        return MemoryItem
    cls = _CLASSES.get(path)
    if cls is not None:
        return cls
    module = path.partition(":")[0]
    if module in _OWN_LAZY_MODULES:
        # kvmemory's own item classes (ImageMemoryItem) are known without an
        # import by the caller: import agents.memory loads their module on first use.
        importlib.import_module(module)
        cls = _CLASSES.get(path)
        if cls is not None:
            return cls
    if not trusted_import:
        if on_unknown_class == "base":
            return MemoryItem
        msg = (
            f"Item class {path!r} named by {where} is not defined in this process; import the "
            "module that defines it before loading, pass on_unknown_class='base' to load its "
            "fields as a plain MemoryItem, or pass trusted_import=True to import it by name "
            "(only for input you trust). Nothing was loaded."
        )
        raise CorruptSessionError(msg)
    try:
        found = _codec.import_class(path, where=where)
    except CorruptSessionError:
        if on_unknown_class == "base":
            return MemoryItem
        raise
    if not (isinstance(found, type) and issubclass(found, MemoryItem)):
        msg = f"Class {path!r} named by {where} is not a MemoryItem subclass; nothing was loaded."
        raise CorruptSessionError(msg)
    return found


_REPR: Final = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 8


def _key_error(key: object) -> InvalidKeyError:
    msg = f"Field keys must be strings, got {key!r} ({type(key).__name__}); convert the key with str() first."
    return InvalidKeyError(msg)


def _check_keys(fields: Mapping[Any, Any]) -> None:
    # str.join runs in C and raises TypeError on the first non-string key, which
    # is much faster than a Python loop over the keys of every item.
    try:
        "".join(fields)
    except TypeError:
        for key in fields:
            if not isinstance(key, str):
                raise _key_error(key) from None
        raise  # pragma: no cover - join failed for a reason other than a key


def _exact_str_keys(fields: Iterable[Any]) -> bool:
    """Return whether every key is an exact ``str`` (a loop: type() is a specialised call in it)."""
    for key in fields:  # noqa: SIM110 - all() of a generator is twice as slow on a dozen keys
        if type(key) is not str:
            return False
    return True


class FieldWatcher(Protocol):
    """Told of each field change of a watched item: ``watcher(item, key, old, new)``."""

    def __call__(self, item: MemoryItem, key: str, old: Any, new: Any, /) -> object: ...


WatcherRef: TypeAlias = "Callable[[], FieldWatcher | None]"
"""How an item reaches a watcher: a call that returns it, or ``None`` once it is gone."""


class OwnedRef(weakref.WeakMethod):  # type: ignore[type-arg]  # WeakMethod is generic only in the stubs
    """A weak reference to an owner's watcher method that also names the owner (by ``id``).

    An item watched by one owner through such a ref stores the ref alone,
    not the owner's id beside it: building a memory's step index then writes
    one slot per item, not two.
    """

    __slots__ = ("owner_key",)
    owner_key: int

    def __new__(cls, method: Callable[..., Any], owner: object) -> Self:
        self = super().__new__(cls, method)
        self.owner_key = id(owner)
        return self

    def __init__(self, method: Callable[..., Any], owner: object) -> None:
        # weakref.ref.__init__ takes (object, callback); the owner is no callback.
        super().__init__(method)  # type: ignore[call-arg]  # the stubs give WeakMethod no __init__


class MemoryItem:
    """One record of an agent step: free-form fields in insertion order.

    ``MemoryItem(step=3, action="click")`` sets fields directly; the UFO calls
    (``set_value``, ``add_values_from_dict``, ``get_value`` ...) work as in UFO.
    Fields are read with ``item.get_value(key)``, ``item[key]`` or, for keys that
    are identifiers and not method names, ``item.key``.
    """

    # _owners: None, the one owner's watcher ref (its owner's id in _owner_key),
    # or {owner id: watcher ref} for several owners. One owner, the common case,
    # costs no object per item.
    __slots__ = ("_fields", "_owner_key", "_owners", "_plain")

    _declared: ClassVar[dict[str, FieldSpec]] = {}
    _kv_ready: ClassVar[bool]
    _class_path: ClassVar[str | None] = None
    _type_checks: ClassVar[dict[str, tuple[type, ...] | None] | None] = None

    if TYPE_CHECKING:
        _fields: dict[str, Any]
        _owners: WatcherRef | dict[int, WatcherRef] | None
        _owner_key: int
        _plain: _codec.PlainVerdict | None

    def __init__(self, /, **fields: Any) -> None:
        if self._declared:
            fields = _with_declared(self, fields)
        _set_fields(self, fields)
        _set_owners(self, None)
        _set_plain(self, None)

    # -- typed subclasses ---------------------------------------------------

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = dict(cls._declared)
        for name, annotation in inspect.get_annotations(cls).items():
            if name.startswith("_") or _is_classvar(annotation):
                continue
            raw = cls.__dict__.get(name, NOTHING)
            spec = raw if isinstance(raw, FieldSpec) else FieldSpec(default=raw)
            declared[name] = attrs.evolve(spec, name=name, annotation=annotation)
        # Defaults stay class attributes until the class is first used (see
        # _finish_class), so that a class decorator such as @dataclass sees them.
        cls._declared = declared
        cls._type_checks = None
        cls._class_path = _codec.class_path(cls)
        _CLASSES[cls._class_path] = cls
        if cls.__new__ is object.__new__:
            # Subclasses only: the base class keeps object.__new__, the fast path.
            type.__setattr__(cls, "__new__", staticmethod(_subclass_new))

    @classmethod
    def declared_fields(cls) -> dict[str, FieldSpec]:
        """Return the fields declared by this class and its bases, in order.

        A ``@dataclass`` subclass declares none: its own ``__init__`` sets its fields.
        """
        if "_kv_ready" not in cls.__dict__:
            _finish_class(cls)
        return dict(cls._declared)

    # -- construction helpers ------------------------------------------------

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Self:
        """Build an item that takes ownership of ``fields`` (keys already checked)."""
        if "_kv_ready" not in cls.__dict__:
            _finish_class(cls)
        if cls._declared:
            return cls(**fields)
        item = _new(cls)
        _set_fields(item, fields)
        _set_owners(item, None)
        _set_plain(item, None)
        return item

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Self:
        """Create an item of this class from a mapping of fields.

        Raises:
            InvalidKeyError: if a key is not a string.
            FieldValidationError: if a declared field is missing or invalid.
        """
        _check_keys(data)
        return cls._from_fields(dict(data))

    @classmethod
    def from_json(
        cls,
        data: str | bytes,
        *,
        on_unknown_class: OnUnknownClass = "error",
        trusted_import: bool = False,
    ) -> MemoryItem:
        """Create an item from the JSON of :meth:`to_json` or :meth:`to_json_bytes`.

        Type tags are decoded wherever they are. Written by :meth:`to_json_bytes`,
        the item comes back as the class it was written from, if that class is
        defined in this process (see ``docs/format.md``).

        Args:
            data: The JSON text.
            on_unknown_class: ``"base"`` loads an item of an unknown class as a
                plain ``MemoryItem`` (and an unknown enum as its value) instead of raising.
            trusted_import: Import modules named in ``data`` to find their
                classes. This runs their code: only for input you trust.

        Raises:
            CorruptSessionError: if ``data`` is not an encoded item, naming the field's path.
        """
        _codec.check_on_unknown_class(on_unknown_class)
        wire = _codec.loads(data, source="item JSON")
        if type(wire) is dict and _codec.TAG not in wire:
            # to_json writes type tags in place, so walk the values of a plain object too.
            fields = _codec.decode_fields(
                wire,
                where="item JSON",
                on_unknown_class=on_unknown_class,
                trusted_import=trusted_import,
            )
            return item_from_fields(fields)
        return decode_item(
            wire,
            where="item JSON",
            on_unknown_class=on_unknown_class,
            trusted_import=trusted_import,
        )

    # -- UFO's API -----------------------------------------------------------

    def set_value(self, key: str, value: Any) -> None:
        """Set the field ``key`` to ``value``.

        Raises:
            InvalidKeyError: if ``key`` is not a string.
            FieldValidationError: if ``key`` is a declared field and ``value`` is invalid.
        """
        if type(key) is not str:
            if not isinstance(key, str):
                raise _key_error(key)
            key = str(key)
        spec = self._declared.get(key)
        if spec is not None:
            value = _validated(self, spec, value)
        self._store(key, value)

    def _store(self, key: str, value: Any) -> None:
        """Set a checked field and tell the watchers."""
        fields = self._fields
        owners = self._owners
        _set_plain(self, None)
        if owners is not None:
            old = fields.get(key, NOTHING)
            fields[key] = value
            # The owners read once above are those told: another thread may
            # unwatch in between, and reading them again could find none.
            _tell(self, owners, key, old, value)
        else:
            fields[key] = value

    def add_values_from_dict(self, values: Mapping[str, Any]) -> None:
        """Set every field of ``values``, all or nothing.

        Every key and every declared field's value is checked before any
        field is set.

        Raises:
            InvalidKeyError: if a key is not a string.
            FieldValidationError: if a declared field gets an invalid value.
        """
        exact_str_keys = _exact_str_keys(values)
        if not exact_str_keys:
            _check_keys(values)  # names a key that is not a str; str subclasses pass
        declared = self._declared
        checked = (
            {
                key: _validated(self, declared[key], value)
                for key, value in values.items()
                if key in declared
            }
            if declared
            else None
        )
        if self._owners is None and exact_str_keys:
            # One update in C: no watcher to tell, every key an exact str.
            _set_plain(self, None)
            fields = self._fields
            fields.update(values)
            if checked:
                fields.update(checked)
            return
        for key, value in list(values.items()):
            if checked and key in checked:
                value = checked[key]
            self._store(str(key), value)

    set_values_from_dict = add_values_from_dict
    """The older UFO name of :meth:`add_values_from_dict`."""

    def from_dict(self, data: Mapping[str, Any]) -> None:
        """Merge the fields of ``data`` into this item (UFO's meaning of the name)."""
        self.add_values_from_dict(data)

    def get_value(self, key: str, default: Any = None) -> Any:
        """Return the value of field ``key``, or ``default`` (``None``) when it is missing."""
        return self._fields.get(key, default)

    def get_values(self, keys: Iterable[str]) -> dict[str, Any]:
        """Return ``{key: value}`` for each of ``keys``; missing keys map to ``None``."""
        fields = self._fields
        return {key: fields.get(key) for key in keys}

    def filter(self, keys: Iterable[str] = ()) -> dict[str, Any]:
        """Return a new dict of the fields among ``keys`` that this item holds, in the item's order.

        The order is the item's, as in UFO, whatever the order of ``keys``
        (:func:`agents.memory.prompt.project` gives the order of the keys).
        """
        return filter_fields(self._fields, keys)

    def to_dict(self) -> dict[str, Any]:
        """Return a new dict of all fields in insertion order (declared fields first)."""
        return dict(self._fields)

    def to_json(self, *, on_unencodable: OnUnencodable = "error", step_key: str = "step") -> str:
        """Return the fields as UFO writes them: ``json.dumps(item.to_dict())``.

        Python's ``json.dumps`` defaults (``", "`` and ``": "`` separators,
        non-ASCII escaped, ``str``/``int`` enums as their values, tuples as
        lists); a value ``json.dumps`` refuses (a ``datetime``, a ``set``) is
        written as its type tag instead of failing. :meth:`from_json` reads it
        back as a plain ``MemoryItem``; :meth:`to_json_bytes` keeps the class
        and every type.

        Args:
            on_unencodable: ``"error"`` (default), ``"repr"`` or ``"drop"``; see ``docs/format.md``.
            step_key: The key naming the step in error messages.

        Raises:
            SerializationError: if a value cannot be encoded under the policy.
        """
        # json.dumps of a one-element list is "[" + json.dumps(element) + "]".
        return _codec.dumps_ufo_rows(
            [self._fields], step_key=step_key, on_unencodable=on_unencodable
        )[1:-1]

    def to_json_bytes(
        self, *, on_unencodable: OnUnencodable = "error", step_key: str = "step"
    ) -> bytes:
        """Return the item in kvmemory's lossless form: compact UTF-8 JSON with type tags.

        :meth:`from_json` gives back an equal item of the same class (tuples,
        enums, dates and the typed class included). This is the form session
        files and stores use.

        Args:
            on_unencodable: ``"error"`` (default), ``"repr"`` or ``"drop"``; see ``docs/format.md``.
            step_key: The key naming the step in error messages.

        Raises:
            SerializationError: if a value cannot be encoded under the policy.
        """
        return dumps_item(self, step_key=step_key, on_unencodable=on_unencodable)

    @property
    def attributes(self) -> list[str]:
        """The keys of this item's fields, in order (a new list; changing it raises ``ReadOnlyViewError``)."""
        return ItemAttributes(self._fields)

    # -- removal and mapping protocol ----------------------------------------

    def delete_value(self, key: str) -> Any:
        """Remove field ``key`` and return its value.

        Raises:
            FieldNotFoundError: if the item holds no field ``key``.
        """
        fields = self._fields
        if key not in fields:
            msg = f"{type(self).__name__} has no field {key!r}; its fields are {list(fields)}."
            raise FieldNotFoundError(msg)
        _set_plain(self, None)
        owners = self._owners  # one read: see _store
        if owners is None:
            return fields.pop(key)
        before = dict(fields)
        value = fields.pop(key)
        try:
            _tell(self, owners, key, value, NOTHING)
        except BaseException:
            # Put the field back where it was, not at the end.
            fields.clear()
            fields.update(before)
            raise
        return value

    def keys(self) -> list[str]:
        """Return the field keys (so that ``dict(item)`` works)."""
        return list(self._fields)

    def __getitem__(self, key: str) -> Any:
        try:
            return self._fields[key]
        except KeyError:
            msg = (
                f"{type(self).__name__} has no field {key!r}; its fields are {list(self._fields)}."
            )
            raise FieldNotFoundError(msg) from None

    def __setitem__(self, key: str, value: Any) -> None:
        self.set_value(key, value)

    def __delitem__(self, key: str) -> None:
        self.delete_value(key)

    def __contains__(self, key: object) -> bool:
        return key in self._fields

    def __len__(self) -> int:
        return len(self._fields)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._fields))

    # -- attribute access ----------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails, so methods always win.
        if name.startswith("_"):
            raise FieldAttributeError(name)
        try:
            return self._fields[name]
        except KeyError:
            msg = f"{type(self).__name__} has no field {name!r}; use get_value({name!r}) to get None for a missing field."
            raise FieldAttributeError(msg) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.set_value(name, value)

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            object.__delattr__(self, name)
        else:
            self.delete_value(name)

    # -- value semantics -----------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]  # mutable: equal items may change

    def __repr__(self) -> str:
        plain: list[str] = []
        other: list[str] = []
        for key, value in self._fields.items():
            if key.isidentifier() and not key.startswith("_"):
                plain.append(f"{key}={_REPR.repr(value)}")
            else:
                other.append(f"{key!r}: {_REPR.repr(value)}")
        if other:
            plain.append("**{" + ", ".join(other) + "}")
        return f"{type(self).__name__}({', '.join(plain)})"

    def copy(self) -> Self:
        """Return a new item of the same class with a shallow copy of the fields."""
        return type(self)._from_fields(dict(self._fields))

    def __copy__(self) -> Self:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return type(self)._from_fields(_copy.deepcopy(self._fields, memo))

    def __reduce__(self) -> tuple[Any, ...]:
        # Only the class and the fields travel; owner links and caches do not.
        return (_restore, (type(self), dict(self._fields)))

    # -- watchers ----------------------------------------------------------------

    def watch(self, owner: object, callback_ref: WatcherRef) -> None:
        """Call a watcher after each change of one of this item's fields, until :meth:`unwatch`.

        This is how a ``Memory`` keeps its step index and its writer (a durable
        store) in step with items that change after they were added. The
        watcher is called as ``watcher(item, key, old, new)`` once the field
        holds its new value (``old`` or ``new`` is ``NOTHING`` when the field
        was added or deleted). If it raises, the field is put back as it was,
        the watchers already told are told of the change back, and the error
        propagates: a change a store refused is not kept in RAM either.

        Args:
            owner: The watcher's owner; one watcher per owner (a second call replaces the first).
            callback_ref: A zero-argument callable returning the watcher, or
                ``None`` once it is gone: pass a ``weakref.WeakMethod`` so that
                the item does not keep its owner alive.
        """
        with _WATCH_LOCK:
            _add_watcher(self, id(owner), callback_ref)

    def unwatch(self, owner: object) -> None:
        """Stop calling ``owner``'s watcher (no error if it had none)."""
        if self._owners is None:
            return
        with _WATCH_LOCK:
            _drop_watcher(self, id(owner))


_new = object.__new__
# Held while an item's owners change (watch, unwatch, watch_items), so that
# two owners in two threads never lose each other's watcher. Reading the
# owners to tell them of a change needs no lock (see _store).
_WATCH_LOCK: Final = threading.Lock()
_consume: Callable[[Iterable[Any]], None] = collections.deque(maxlen=0).extend
_set_fields = MemoryItem.__dict__["_fields"].__set__
_set_owners = MemoryItem.__dict__["_owners"].__set__
_set_owner_key = MemoryItem.__dict__["_owner_key"].__set__
_set_plain = MemoryItem.__dict__["_plain"].__set__
_owners_of: Callable[[MemoryItem], Any] = operator.attrgetter("_owners")
# The live field dict of an item, for the package's hot loops (step index,
# projections, stores). Read it, never change it: a change made through it
# bypasses the item's watchers, so no memory or store would hear of it.
item_fields: Callable[[MemoryItem], dict[str, Any]] = operator.attrgetter("_fields")
cached_verdict: Callable[[MemoryItem], _codec.PlainVerdict | None] = operator.attrgetter("_plain")
"""An item's cached verdict on its fields (``None``: not judged since its last change)."""
MemoryItem._kv_ready = True


def _type_checks(cls: type[MemoryItem]) -> dict[str, tuple[type, ...] | None]:
    """Return the ``isinstance`` check of each declared field of ``cls``, worked out on first use."""
    checks = cls._type_checks
    if checks is None:
        checks = {
            name: _runtime_types(_resolve_hint(cls, spec.annotation))
            for name, spec in cls._declared.items()
        }
        cls._type_checks = checks
    return checks


def _with_declared(item: MemoryItem, given: dict[str, Any]) -> dict[str, Any]:
    """Return ``given`` with the declared fields of ``item``'s class first, validated or defaulted."""
    fields: dict[str, Any] = {}
    for name, spec in item._declared.items():
        if name in given:
            fields[name] = _validated(item, spec, given.pop(name))
        elif spec.required:
            msg = (
                f"{type(item).__name__} requires field {name!r}; pass {name}=... when creating it."
            )
            raise FieldValidationError(msg)
        else:
            fields[name] = spec.make_default()
    fields.update(given)
    return fields


def _validated(item: MemoryItem, spec: FieldSpec, value: Any) -> Any:
    """Return ``value`` converted and checked for the declared field ``spec`` of ``item``."""
    if spec.converter is not None:
        try:
            value = spec.converter(value)
        except Exception as exc:  # any error of a user's converter refuses the value
            msg = f"Field {spec.name!r} of {type(item).__name__} could not convert {_REPR.repr(value)}: {type(exc).__name__}: {exc}"
            raise FieldValidationError(msg) from exc
    expected = _type_checks(type(item)).get(spec.name)
    if expected is not None and not isinstance(value, expected):
        names = " or ".join(t.__name__ for t in expected)
        msg = (
            f"Field {spec.name!r} of {type(item).__name__} must be {names}, "
            f"got {_REPR.repr(value)} ({type(value).__name__})."
        )
        raise FieldValidationError(msg)
    if spec.validator is not None:
        try:
            spec.validator(item, spec, value)
        except (TypeError, ValueError) as exc:
            msg = f"Field {spec.name!r} of {type(item).__name__} refused {_REPR.repr(value)}: {exc}"
            raise FieldValidationError(msg) from exc
    return value


def item_verdict(item: MemoryItem) -> _codec.PlainVerdict:
    """Return whether ``item``'s fields are written as they are (see ``_codec.plain_verdict``).

    The verdict is kept until a field is set or deleted.
    """
    plain = item._plain
    if plain is None:
        plain = item._class_path is None and _codec.plain_verdict(item._fields)
        _set_plain(item, plain)
    return plain


def item_wire_form(
    item: MemoryItem, step_key: str, on_unencodable: OnUnencodable, *, walk: bool = False
) -> dict[str, Any]:
    """Return the JSON-native wire form of ``item`` (see ``_codec.encode_fields``).

    Items of plain JSON scalars are returned as they are (the verdict is
    cached until the item changes); others are walked, and so is every
    item when ``walk=True``, which also tags integers beyond 64 bits.
    ``_wire.dumps_items`` spares the walk of plain containers.
    """
    fields = item._fields
    if not walk and item_verdict(item) is True:
        return fields
    wire = _codec.encode_fields(
        fields, class_name=item._class_path, step_key=step_key, on_unencodable=on_unencodable
    )
    if walk and _codec.TAG in wire:
        _set_plain(item, False)
    return wire


def _add_watcher(item: MemoryItem, key: int, callback_ref: WatcherRef) -> None:
    """Add the watcher of the owner whose id is ``key`` (the caller holds ``_WATCH_LOCK``)."""
    owners = item._owners
    if owners is None:
        _watch_alone(item, key, callback_ref)
    elif isinstance(owners, dict):
        owners[key] = callback_ref
    else:
        alone = _owner_key_of(item, owners)
        if alone == key:
            _watch_alone(item, key, callback_ref)
        else:
            _set_owners(item, {alone: owners, key: callback_ref})


def _watch_alone(item: MemoryItem, key: int, callback_ref: WatcherRef) -> None:
    """Make ``callback_ref`` the one watcher, of the owner whose id is ``key``."""
    if type(callback_ref) is OwnedRef:
        # The ref names its owner: no key to store (or, naming another, a dict of one).
        _set_owners(item, callback_ref if callback_ref.owner_key == key else {key: callback_ref})
    else:
        _set_owner_key(item, key)
        _set_owners(item, callback_ref)


def _owner_key_of(item: MemoryItem, alone: WatcherRef) -> int:
    """Return the owner id of ``item``'s one watcher ``alone``."""
    return alone.owner_key if type(alone) is OwnedRef else item._owner_key


def _drop_watcher(item: MemoryItem, key: int) -> None:
    """Drop the watcher of the owner whose id is ``key`` (the caller holds ``_WATCH_LOCK``)."""
    owners = item._owners
    if owners is None:
        return
    if not isinstance(owners, dict):
        if _owner_key_of(item, owners) == key:
            _set_owners(item, None)
        return
    owners.pop(key, None)
    if not owners:
        _set_owners(item, None)


def _tell(
    item: MemoryItem, owners: WatcherRef | dict[int, WatcherRef], key: str, old: Any, new: Any
) -> None:
    """Tell the watchers of ``owners`` (the caller's one read of them) of a change of ``item``.

    If a watcher raises, the field is put back as it was and the watchers
    already told are told of the change back before the error propagates.
    """
    told: list[FieldWatcher] = []
    # A dict of owners can change under another thread's (un)watch: copy
    # its refs in one C call.
    refs = list(owners.values()) if isinstance(owners, dict) else [owners]
    for ref in refs:
        watcher = ref()
        if watcher is None:
            continue
        try:
            watcher(item, key, old, new)
        except BaseException:
            fields = item._fields
            if old is NOTHING:
                fields.pop(key, None)
            else:
                fields[key] = old
            for earlier in told:
                with contextlib.suppress(Exception):
                    earlier(item, key, new, old)
            raise
        told.append(watcher)


def item_from_fields(fields: dict[str, Any]) -> MemoryItem:
    """Return a base ``MemoryItem`` that takes ownership of ``fields`` (string keys, already checked)."""
    item = _new(MemoryItem)
    _set_fields(item, fields)
    _set_owners(item, None)
    _set_plain(item, None)
    return item


def items_from_fields(rows: list[dict[str, Any]]) -> list[MemoryItem]:
    """Return one base ``MemoryItem`` per dict of ``rows``, each taking ownership of its dict.

    Keys must be strings already (rows decoded from JSON). The items are made
    in C-level passes, with no Python call per item.
    """
    items: list[MemoryItem] = list(map(_new, itertools.repeat(MemoryItem, len(rows))))
    _consume(map(_set_fields, items, rows))
    nothing = itertools.repeat(None)
    _consume(map(_set_owners, items, nothing))
    _consume(map(_set_plain, items, nothing))
    return items


def _subclass_new(cls: type[MemoryItem], /, *args: Any, **kwargs: Any) -> MemoryItem:
    """``__new__`` of every subclass: the instance gets its slots before any ``__init__`` runs.

    The ``__init__`` that ``@dataclass`` writes for a subclass never calls
    :meth:`MemoryItem.__init__`, and sets its fields with ``set_value``.
    """
    if "_kv_ready" not in cls.__dict__:
        _finish_class(cls)
    item = _new(cls)
    _set_fields(item, {})
    _set_owners(item, None)
    _set_plain(item, None)
    return item


def _finish_class(cls: type[MemoryItem]) -> None:
    """Finish ``cls`` and its bases at their first use, after class decorators have run.

    Declared fields live in each instance, so their class-level defaults are
    removed (a class attribute would hide the instance's value on
    ``item.name``). A ``@dataclass`` subclass (UFO's ``ImageMemoryItem``
    pattern) keeps dataclass's meaning: its generated ``__init__`` sets the
    fields through :meth:`MemoryItem.set_value`, with its own defaults and
    no kvmemory validation, so it declares no fields of its own.
    """
    for klass in reversed(cls.__mro__):
        if not issubclass(klass, MemoryItem) or "_kv_ready" in klass.__dict__:
            continue
        names: Iterable[str] = klass._declared
        params = getattr(klass, "__dataclass_params__", None)
        if params is not None and params.frozen:
            # A frozen dataclass's __init__ bypasses set_value: its fields would not be item fields.
            msg = (
                f"{klass.__qualname__} is a frozen @dataclass; a MemoryItem subclass cannot be "
                "frozen, because its fields must stay item fields. Drop frozen=True."
            )
            raise ArgumentTypeError(msg)
        if hasattr(klass, "__dataclass_fields__"):
            names = [*klass._declared, *klass.__dataclass_fields__]
            klass._declared = {}
            klass._type_checks = None
        for name in names:
            if name in klass.__dict__:
                delattr(klass, name)
        klass._kv_ready = True


def items_from_mappings(
    cls: type[ItemT], rows: Iterable[Mapping[str, Any]], outcome: str
) -> list[ItemT]:
    """Build one ``cls`` item per mapping, all or nothing; errors name the position and ``outcome``."""
    rows = list(rows)
    if "_kv_ready" not in cls.__dict__:
        _finish_class(cls)
    try:
        # One C-level pass over every key of every row: join raises TypeError
        # on the first key that is not a str, far faster than a loop per row.
        "".join(itertools.chain.from_iterable(rows))
        keys_checked = True
    except TypeError:
        keys_checked = False
    items: list[ItemT] = []
    append = items.append
    typed = bool(cls._declared)
    for position, row in enumerate(rows):
        if type(row) is not dict and not isinstance(row, Mapping):
            msg = (
                f"Element {position} is a {type(row).__name__}, not a mapping of fields; {outcome}."
            )
            raise ArgumentTypeError(msg)
        try:
            if not keys_checked:
                _check_keys(row)
            if typed:
                append(cls(**row))
                continue
        except InvalidKeyError as exc:
            msg = f"Element {position}: {exc} {outcome[:1].upper()}{outcome[1:]}."
            raise InvalidKeyError(msg) from exc
        except (TypeError, ValueError) as exc:
            msg = f"Element {position}: {exc} {outcome[:1].upper()}{outcome[1:]}."
            raise FieldValidationError(msg) from exc
        # The base class needs no validation: build the item directly.
        item = _new(cls)
        _set_fields(item, dict(row))
        _set_owners(item, None)
        _set_plain(item, None)
        append(item)
    return items


def watch_items(items: Iterable[MemoryItem], owner: object, callback_ref: WatcherRef) -> None:
    """Call :meth:`MemoryItem.watch` on each of ``items``, in one loop (for building an index).

    With an :class:`OwnedRef` of ``owner``, an item not watched yet costs one
    slot write.
    """
    key = id(owner)
    # A dict's values view is gone through twice below without a copy.
    batch = items if isinstance(items, (list, tuple, ValuesView)) else list(items)
    # Under the lock, no other owner watches or unwatches these items between
    # the check and the writes below.
    with _WATCH_LOCK:
        if (
            type(callback_ref) is OwnedRef
            and callback_ref.owner_key == key
            and operator.countOf(map(_owners_of, batch), None) == len(batch)
        ):
            # No item is watched yet (a fresh index): one C-level pass.
            _consume(map(_set_owners, batch, itertools.repeat(callback_ref)))
            return
        for item in batch:
            _add_watcher(item, key, callback_ref)


def unwatch_items(items: Iterable[MemoryItem], owner: object) -> None:
    """Call :meth:`MemoryItem.unwatch` on each of ``items``, under one hold of the owners' lock."""
    key = id(owner)
    with _WATCH_LOCK:
        for item in items:
            _drop_watcher(item, key)


def filter_fields(fields: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """Return the fields among ``keys`` in the fields' order (UFO's ``filter``)."""
    wanted = keys if isinstance(keys, (set, frozenset, dict)) else frozenset(keys)
    return {key: fields[key] for key in fields if key in wanted}


def wire_alone(item: MemoryItem, step_key: str, on_unencodable: OnUnencodable) -> dict[str, Any]:
    """Return one item's wire form, its containers walked on their own (``_codec.shape_plain``).

    ``_wire`` checks the containers of a batch of 16 items or more in groups instead.
    """
    own = item._fields
    verdict = item._plain
    if verdict is None:
        verdict = item_verdict(item)
    if verdict is True or (verdict is not False and _codec.shape_plain(own, verdict)):
        return own
    return item_wire_form(item, step_key, on_unencodable)


def dumps_item(item: MemoryItem, *, step_key: str, on_unencodable: OnUnencodable) -> bytes:
    """Encode one item's wire form (a JSON object): the bytes ``_wire.dumps_items`` writes for it in a list.

    Raises:
        SerializationError: naming the key, step and type of a value that cannot be encoded.
    """
    try:
        try:
            return _codec.dumps(wire_alone(item, step_key, on_unencodable))
        except _codec.IntegerOutOfRange:
            raise
        except SerializationError:
            # A plain-looking container held what the writer refuses: the walk names it.
            return _codec.dumps(item_wire_form(item, step_key, on_unencodable))
    except _codec.IntegerOutOfRange:
        # A plain-looking item held an int beyond 64 bits: walk every value to tag it.
        return _codec.dumps(item_wire_form(item, step_key, on_unencodable, walk=True))


def decode_item(
    wire: Any,
    *,
    where: str,
    on_unknown_class: OnUnknownClass = "error",
    trusted_import: bool = False,
) -> MemoryItem:
    """Turn one item's wire form (see ``_codec.encode_fields``) back into an item of its class.

    Args:
        wire: A field object or a wrapped item, as decoded from JSON.
        where: Names the item in error messages (``"item 3 of 'run.json'"``).
        on_unknown_class: See :func:`item_class`.
        trusted_import: See :func:`item_class`.

    Raises:
        CorruptSessionError: naming ``where`` if the wire form or a field is invalid.
        MissingDependencyError: if a field needs numpy and it is not installed.
    """
    class_name, fields = _codec.unwrap(
        wire, where=where, on_unknown_class=on_unknown_class, trusted_import=trusted_import
    )
    cls = item_class(
        class_name, on_unknown_class=on_unknown_class, trusted_import=trusted_import, where=where
    )
    try:
        return cls._from_fields(fields)
    except (TypeError, ValueError) as exc:
        msg = f"{where}: {exc} Nothing was loaded."
        raise CorruptSessionError(msg) from exc


def _restore(cls: type[MemoryItem], fields: dict[str, Any]) -> MemoryItem:
    return cls._from_fields(fields)


def _resolve_hint(cls: type, annotation: Any) -> Any:
    """Evaluate one field's annotation (a string under ``from __future__ import annotations``).

    Each field is resolved on its own, so one hint that cannot be resolved
    (a name imported inside a function) only turns off that field's type check.
    """
    if not isinstance(annotation, str):
        return annotation
    module = sys.modules.get(cls.__module__)
    namespace = dict(vars(module)) if module is not None else {}
    try:
        return eval(annotation, namespace, dict(vars(cls)))
    except Exception:  # an unresolvable hint only disables this field's check
        return Any


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return typing.get_origin(annotation) is ClassVar


def _runtime_types(hint: Any) -> tuple[type, ...] | None:
    """Return the classes an ``isinstance`` check can enforce for ``hint``, or ``None``."""
    if hint is Any:
        return None
    if hint is None or hint is type(None):
        return (type(None),)
    if hint is float:
        return (float, int)  # PEP 484: an int is acceptable where a float is expected
    origin = typing.get_origin(hint)
    # Python 3.10 counts list[int] as a type, so look for an origin first.
    if origin is None and isinstance(hint, type):
        return (hint,)
    if origin is typing.Union or origin is types.UnionType:
        out: list[type] = []
        for arg in typing.get_args(hint):
            sub = _runtime_types(arg)
            if sub is None:
                return None
            out.extend(sub)
        return tuple(out)
    if isinstance(origin, type):
        return (origin,)  # list[int] is checked as list; elements are not inspected
    return None
