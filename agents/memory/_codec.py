"""The one place that turns values into JSON bytes and back.

orjson does the byte work. This module owns three things on top of it:

* **Type tags.** Values JSON cannot express (``datetime``, ``UUID``,
  ``Decimal``, ``bytes``, ``tuple``, ``set``, ``Enum`` members, NaN, numpy
  arrays, ...) are written as small objects ``{"$kv": "<tag>", "v": ...}`` so
  that decoding gives back the same type and value. The tags are listed in
  ``docs/format.md``.
* **The item wire form.** An item whose fields are plain JSON is written as
  its field object, exactly the shape UFO writes. An item that needs tags, or
  whose class is a typed subclass, is wrapped:
  ``{"$kv": "item", "class": "pkg.mod:Cls", "fields": {...}}``. A reader
  therefore only walks the values of wrapped items; plain items are used as
  orjson returns them.
* **Files.** Writing a file atomically, checking a path, and checking the
  format name and version of a versioned document. The session file formats
  built on these live in ``agents.memory._session``.

Besides that lossless, compact form, :func:`dumps_ufo` writes the JSON UFO
writes (Python's ``json.dumps`` with its defaults) and tags only the values
``json.dumps`` refuses; :func:`loads` reads both.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import enum
import gc
import importlib
import inspect
import itertools
import json
import math
import os
import pathlib
import re
import sys
import tempfile
import threading
import types
import uuid
import zoneinfo
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any, Final, Literal, NoReturn, TypeAlias

import orjson

from agents.memory.exceptions import (
    AgentMemoryError,
    ArgumentTypeError,
    CorruptSessionError,
    InvalidArgumentError,
    MissingDependencyError,
    SerializationError,
    UnsupportedVersionError,
    missing_dependency,
)

__all__ = [
    "MAX_DEPTH",
    "TAG",
    "TAGS",
    "OnUnencodable",
    "OnUnknownClass",
    "Shape",
    "atomic_write",
    "check_format",
    "check_on_unknown_class",
    "collector_paused",
    "containers_plain",
    "decode_fields",
    "decode_value",
    "dumps",
    "dumps_ufo",
    "dumps_ufo_rows",
    "encode_fields",
    "encode_value",
    "file_path",
    "find_class",
    "is_plain",
    "loads",
    "plain_verdict",
    "shape_plain",
    "unwrap",
]

OnUnencodable = Literal["error", "repr", "drop"]
"""What to do with a value the codec cannot encode: raise, write ``repr()``, or drop the field."""

OnUnknownClass = Literal["error", "base"]
"""What loading does with a class the process does not know: raise, or load without it.

``"base"`` loads an item of an unknown class as a plain ``MemoryItem`` and an
enum member of an unknown class as its plain value.
"""

TAG: Final = "$kv"

_DUMPS_OPTIONS: Final = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_SCALARS: Final = frozenset({str, int, bool, type(None)})
_SCALARS_AND_FLOAT: Final = _SCALARS | {float}
_TEXT_SCALARS: Final = frozenset({str, bool, type(None)})
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
_POLICIES: Final = ("error", "repr", "drop")
_LOG10_2: Final = 0.30102999566398120  # digits per bit, for messages about huge ints
MAX_DEPTH: Final = 255
"""The deepest nesting of JSON arrays and objects the codec writes or reads in one value.

orjson refuses to write JSON nested deeper than 255 levels, so nothing deeper
can have been written by kvmemory; refusing it on reading keeps decoding
clear of Python's recursion limit.
"""
# At most this many elements of one set, frozenset or dict tag may share a hash.
# Distinct values with one hash make building the set quadratic (hash flooding:
# ints k * (2**61 - 1) all hash to 0); real data never has more than a few.
_MAX_SAME_HASH: Final = 32


BULK_VALUES: Final = 512
"""From this many values on, :func:`collector_paused` pauses the garbage collector while they are decoded."""

_PROMOTE_AT: Final = 50_000
"""From this many young objects on, the end of a pause moves them to the oldest generation (``_promote_survivors``)."""

_PAUSE_LOCK: Final = threading.Lock()
_pauses = 0  # pauses in progress (threads may decode at once)
_resume = False  # whether the collector was on when the first of them began


@contextlib.contextmanager
def collector_paused(n: int) -> Iterator[None]:
    """Pause Python's cyclic garbage collector while ``n`` values are decoded, if ``n`` is large.

    Decoding many rows allocates millions of dicts and lists that all stay
    alive; the collector, triggered every few hundred allocations, keeps
    walking the growing heap to find no garbage (more than half the time of
    a 100,000-item reopen). Paused, they are collected once, as young
    objects, after the pause. Pauses of several threads nest: the
    collector resumes when the last one ends, if it was on when the first
    began. Below :data:`BULK_VALUES` values nothing is paused.
    """
    global _pauses, _resume  # one process-wide switch, as gc's own
    if n < BULK_VALUES:
        yield
        return
    with _PAUSE_LOCK:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _pauses -= 1
            if _pauses == 0 and _resume:
                _promote_survivors()
                gc.enable()


def _promote_survivors() -> None:
    """Move the objects a long pause left young into the oldest generation, without walking them.

    They are mostly kept (items decoded, an index filed): resumed as they
    are, the collector would walk them all in a young collection, again in
    a middle one, and again in a full one, each a pause of the thread that
    happens to allocate then (0.5 to 1.4 s a walk after opening 100,000
    items). ``gc.freeze()`` then ``gc.unfreeze()`` moves every tracked
    object into the oldest generation in constant time and changes no
    setting; the next full collection (when the process has grown by a
    quarter, as ever) walks them once. Skipped when few objects wait, and
    when the process keeps objects frozen itself (``gc.freeze()`` before
    forking), whose frozen objects unfreezing would release.
    """
    if gc.get_count()[0] < _PROMOTE_AT or gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()


def _refuse(value: Any) -> Any:
    # Reached only when a caller hands orjson something encode_value did not
    # prepare; the per-field encoder reports such values with their key first.
    msg = f"Cannot encode a value of type {_type_name(value)} as JSON."
    raise SerializationError(msg)


def dumps(obj: Any) -> bytes:
    """Encode prepared JSON-native data as compact UTF-8 JSON bytes.

    Raises:
        SerializationError: if ``obj`` holds a value that is not JSON-native.
    """
    try:
        return orjson.dumps(obj, default=_refuse, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError as exc:
        if "64-bit" in str(exc):
            msg = "An integer does not fit in 64 bits; encode the items with walk=True to tag it."
            raise IntegerOutOfRange(msg) from exc
        if "Recursion" in str(exc):
            msg = f"A value is nested too deeply to encode as JSON (at most {MAX_DEPTH} levels can be written); flatten it."
            raise SerializationError(msg) from exc
        raise SerializationError(str(exc)) from exc


class IntegerOutOfRange(SerializationError):
    """Internal: a plain item held an int beyond 64 bits; the caller re-encodes with tags."""


def loads(data: bytes | bytearray | memoryview | str, *, source: str = "input") -> Any:
    """Decode JSON bytes, naming ``source`` and the position on failure.

    Raises:
        CorruptSessionError: if ``data`` is not valid JSON.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        try:
            # What json.dumps writes and orjson refuses: NaN, Infinity, lone
            # surrogates. Only reached when orjson has already failed.
            return json.loads(bytes(data) if isinstance(data, memoryview) else data)
        except (ValueError, TypeError, RecursionError):
            # json.loads recurses once per nesting level (orjson stops at 1024) and
            # refuses what is not text; orjson's error says where the input broke.
            pass
        msg = (
            f"{source} is not valid JSON at line {exc.lineno}, column {exc.colno} "
            f"({exc.msg}); nothing was loaded."
        )
        raise CorruptSessionError(msg) from exc


# -- encoding values ----------------------------------------------------------


def _type_name(value: Any) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def class_path(cls: type) -> str:
    """Return ``"module:qualname"``, the name a class is stored and imported by."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _split_class_path(path: str, where: str) -> tuple[str, list[str]]:
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        msg = f"Class path {path!r} named by {where} is not of the form 'module:QualName'; nothing was loaded."
        raise CorruptSessionError(msg)
    return module_name, qualname.split(".")


def import_class(path: str, *, where: str = "the session") -> Any:
    """Import the module named by a ``"module:qualname"`` path and return the object it names.

    This runs the module's code: it is only called for input the caller
    declared trusted (``trusted_import=True``).

    Raises:
        CorruptSessionError: if the path is malformed or does not import.
    """
    module_name, parts = _split_class_path(path, where)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in parts:
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        msg = f"Class {path!r} named by {where} cannot be imported ({exc}); nothing was loaded."
        raise CorruptSessionError(msg) from exc
    return obj


def find_class(path: str, *, where: str = "the session") -> Any:
    """Return the object a ``"module:qualname"`` path names in a module already imported, or ``None``.

    Nothing is imported and no code runs: the module must already be in
    ``sys.modules`` as a plain module, and each name is looked up statically
    (``inspect.getattr_static``: no module ``__getattr__``, no descriptors,
    no lazy-loading proxies). A class a program uses is defined by a module
    it has imported, so this finds every class a process could have written
    into a session, and nothing a file could name to make the process run code.

    There is deliberately no ``register_enum()``: importing the module that
    defines an enum is what makes it known, exactly as for ``MemoryItem``
    subclasses (which register themselves when their ``class`` statement
    runs). A registry filled only when values are encoded would know the
    enums this process wrote but not those of a file written by another
    process, and an explicit call would be one more thing to forget before
    every load.

    Raises:
        CorruptSessionError: if the path is malformed.
    """
    module_name, parts = _split_class_path(path, where)
    obj: Any = sys.modules.get(module_name)
    if type(obj) is not types.ModuleType:
        return None
    for part in parts:
        obj = inspect.getattr_static(obj, part, None)
        if obj is None:
            return None
    return obj


class _Encoder:
    """Walks one field's value, tagging what JSON cannot express."""

    __slots__ = ("key", "policy", "step", "tagged")

    def __init__(self, policy: OnUnencodable) -> None:
        self.policy = policy
        self.key: str | None = None
        self.step: Any = None
        self.tagged = False

    def tag(self, name: str, payload: Any, **extra: Any) -> dict[str, Any]:
        self.tagged = True
        return {TAG: name, "v": payload, **extra}

    def encode(self, value: Any) -> Any:
        cls = type(value)
        if cls in _TEXT_SCALARS:
            return value
        if cls is int:
            # orjson writes 64-bit integers; larger ones keep their digits in a tag.
            return value if _INT_MIN <= value <= _INT_MAX else self.tag("int", self.digits(value))
        if cls is float:
            # x - x is 0.0 for every finite float and NaN for NaN and both infinities.
            return value if value - value == 0.0 else self.tag("float", repr(value))
        if cls is list:
            if _TEXT_SCALARS.issuperset(map(type, value)):
                return value
            return [self.encode(item) for item in value]
        if cls is dict:
            return self.encode_dict(value)
        encoder = _ENCODERS.get(cls)
        if encoder is not None:
            return encoder(self, value)
        return self.encode_other(value)

    def encode_dict(self, value: dict[Any, Any]) -> Any:
        if TAG in value or not all(type(k) is str for k in value):
            pairs = [[self.encode(k), self.encode(v)] for k, v in value.items()]
            return self.tag("dict", pairs)
        if _TEXT_SCALARS.issuperset(map(type, value.values())):
            return value
        return {k: self.encode(v) for k, v in value.items()}

    def encode_other(self, value: Any) -> Any:
        # Subclasses and optional types, checked after the exact-type table.
        if isinstance(value, enum.Enum):
            cls = type(value)
            path = class_path(cls)
            if "<locals>" in path:
                return self.unencodable(
                    value, "an Enum defined inside a function cannot be imported back"
                )
            return self.tag("enum", self.encode(value.value), cls=path)
        if isinstance(value, pathlib.PurePath):
            return _encode_path(self, value)
        if type(value).__module__ == "numpy":
            return _encode_numpy(self, value)
        for base in _BUILTIN_BASES:
            # Subclasses of builtins (named tuples, str subclasses) are written
            # as their builtin base; their class is not kept.
            if isinstance(value, base):
                return self.encode(base(value))
        for known, encoder in _ENCODERS.items():
            if isinstance(value, known):
                return encoder(self, value)
        return self.unencodable(value, "")

    def where(self) -> str:
        where = "A value" if self.key is None else f"Field {self.key!r}"
        if self.step is not None:
            where += f" of step {self.step!r}"
        return where

    def digits(self, value: int) -> str:
        try:
            return str(value)
        except ValueError as exc:
            # Python refuses to write ints of more than sys.get_int_max_str_digits() digits.
            msg = (
                f"{self.where()} holds an integer of about {round(value.bit_length() * _LOG10_2)} digits, "
                f"more than the {sys.get_int_max_str_digits()} Python converts to text; "
                "store it as bytes, or raise the limit with sys.set_int_max_str_digits()."
            )
            raise SerializationError(msg) from exc

    def unencodable(self, value: Any, why: str) -> Any:
        if self.policy == "repr":
            return repr(value)
        if self.policy == "drop":
            raise _DropField
        reason = f"; {why}" if why else ""
        msg = (
            f"{self.where()} cannot be encoded as JSON (got {_type_name(value)}{reason}); "
            'store a path, text or bytes instead, or pass on_unencodable="repr" or "drop".'
        )
        raise SerializationError(msg)


class _DropField(Exception):
    """Internal signal: the policy is 'drop' and this field goes."""


def _encode_datetime(enc: _Encoder, value: dt.datetime) -> Any:
    zone = value.tzinfo
    if isinstance(zone, zoneinfo.ZoneInfo) and zone.key:
        # Keep the zone's name, not just today's offset, so arithmetic and
        # comparisons after loading behave as before saving.
        extra: dict[str, Any] = {"tz": zone.key}
        if value.fold:
            extra["fold"] = 1
        return enc.tag("datetime", value.replace(tzinfo=None).isoformat(), **extra)
    return enc.tag("datetime", value.isoformat())


def _encode_path(enc: _Encoder, value: pathlib.PurePath) -> Any:
    return enc.tag("path", str(value), flavor=_PATH_FLAVORS.get(type(value), "Path"))


def _encode_numpy(enc: _Encoder, value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return enc.unencodable(value, "numpy arrays of Python objects are not supported")
        data = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii")
        return enc.tag("ndarray", data, dtype=value.dtype.str, shape=list(value.shape))
    if isinstance(value, np.generic):
        return enc.tag("npscalar", enc.encode(value.item()), dtype=value.dtype.str)
    return enc.unencodable(value, "")


_BUILTIN_BASES: Final[tuple[type[Any], ...]] = (
    str,
    int,
    float,
    list,
    dict,
    tuple,
    bytes,
)

_PATH_FLAVORS: Final[dict[type, str]] = {
    pathlib.PurePosixPath: "PurePosixPath",
    pathlib.PureWindowsPath: "PureWindowsPath",
    pathlib.PurePath: "PurePath",
}

_ENCODERS: Final[dict[type, Callable[[_Encoder, Any], Any]]] = {
    tuple: lambda e, v: e.tag("tuple", [e.encode(x) for x in v]),
    set: lambda e, v: e.tag("set", [e.encode(x) for x in v]),
    frozenset: lambda e, v: e.tag("frozenset", [e.encode(x) for x in v]),
    bytes: lambda e, v: e.tag("bytes", base64.b64encode(v).decode("ascii")),
    bytearray: lambda e, v: e.tag("bytearray", base64.b64encode(v).decode("ascii")),
    dt.datetime: lambda e, v: _encode_datetime(e, v),
    dt.date: lambda e, v: e.tag("date", v.isoformat()),
    dt.time: lambda e, v: e.tag("time", v.isoformat()),
    dt.timedelta: lambda e, v: e.tag("timedelta", [v.days, v.seconds, v.microseconds]),
    uuid.UUID: lambda e, v: e.tag("uuid", str(v)),
    Decimal: lambda e, v: e.tag("decimal", str(v)),
    complex: lambda e, v: e.tag("complex", [e.encode(v.real), e.encode(v.imag)]),
}


def encode_value(value: Any, *, on_unencodable: OnUnencodable = "error") -> Any:
    """Return ``value`` as JSON-native data, tagging types JSON cannot express.

    Args:
        value: Any value the codec supports (see ``docs/format.md``).
        on_unencodable: ``"error"`` raises, ``"repr"`` writes ``repr(value)``.

    Raises:
        SerializationError: for an unsupported value under the ``"error"`` policy.
    """
    _check_policy(on_unencodable)
    try:
        return _Encoder(on_unencodable).encode(value)
    except _DropField:
        return None


def _check_policy(policy: str) -> None:
    if policy not in _POLICIES:
        msg = f"on_unencodable must be one of 'error', 'repr' or 'drop', got {policy!r}."
        raise InvalidArgumentError(msg)


def is_plain(fields: Mapping[str, Any]) -> bool:
    """Return whether ``fields`` can be written as they are: JSON scalars only, finite floats, no tag key.

    Such fields need no walk: orjson writes them directly and decoding gives
    back the same values. Containers always take the walking path, because
    their contents can change without the item knowing.
    """
    if TAG in fields:
        return False
    values = fields.values()
    kinds = set(map(type, values))
    if kinds <= _SCALARS:
        return True
    if kinds <= _SCALARS_AND_FLOAT:
        return all(v - v == 0.0 for v in values if type(v) is float)
    return False


class Shape:
    """Which top-level fields of an item hold a ``list`` or a ``dict``: the part of a verdict checked on each write.

    Shapes are shared: every item whose containers sit under the same keys
    holds the same ``Shape`` object (see :func:`plain_verdict`), so a verdict
    costs an item no allocation and a batch is grouped by identity.
    """

    __slots__ = ("dicts", "lists")

    def __init__(self, dicts: tuple[str, ...], lists: tuple[str, ...]) -> None:
        self.dicts = dicts
        self.lists = lists

    def __repr__(self) -> str:
        return f"Shape(dicts={self.dicts!r}, lists={self.lists!r})"


PlainVerdict: TypeAlias = "bool | Shape"
"""What :func:`plain_verdict` says of an item's fields.

``True``: written as they are. ``False``: they need the walk. A
:class:`Shape`: written as they are while the top-level containers it names
still hold plain data (:func:`containers_plain`), which they may stop doing
when they are changed in place.
"""

_PLAIN_KINDS: Final = _SCALARS_AND_FLOAT | {list, dict}
# Shapes by their keys. Bounded: past the bound (an odd program with endless
# distinct container keys) a verdict gets a shape of its own, unshared.
_SHAPES: Final[dict[tuple[tuple[str, ...], tuple[str, ...]], Shape]] = {}
_MAX_SHAPES: Final = 4096


def plain_verdict(fields: Mapping[str, Any]) -> PlainVerdict:
    """Tell whether ``fields`` can be written as they are, up to their containers' contents.

    Only the top-level values are judged here: they change only through the
    item's own calls, so the verdict can be kept until then. A ``list`` or
    ``dict`` value can change in place without the item knowing, so the
    verdict names the keys that hold them (a shared :class:`Shape`), to be
    checked on every write with :func:`containers_plain`.
    """
    if TAG in fields:
        return False
    dicts: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    # One pass in Python: type(value) is a specialised call there, faster on a
    # dozen values than the C-level map(type, ...) and filter passes.
    for key, value in fields.items():
        kind = type(value)
        if kind in _SCALARS:
            continue
        if kind is dict:
            dicts += (key,)
        elif kind is list:
            lists += (key,)
        elif kind is not float or value - value != 0.0:
            return False
    if not dicts and not lists:
        return True
    keys = (dicts, lists)
    shape = _SHAPES.get(keys)
    if shape is None:
        shape = Shape(dicts, lists)
        if len(_SHAPES) < _MAX_SHAPES:
            _SHAPES[keys] = shape
    return shape


def containers_plain(
    dict_groups: Iterable[Iterable[dict[Any, Any]]], list_groups: Iterable[Iterable[list[Any]]]
) -> bool:
    """Return whether these containers can be written as they are, at every depth.

    They can when the encoder would give back the same JSON: exact ``str``,
    ``int``, ``bool``, ``None``, finite ``float``, and exact ``list`` and
    ``dict`` (no ``$kv`` key) of such values. The check goes one nesting
    level at a time, a group at a time, in C-level passes (``map``,
    ``filter``), so its cost barely grows with the number of items sharing
    it. Group the containers of one field of many items together: a group
    whose values are all dicts (a list of controls) passes them on whole.
    Two things pass that the JSON writer itself refuses, so the caller must
    walk the items again when :func:`dumps` raises: integers beyond 64 bits
    (:class:`IntegerOutOfRange`) and dict keys that are not exact ``str``.
    A nesting deeper than :data:`MAX_DEPTH` (or a cycle) is not plain: the
    walk reports it.
    """
    pending: list[tuple[bool, Iterable[Any]]] = [(True, group) for group in dict_groups]
    pending += [(False, group) for group in list_groups]
    for _ in range(MAX_DEPTH):
        nested: list[tuple[bool, Iterable[Any]]] = []
        for of_dicts, group in pending:
            containers = group if type(group) in (list, tuple) else list(group)
            if of_dicts and any(map(dict.__contains__, containers, itertools.repeat(TAG))):
                return False
            # The values are gone through again only when needed: most groups
            # hold scalars alone and are done after one pass.
            values = _values_of(containers, of_dicts)
            kinds = set(map(type, values))
            if kinds <= _SCALARS:
                continue
            if not kinds <= _PLAIN_KINDS:
                return False
            # The kinds are exact, so isinstance selects exactly one type here.
            if float in kinds and not all(
                map(math.isfinite, filter(_is_float, _values_of(containers, of_dicts)))
            ):
                return False
            values = _values_of(containers, of_dicts)
            if kinds == {dict}:
                nested.append((True, values))
            elif kinds == {list}:
                nested.append((False, values))
            elif dict in kinds or list in kinds:
                mixed = list(values)
                if dict in kinds:
                    nested.append((True, filter(_is_dict, mixed)))
                if list in kinds:
                    nested.append((False, filter(_is_list, mixed)))
        if not nested:
            return True
        pending = nested
    return False


def shape_plain(fields: Mapping[str, Any], shape: Shape) -> bool:
    """Return whether the containers ``shape`` names in one item's ``fields`` hold plain data at every depth.

    The verdict of :func:`containers_plain` for one item (``[[fields[k]] for
    k in shape.dicts]``, ``[[fields[k]] for k in shape.lists]``), reached by
    a walk in Python: for a single item the C-level passes of
    :func:`containers_plain` cost more to set up than they save (one UFO
    step: 2.5 us against 14 us). Containers nested deeper than
    ``_WALK_DEPTH`` (32) are handed to :func:`containers_plain`, so the walk
    never nears Python's recursion limit.
    """
    try:
        for key in shape.dicts:
            value = fields[key]
            if TAG in value or not _plain_walk(value.values(), 1):
                return False
        for key in shape.lists:
            if not _plain_walk(fields[key], 1):
                return False
    except _TooDeep:
        return containers_plain(
            [[fields[key]] for key in shape.dicts], [[fields[key]] for key in shape.lists]
        )
    return True


class _TooDeep(Exception):
    """Internal: :func:`_plain_walk` met a container deeper than it walks."""


_WALK_DEPTH: Final = 32


def _plain_walk(values: Iterable[Any], depth: int) -> bool:
    """Return whether ``values`` (of a container at nesting ``depth``) are plain at every depth."""
    for value in values:
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            continue
        if kind is dict:
            if depth >= _WALK_DEPTH:
                raise _TooDeep
            if TAG in value or not _plain_walk(value.values(), depth + 1):
                return False
        elif kind is list:
            if depth >= _WALK_DEPTH:
                raise _TooDeep
            if not _plain_walk(value, depth + 1):
                return False
        elif kind is not float or value - value != 0.0:
            return False
    return True


def _values_of(containers: Iterable[Any], of_dicts: bool) -> Iterator[Any]:
    """The values of dicts, or the items of lists, one after another."""
    if of_dicts:
        return itertools.chain.from_iterable(map(dict.values, containers))
    return itertools.chain.from_iterable(containers)


_is_float: Final = float.__instancecheck__
_is_dict: Final = dict.__instancecheck__
_is_list: Final = list.__instancecheck__


def encode_fields(
    fields: Mapping[str, Any],
    *,
    class_name: str | None,
    step_key: str,
    on_unencodable: OnUnencodable,
) -> dict[str, Any]:
    """Return the wire form of one item: its field object, or a wrapped item.

    Args:
        fields: The item's fields, in order.
        class_name: ``"module:qualname"`` of a typed item class, ``None`` for the base class.
        step_key: The key whose value names the step in error messages.
        on_unencodable: The policy for values the codec cannot encode.

    Raises:
        SerializationError: naming the key, step and type of an unsupported value.
    """
    enc = _Encoder(on_unencodable)
    enc.step = fields.get(step_key)
    out: dict[str, Any] = {}
    for key, value in fields.items():
        enc.key = key
        try:
            out[key] = enc.encode(value)
        except _DropField:
            continue
        except RecursionError as exc:
            msg = f"{enc.where()} is nested too deeply to encode as JSON (at most {MAX_DEPTH} levels can be written); flatten it."
            raise SerializationError(msg) from exc
    if class_name is None and not enc.tagged and TAG not in fields:
        return out
    wrapped: dict[str, Any] = {TAG: "item", "fields": out}
    if class_name is not None:
        wrapped["class"] = class_name
    return wrapped


# -- UFO's JSON ------------------------------------------------------------------


class _UfoDefault:
    """The ``default=`` hook of ``json.dumps``: tags a value it refuses, under the policy.

    ``json.dumps`` calls it only for values it cannot write itself (a
    ``datetime``, a ``set``, an ``Enum`` that is not a ``str`` or ``int``), so
    everything ``json.dumps`` writes stays exactly as it writes it.
    """

    __slots__ = ("failed", "policy")

    def __init__(self, policy: OnUnencodable) -> None:
        _check_policy(policy)
        self.policy = policy
        self.failed = False

    def __call__(self, value: Any) -> Any:
        try:
            return _Encoder("error").encode(value)
        except SerializationError:
            if self.policy == "repr":
                return repr(value)
            self.failed = True
            raise


def dumps_ufo(obj: Any, *, on_unencodable: OnUnencodable = "error") -> str:
    """Return ``json.dumps(obj)`` with its default options, as UFO writes JSON.

    ``", "`` and ``": "`` separators, non-ASCII text escaped, ``str`` and
    ``int`` enums as their values, tuples as lists. A value ``json.dumps``
    refuses is written as its type tag (see ``docs/format.md``), so nothing
    that UFO can write changes and nothing UFO cannot write fails. A dict
    whose keys ``json.dumps`` cannot write is written in the lossless form.

    Args:
        obj: The data to write.
        on_unencodable: ``"repr"`` writes ``repr(value)`` for a value the
            codec cannot encode; ``"error"`` and ``"drop"`` raise (for
            fields, :func:`dumps_ufo_rows` applies them per field).

    Raises:
        SerializationError: for a value the codec cannot encode, or a
            circular reference.
    """
    hook = _UfoDefault(on_unencodable)
    try:
        return json.dumps(obj, default=hook)
    except ValueError as exc:
        msg = f"Cannot encode the data as JSON: {exc}; remove the reference cycle."
        raise SerializationError(msg) from exc
    except TypeError as exc:
        if hook.failed or isinstance(exc, SerializationError):
            raise
        # A dict key json.dumps cannot write (a tuple, say): write the lossless form.
        return json.dumps(encode_value(obj, on_unencodable=on_unencodable), default=hook)


def dumps_ufo_rows(
    rows: list[Mapping[str, Any]], *, step_key: str, on_unencodable: OnUnencodable
) -> str:
    """Return ``json.dumps(rows)`` for items' field dicts, as UFO's ``Memory.to_json`` writes it.

    Values ``json.dumps`` refuses are tagged where they are (the field dict
    is never wrapped), so ``json.loads`` gives back every field UFO could
    write as UFO would. A field that cannot be written at all follows
    ``on_unencodable``.

    Raises:
        SerializationError: naming the key, step and type of a value that
            cannot be encoded under ``on_unencodable``.
    """
    try:
        return json.dumps(rows, default=_UfoDefault(on_unencodable))
    except (TypeError, ValueError, RecursionError):
        # The slow path, one field at a time, to name the field and apply the policy.
        ready = [_ufo_fields(fields, step_key, on_unencodable) for fields in rows]
        return json.dumps(ready, default=_UfoDefault(on_unencodable))


_UFO_FIXES: Final[dict[type, str]] = {RecursionError: "it is nested too deeply; flatten it"}


def _ufo_fields(
    fields: Mapping[str, Any], step_key: str, on_unencodable: OnUnencodable
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    step = fields.get(step_key)
    for key, value in fields.items():
        try:
            json.dumps(value, default=_UfoDefault(on_unencodable))
        except (ValueError, RecursionError) as exc:
            # A reference cycle, an int of more digits than Python writes, or nesting
            # deeper than json.dumps recurses.
            where = f"Field {key!r}" + (f" of step {step!r}" if step is not None else "")
            fix = _UFO_FIXES.get(type(exc), "remove the reference cycle")
            if "integer string conversion" in str(exc):
                fix = "store it as text or bytes, or raise sys.set_int_max_str_digits()"
            msg = f"{where} cannot be encoded as JSON ({exc}); {fix}."
            raise SerializationError(msg) from exc
        except TypeError:
            # Unencodable inside, or dict keys json.dumps cannot write: the
            # lossless encoder names the field, applies the policy, tags the keys.
            enc = _Encoder(on_unencodable)
            enc.key = key
            enc.step = step
            try:
                value = enc.encode(value)
            except _DropField:
                continue
        out[key] = value
    return out


# -- decoding values ----------------------------------------------------------


class _Bad(Exception):
    """Internal: a value cannot be decoded; carries the JSON path, built on the way out."""

    def __init__(self, message: str, error: type[AgentMemoryError] = CorruptSessionError) -> None:
        super().__init__(message)
        self.message = message
        self.error = error
        self.path: list[str] = []

    def raise_for(self, where: str) -> NoReturn:
        segments = self.path[::-1]
        if len(segments) > 16:
            segments = [*segments[:8], "...", *segments[-8:]]
        path = "$" + "".join(segments)
        msg = f"{where}, at {path}: {self.message}; nothing was loaded."
        raise self.error(msg) from self.__cause__


def _key_segment(key: Any) -> str:
    text = key if type(key) is str else repr(key)
    if len(text) > 60:
        text = text[:57] + "..."
    if text.isidentifier():
        return f".{text}"
    return f"[{orjson.dumps(text).decode()}]"


def _bad_payload(tag: str, expected: str, got: Any) -> _Bad:
    shown = repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return _Bad(f"the {tag!r} tag holds {shown}, expected {expected}")


# What a failing tag decoder raises on malformed payloads: wrong types reach
# the builtin constructors (TypeError, AttributeError), bad text (ValueError,
# decimal.InvalidOperation is an ArithmeticError), numbers out of range
# (OverflowError), missing keys and short lists (LookupError).
_PAYLOAD_ERRORS: Final = (TypeError, ValueError, ArithmeticError, LookupError, AttributeError)


class _Decoder:
    """Walks one decoded JSON value, turning type tags back into values.

    Classes named by enum tags are found by :func:`find_class` (modules
    already imported), or imported only when ``trusted_import`` is set.
    """

    __slots__ = ("depth", "on_unknown_class", "trusted_import")

    def __init__(self, *, on_unknown_class: OnUnknownClass, trusted_import: bool) -> None:
        check_on_unknown_class(on_unknown_class)
        self.on_unknown_class = on_unknown_class
        self.trusted_import = trusted_import
        self.depth = 0

    def value(self, obj: Any) -> Any:
        cls = type(obj)
        if cls is list:
            if _SCALARS_AND_FLOAT.issuperset(map(type, obj)):
                return obj
            return self.elements(obj, "")
        if cls is not dict:
            return obj
        self.enter()
        if TAG not in obj:
            out = {}
            for key, item in obj.items():
                try:
                    out[key] = self.value(item)
                except _Bad as bad:
                    bad.path.append(_key_segment(key))
                    raise
        else:
            out = self.tagged(obj[TAG], obj)
        self.depth -= 1
        return out

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            msg = f"values are nested deeper than the {MAX_DEPTH} levels kvmemory can write"
            raise _Bad(msg)

    def elements(self, obj: Any, prefix: str) -> list[Any]:
        """Decode a list, naming ``prefix[i]`` of a failing element."""
        self.enter()
        out = []
        for index, item in enumerate(obj):
            try:
                out.append(self.value(item))
            except _Bad as bad:
                bad.path.append(f"{prefix}[{index}]")
                raise
        self.depth -= 1
        return out

    def tagged(self, tag: Any, obj: dict[str, Any]) -> Any:
        decoder = _DECODERS.get(tag) if type(tag) is str else None
        if decoder is None:
            msg = f"unknown type tag {tag!r}; the session was written by another library or a newer kvmemory"
            raise _Bad(msg)
        if "v" not in obj:
            raise _Bad(f"the {tag!r} tag has no 'v' payload")
        try:
            return decoder(self, obj)
        except _Bad:
            raise
        except RecursionError as exc:
            bad = _Bad(f"values are nested deeper than this call stack can decode ({exc})")
            raise bad from exc
        except _PAYLOAD_ERRORS as exc:
            shown = repr(obj.get("v"))
            if len(shown) > 60:
                shown = shown[:57] + "..."
            bad = _Bad(f"malformed {tag!r} value {shown} ({type(exc).__name__}: {exc})")
            raise bad from exc

    def payload(self, obj: dict[str, Any], tag: str, kind: type, expected: str) -> Any:
        payload = obj["v"]
        if type(payload) is not kind:
            raise _bad_payload(tag, expected, payload)
        return payload

    def sequence(self, obj: dict[str, Any], tag: str) -> list[Any]:
        return self.elements(self.payload(obj, tag, list, "a list of elements"), ".v")

    def hashed(self, values: list[Any], tag: str) -> list[Any]:
        """Return ``values`` once it is safe to hash them into a set or dict.

        Counting equal hashes is linear (the counts are keyed by the hash ints
        themselves), while building a set of many distinct values with one
        hash is quadratic; such input is refused before the set is built.
        """
        counts: dict[int, int] = {}
        for value in values:
            code = hash(value)
            seen = counts.get(code, 0) + 1
            if seen > _MAX_SAME_HASH:
                msg = (
                    f"the {tag!r} tag holds more than {_MAX_SAME_HASH} elements with the same hash, "
                    "which real data does not; refused as a hash-flooding input"
                )
                raise _Bad(msg)
            counts[code] = seen
        return values

    def dict_pairs(self, obj: dict[str, Any]) -> dict[Any, Any]:
        pairs = self.payload(obj, "dict", list, "a list of [key, value] pairs")
        self.enter()
        self.enter()
        keys: list[Any] = []
        values: list[Any] = []
        for index, pair in enumerate(pairs):
            if type(pair) is not list or len(pair) != 2:
                bad = _bad_payload("dict", "a [key, value] pair", pair)
                bad.path.append(f".v[{index}]")
                raise bad
            for position, target in enumerate((keys, values)):
                try:
                    target.append(self.value(pair[position]))
                except _Bad as bad:
                    bad.path.append(f".v[{index}][{position}]")
                    raise
        self.depth -= 2
        return dict(zip(self.hashed(keys, "dict"), values, strict=True))

    def enum(self, obj: dict[str, Any]) -> Any:
        path = obj.get("cls")
        if type(path) is not str:
            raise _bad_payload("enum", "a class path in 'cls'", path)
        value = self.value(obj["v"])
        try:
            cls = (import_class if self.trusted_import else find_class)(path, where="an enum tag")
        except CorruptSessionError as exc:
            raise _Bad(str(exc).removesuffix("; nothing was loaded.")) from exc
        if cls is None:
            if self.on_unknown_class == "base":
                return value
            msg = (
                f"enum class {path!r} is not defined in this process; import the module that "
                "defines it before loading, pass on_unknown_class='base' to load the plain value, "
                "or pass trusted_import=True to import it by name (only for input you trust)"
            )
            raise _Bad(msg)
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise _Bad(f"class {path!r} named in an enum tag is not an Enum")
        return cls(value)

    def numpy(self, tag: str) -> Any:
        try:
            import numpy as np
        except ImportError as exc:
            error = missing_dependency("numpy", "numpy")
            reason = str(error).rstrip(".")
            bad = _Bad(f"the {tag!r} tag needs numpy: {reason}", MissingDependencyError)
            raise bad from exc
        return np

    def dtype(self, np: Any, obj: dict[str, Any], tag: str) -> Any:
        text = obj.get("dtype")
        if type(text) is not str or not _DTYPE.fullmatch(text):
            raise _bad_payload(tag, "a numpy dtype string such as '<f8'", text)
        dtype = np.dtype(text)
        if dtype.hasobject:
            raise _bad_payload(tag, "a dtype that is not 'object'", text)
        return dtype

    def ndarray(self, obj: dict[str, Any]) -> Any:
        np = self.numpy("ndarray")
        dtype = self.dtype(np, obj, "ndarray")
        raw = base64.b64decode(self.payload(obj, "ndarray", str, "base64 text"), validate=True)
        shape = obj.get("shape")
        if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
            raise _bad_payload("ndarray", "a shape of ints >= 0", shape)
        count = 1
        for n in shape:
            count *= n
        # The array is made from the bytes given, so it can be no larger than
        # the input; a shape or dtype claiming more is refused before numpy sees it.
        if dtype.itemsize == 0 or count * dtype.itemsize != len(raw):
            msg = f"the 'ndarray' tag's shape {shape} and dtype {dtype.str} do not match its {len(raw)} bytes"
            raise _Bad(msg)
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape).copy()

    def npscalar(self, obj: dict[str, Any]) -> Any:
        np = self.numpy("npscalar")
        dtype = self.dtype(np, obj, "npscalar")
        value = self.value(obj["v"])
        if dtype.kind in "SUV":
            # Flexible types allocate their declared size: it must fit the value given.
            if type(value) not in (str, bytes) or dtype.itemsize > 4 * len(value):
                raise _bad_payload("npscalar", f"a value that fills dtype {dtype.str}", value)
        elif dtype.itemsize > 16 or type(value) not in _NPSCALAR_VALUES:
            raise _bad_payload("npscalar", f"a number, text or date for dtype {dtype.str}", value)
        # Through an array, ints keep a datetime64's unit (ns, ...); errstate makes
        # a value that overflows the dtype an error (FloatingPointError), not a warning.
        with np.errstate(all="raise"):
            return np.array(value, dtype=dtype)[()]


def check_on_unknown_class(value: Any) -> None:
    """Refuse an ``on_unknown_class`` other than ``"error"`` or ``"base"``.

    Raises:
        InvalidArgumentError: naming the value given.
    """
    if value not in ("error", "base"):
        msg = f"on_unknown_class must be 'error' or 'base', got {value!r}."
        raise InvalidArgumentError(msg)


# What numpy dtype.str looks like: byte order, kind, item size, datetime unit.
_DTYPE: Final = re.compile(r"[<>|=]?[a-zA-Z?]\d{0,9}(\[\d{0,9}[a-zA-Z]{1,3}\])?")
_NPSCALAR_VALUES: Final = frozenset(
    {bool, int, float, complex, str, bytes, dt.datetime, dt.date, dt.timedelta, type(None)}
)


def _decode_datetime(dec: _Decoder, obj: dict[str, Any]) -> dt.datetime:
    value = dt.datetime.fromisoformat(dec.payload(obj, "datetime", str, "ISO 8601 text"))
    zone = obj.get("tz")
    if zone is None:
        return value
    fold = obj.get("fold", 0)
    if type(zone) is not str or fold not in (0, 1):
        raise _bad_payload("datetime", "a zone name in 'tz' and a 'fold' of 0 or 1", obj)
    return value.replace(tzinfo=zoneinfo.ZoneInfo(zone), fold=fold)


def _decode_path(dec: _Decoder, obj: dict[str, Any]) -> Any:
    text = dec.payload(obj, "path", str, "the path as text")
    flavor = obj.get("flavor", "Path")
    cls = _PATH_CLASSES.get(flavor) if type(flavor) is str else None
    if cls is None:
        raise _bad_payload("path", f"a flavor among {list(_PATH_CLASSES)}", obj.get("flavor"))
    return cls(text)


def _decode_float(dec: _Decoder, obj: dict[str, Any]) -> float:
    text = obj["v"]
    if text not in ("nan", "inf", "-inf"):
        raise _bad_payload("float", "'nan', 'inf' or '-inf'", text)
    return float(text)


def _decode_int(dec: _Decoder, obj: dict[str, Any]) -> int:
    text = dec.payload(obj, "int", str, "decimal digits as text")
    if not _INT_TEXT.fullmatch(text):
        raise _bad_payload("int", "decimal digits as text", text)
    return int(text)


def _decode_timedelta(dec: _Decoder, obj: dict[str, Any]) -> dt.timedelta:
    parts = dec.payload(obj, "timedelta", list, "[days, seconds, microseconds]")
    if len(parts) != 3 or not all(type(n) is int for n in parts):
        raise _bad_payload("timedelta", "[days, seconds, microseconds] as ints", parts)
    return dt.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])


def _decode_complex(dec: _Decoder, obj: dict[str, Any]) -> complex:
    parts = dec.sequence(obj, "complex")
    if len(parts) != 2 or not all(type(n) in (int, float) for n in parts):
        raise _bad_payload("complex", "[real, imag] as numbers", obj["v"])
    return complex(parts[0], parts[1])


def _decode_base64(dec: _Decoder, obj: dict[str, Any]) -> bytes:
    return base64.b64decode(dec.payload(obj, obj[TAG], str, "base64 text"), validate=True)


def _text(tag: str, parse: Callable[[str], Any]) -> Callable[[_Decoder, dict[str, Any]], Any]:
    """Return a decoder for a tag whose payload is one string."""
    return lambda dec, obj: parse(dec.payload(obj, tag, str, "text"))


_INT_TEXT: Final = re.compile(r"-?[0-9]+")
_PATH_CLASSES: Final[dict[str, type[pathlib.PurePath]]] = {
    "Path": pathlib.Path,
    "PurePath": pathlib.PurePath,
    "PurePosixPath": pathlib.PurePosixPath,
    "PureWindowsPath": pathlib.PureWindowsPath,
}

_DECODERS: Final[dict[str, Callable[[_Decoder, dict[str, Any]], Any]]] = {
    "float": _decode_float,
    "int": _decode_int,
    "tuple": lambda dec, o: tuple(dec.sequence(o, "tuple")),
    "set": lambda dec, o: set(dec.hashed(dec.sequence(o, "set"), "set")),
    "frozenset": lambda dec, o: frozenset(dec.hashed(dec.sequence(o, "frozenset"), "frozenset")),
    "dict": lambda dec, o: dec.dict_pairs(o),
    "bytes": _decode_base64,
    "bytearray": lambda dec, o: bytearray(_decode_base64(dec, o)),
    "datetime": _decode_datetime,
    "date": _text("date", dt.date.fromisoformat),
    "time": _text("time", dt.time.fromisoformat),
    "timedelta": _decode_timedelta,
    "uuid": _text("uuid", uuid.UUID),
    "decimal": _text("decimal", Decimal),
    "complex": _decode_complex,
    "path": _decode_path,
    "enum": lambda dec, o: dec.enum(o),
    "ndarray": lambda dec, o: dec.ndarray(o),
    "npscalar": lambda dec, o: dec.npscalar(o),
}

TAGS: Final = frozenset(_DECODERS)
"""Every type tag the codec writes under :data:`TAG` in a value (``{"$kv": "<tag>", "v": ...}``); the item wrapper's ``"item"`` is not one."""


def decode_value(
    obj: Any,
    *,
    where: str = "value",
    on_unknown_class: OnUnknownClass = "error",
    trusted_import: bool = False,
) -> Any:
    """Return the value that :func:`encode_value` turned into ``obj``.

    Args:
        obj: Decoded JSON.
        where: Names the value in error messages.
        on_unknown_class: ``"base"`` gives the plain value of an enum tag whose
            class this process does not define, instead of raising.
        trusted_import: Import modules named by enum tags (runs their code;
            only for input you trust).

    Raises:
        CorruptSessionError: naming ``where`` and the JSON path of an unknown
            tag or a malformed payload.
        MissingDependencyError: if a numpy tag is read without numpy installed.
    """
    decoder = _Decoder(on_unknown_class=on_unknown_class, trusted_import=trusted_import)
    try:
        return decoder.value(obj)
    except _Bad as bad:
        bad.raise_for(where)


def unwrap(
    obj: Any,
    *,
    where: str,
    on_unknown_class: OnUnknownClass = "error",
    trusted_import: bool = False,
) -> tuple[str | None, dict[str, Any]]:
    """Split one item's wire form into its class path and decoded fields.

    Args:
        obj: A field object or a wrapped item, as produced by :func:`encode_fields`.
        where: Names the item in error messages (``"item 3 of 'run.json'"``).
        on_unknown_class: See :func:`decode_value`.
        trusted_import: See :func:`decode_value`.

    Raises:
        CorruptSessionError: if ``obj`` is not an object or a field is malformed,
            naming the field's JSON path (``$.fields.args[1]``).
    """
    if type(obj) is not dict:
        msg = f"{where} is a JSON {type(obj).__name__}, expected an object of fields; nothing was loaded."
        raise CorruptSessionError(msg)
    if obj.get(TAG) != "item":
        if TAG in obj:
            shown = repr(obj[TAG])[:60]
            msg = f"{where} carries an unknown {TAG!r} marker {shown}; nothing was loaded."
            raise CorruptSessionError(msg)
        return None, obj
    fields = obj.get("fields")
    class_name = obj.get("class")
    if type(fields) is not dict or not (class_name is None or type(class_name) is str):
        msg = f"{where} is a wrapped item without a 'fields' object and a 'class' string; nothing was loaded."
        raise CorruptSessionError(msg)
    decoded = decode_fields(
        fields,
        where=where,
        on_unknown_class=on_unknown_class,
        trusted_import=trusted_import,
        path=".fields",
    )
    return class_name, decoded


def decode_fields(
    fields: dict[str, Any],
    *,
    where: str,
    on_unknown_class: OnUnknownClass = "error",
    trusted_import: bool = False,
    path: str = "",
) -> dict[str, Any]:
    """Return a new dict of ``fields`` with every value decoded (see :func:`decode_value`).

    Args:
        fields: A field object as decoded from JSON.
        where: Names the item in error messages.
        on_unknown_class: See :func:`decode_value`.
        trusted_import: See :func:`decode_value`.
        path: The JSON path of ``fields`` inside the item (``".fields"`` for a wrapped item).

    Raises:
        CorruptSessionError: naming ``where`` and the path of a malformed value.
    """
    decoder = _Decoder(on_unknown_class=on_unknown_class, trusted_import=trusted_import)
    decoded: dict[str, Any] = {}
    try:
        for key, value in fields.items():
            try:
                decoded[key] = decoder.value(value)
            except _Bad as bad:
                bad.path.append(path + _key_segment(key))
                raise
    except _Bad as bad:
        bad.raise_for(where)
    return decoded


# -- versioned documents -------------------------------------------------------


def check_format(
    document: Any, *, source: str, name: str, version: int, kind: str
) -> dict[str, Any]:
    """Check that ``document`` is a ``name`` document this library can read, and return it.

    Args:
        document: The decoded JSON document.
        source: Names the file or stream in error messages.
        name: The expected ``"format"`` value.
        version: The newest ``"version"`` this library reads.
        kind: What the document is, for messages (``"kvmemory session"``).

    Raises:
        CorruptSessionError: if it is not such a document or its version is invalid.
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    if type(document) is not dict or document.get("format") != name:
        msg = f"{source} is not a {kind} (no 'format': {name!r} header); nothing was loaded."
        raise CorruptSessionError(msg)
    found = document.get("version")
    if type(found) is not int or found < 1:
        msg = f"{source} has an invalid format version {found!r}; nothing was loaded."
        raise CorruptSessionError(msg)
    if found > version:
        msg = (
            f"{source} uses {kind} format version {found}, newer than the "
            f"{version} this kvmemory reads; upgrade kvmemory to load it."
        )
        raise UnsupportedVersionError(msg)
    return document


def file_path(path: Any, *, what: str = "path") -> str:
    """Return ``path`` as a string, refusing what the OS would misread.

    A NUL byte ends a path at the system call, so ``"run.json\\0.txt"`` would
    quietly name ``run.json``; Python refuses it with a bare ``ValueError``.
    Here both mistakes get a message naming the path.

    Raises:
        ArgumentTypeError: if ``path`` is not a string or path-like object of text.
        InvalidArgumentError: if the path is empty or holds a NUL byte.
    """
    try:
        text = os.fspath(path)
    except TypeError as exc:
        msg = f"The {what} must be a str or os.PathLike, got {type(path).__name__}."
        raise ArgumentTypeError(msg) from exc
    if type(text) is not str:
        msg = f"The {what} must be text, got {type(text).__name__} {text!r}; decode it with os.fsdecode()."
        raise ArgumentTypeError(msg)
    if not text or "\0" in text:
        msg = f"The {what} {text!r} is empty or holds a NUL byte, which no file name can contain."
        raise InvalidArgumentError(msg)
    return text


def atomic_write(path: str | os.PathLike[str], chunks: Iterable[bytes | memoryview]) -> None:
    """Write ``chunks`` to ``path`` atomically: temporary file, fsync, rename.

    A reader sees either the old file or the complete new one, never a part.
    The temporary file is removed if writing fails.

    Raises:
        ArgumentTypeError: if ``path`` is not a path.
        InvalidArgumentError: if ``path`` is empty or holds a NUL byte.
    """
    target = file_path(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".kvmemory-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    # The rename is durable only once the directory entry is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems without directory fsync
        pass
    finally:
        os.close(fd)
