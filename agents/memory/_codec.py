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
* **Session documents.** A versioned envelope for one JSON document and a
  JSONL stream (header line, then one item per line), both refused with a
  clear error when they are corrupt or newer than this library.

Besides that lossless, compact form, :func:`dumps_ufo` writes the JSON UFO
writes (Python's ``json.dumps`` with its defaults) and tags only the values
``json.dumps`` refuses; :func:`loads` reads both.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import enum
import importlib
import json
import os
import pathlib
import tempfile
import uuid
import zoneinfo
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import IO, Any, Final, Literal

import orjson

from agents.memory.exceptions import (
    CorruptSessionError,
    SerializationError,
    UnsupportedVersionError,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "TAG",
    "OnUnencodable",
    "atomic_write",
    "decode_session",
    "decode_value",
    "dumps",
    "dumps_ufo",
    "dumps_ufo_rows",
    "encode_fields",
    "encode_value",
    "envelope",
    "is_plain",
    "iter_jsonl",
    "loads",
    "unwrap",
]

OnUnencodable = Literal["error", "repr", "drop"]
"""What to do with a value the codec cannot encode: raise, write ``repr()``, or drop the field."""

TAG: Final = "$kv"
FORMAT_NAME: Final = "kvmemory.session"
FORMAT_VERSION: Final = 1

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


def _refuse(value: Any) -> Any:
    # Reached only when a caller hands orjson something encode_value did not
    # prepare; the per-field encoder reports such values with their key first.
    msg = f"Cannot encode a value of type {_type_name(value)} as JSON."
    raise TypeError(msg)


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
        except ValueError:
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


def import_class(path: str) -> Any:
    """Import the object named by a ``"module:qualname"`` path.

    Raises:
        CorruptSessionError: if the path is malformed or does not import.
    """
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        msg = f"Class path {path!r} is not of the form 'module:QualName'."
        raise CorruptSessionError(msg)
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        msg = f"Class {path!r} named in the session cannot be imported ({exc}); import the module that defines it first."
        raise CorruptSessionError(msg) from exc
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
            return value if _INT_MIN <= value <= _INT_MAX else self.tag("int", str(value))
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

    def unencodable(self, value: Any, why: str) -> Any:
        if self.policy == "repr":
            return repr(value)
        if self.policy == "drop":
            raise _DropField
        where = "A value" if self.key is None else f"Field {self.key!r}"
        if self.step is not None:
            where += f" of step {self.step!r}"
        reason = f"; {why}" if why else ""
        msg = (
            f"{where} cannot be encoded as JSON (got {_type_name(value)}{reason}); "
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


def _decode_datetime(obj: dict[str, Any]) -> dt.datetime:
    value = dt.datetime.fromisoformat(obj["v"])
    zone = obj.get("tz")
    if zone is None:
        return value
    return value.replace(tzinfo=zoneinfo.ZoneInfo(zone), fold=obj.get("fold", 0))


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
        raise ValueError(msg)


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
    except (TypeError, ValueError):
        # The slow path, one field at a time, to name the field and apply the policy.
        ready = [_ufo_fields(fields, step_key, on_unencodable) for fields in rows]
        return json.dumps(ready, default=_UfoDefault(on_unencodable))


def _ufo_fields(
    fields: Mapping[str, Any], step_key: str, on_unencodable: OnUnencodable
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    step = fields.get(step_key)
    for key, value in fields.items():
        try:
            json.dumps(value, default=_UfoDefault(on_unencodable))
        except ValueError as exc:
            where = f"Field {key!r}" + (f" of step {step!r}" if step is not None else "")
            msg = f"{where} cannot be encoded as JSON ({exc}); remove the reference cycle."
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


def _decode_ndarray(obj: dict[str, Any]) -> Any:
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - numpy is installed wherever tests run
        from agents.memory.exceptions import missing_dependency

        raise missing_dependency("numpy", "numpy") from exc
    raw = base64.b64decode(obj["v"])
    return np.frombuffer(raw, dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()


def _decode_npscalar(obj: dict[str, Any]) -> Any:
    import numpy as np

    return np.dtype(obj["dtype"]).type(decode_value(obj["v"]))


def _decode_enum(obj: dict[str, Any]) -> Any:
    cls = import_class(obj["cls"])
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        msg = f"Class {obj['cls']!r} named in an enum tag is not an Enum."
        raise CorruptSessionError(msg)
    return cls(decode_value(obj["v"]))


def _decode_path(obj: dict[str, Any]) -> Any:
    flavor = obj.get("flavor", "Path")
    cls = {
        "Path": pathlib.Path,
        "PurePath": pathlib.PurePath,
        "PurePosixPath": pathlib.PurePosixPath,
        "PureWindowsPath": pathlib.PureWindowsPath,
    }[flavor]
    return cls(obj["v"])


def _decode_float(obj: dict[str, Any]) -> float:
    text = obj["v"]
    if text not in ("nan", "inf", "-inf"):
        msg = f"Float tag holds {text!r}; expected 'nan', 'inf' or '-inf'."
        raise CorruptSessionError(msg)
    return float(text)


_DECODERS: Final[dict[str, Callable[[dict[str, Any]], Any]]] = {
    "float": _decode_float,
    "int": lambda o: int(o["v"]),
    "tuple": lambda o: tuple(decode_value(x) for x in o["v"]),
    "set": lambda o: {decode_value(x) for x in o["v"]},
    "frozenset": lambda o: frozenset(decode_value(x) for x in o["v"]),
    "dict": lambda o: {decode_value(k): decode_value(v) for k, v in o["v"]},
    "bytes": lambda o: base64.b64decode(o["v"], validate=True),
    "bytearray": lambda o: bytearray(base64.b64decode(o["v"], validate=True)),
    "datetime": _decode_datetime,
    "date": lambda o: dt.date.fromisoformat(o["v"]),
    "time": lambda o: dt.time.fromisoformat(o["v"]),
    "timedelta": lambda o: dt.timedelta(days=o["v"][0], seconds=o["v"][1], microseconds=o["v"][2]),
    "uuid": lambda o: uuid.UUID(o["v"]),
    "decimal": lambda o: Decimal(o["v"]),
    "complex": lambda o: complex(decode_value(o["v"][0]), decode_value(o["v"][1])),
    "path": _decode_path,
    "enum": _decode_enum,
    "ndarray": _decode_ndarray,
    "npscalar": _decode_npscalar,
}


def decode_value(obj: Any) -> Any:
    """Return the value that :func:`encode_value` turned into ``obj``.

    Raises:
        CorruptSessionError: if a tag is unknown or its payload is malformed.
    """
    cls = type(obj)
    if cls is list:
        return [decode_value(x) for x in obj]
    if cls is not dict:
        return obj
    tag = obj.get(TAG)
    if tag is None:
        return {k: decode_value(v) for k, v in obj.items()}
    decoder = _DECODERS.get(tag)
    if decoder is None:
        msg = f"Unknown type tag {tag!r}; the session was written by another library or a newer kvmemory."
        raise CorruptSessionError(msg)
    try:
        return decoder(obj)
    except CorruptSessionError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        msg = f"Malformed {tag!r} value {obj!r}: {exc}."
        raise CorruptSessionError(msg) from exc


def unwrap(obj: Any, *, where: str) -> tuple[str | None, dict[str, Any]]:
    """Split one item's wire form into its class path and decoded fields.

    Args:
        obj: A field object or a wrapped item, as produced by :func:`encode_fields`.
        where: Names the item in error messages (``"item 3 of 'run.json'"``).

    Raises:
        CorruptSessionError: if ``obj`` is not an object or a field is malformed.
    """
    if type(obj) is not dict:
        msg = f"{where} is a JSON {type(obj).__name__}, expected an object of fields; nothing was loaded."
        raise CorruptSessionError(msg)
    if obj.get(TAG) != "item":
        if TAG in obj:
            msg = f"{where} carries an unknown {TAG!r} marker {obj[TAG]!r}; nothing was loaded."
            raise CorruptSessionError(msg)
        return None, obj
    fields = obj.get("fields")
    class_name = obj.get("class")
    if type(fields) is not dict or not (class_name is None or type(class_name) is str):
        msg = f"{where} is a wrapped item without a 'fields' object; nothing was loaded."
        raise CorruptSessionError(msg)
    try:
        decoded = {k: decode_value(v) for k, v in fields.items()}
    except CorruptSessionError as exc:
        msg = f"{where}: {exc}"
        raise CorruptSessionError(msg) from exc
    return class_name, decoded


# -- session documents ---------------------------------------------------------


def envelope(
    *,
    session_id: str | None,
    created_at: str,
    metadata: Mapping[str, Any],
    step_key: str,
) -> dict[str, Any]:
    """Return the header of a session document, without its items."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "session_id": session_id,
        "created_at": created_at,
        "step_key": step_key,
        "metadata": encode_value(dict(metadata)),
    }


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


def check_header(header: Any, *, source: str) -> dict[str, Any]:
    """Validate a session header and return it with its metadata decoded.

    Raises:
        CorruptSessionError: if it is not a kvmemory session header.
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    check_format(
        header, source=source, name=FORMAT_NAME, version=FORMAT_VERSION, kind="kvmemory session"
    )
    out = dict(header)
    out["metadata"] = decode_value(header.get("metadata") or {})
    return out


def decode_session(data: bytes | str, *, source: str) -> tuple[dict[str, Any], list[Any]]:
    """Read one JSON session document: a versioned envelope, or UFO's bare array.

    Returns:
        The header (empty for a bare array) and the items' wire forms.

    Raises:
        CorruptSessionError: if the document is invalid JSON or not a session.
        UnsupportedVersionError: if a newer version of the format wrote it.
    """
    doc = loads(data, source=source)
    if type(doc) is list:
        return {}, doc
    header = check_header(doc, source=source)
    items = header.pop("items", None)
    if type(items) is not list:
        msg = f"{source} has no 'items' array; nothing was loaded."
        raise CorruptSessionError(msg)
    return header, items


def iter_jsonl(stream: IO[bytes], *, source: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, decoded_json)`` for each non-blank line of a JSONL stream.

    Raises:
        CorruptSessionError: naming the line of the first invalid JSON line.
    """
    for lineno, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield lineno, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            truncated = "" if line.endswith(b"\n") else " (the line is truncated)"
            msg = (
                f"{source} is not valid JSON at line {lineno}, column {exc.colno}"
                f"{truncated}; nothing was loaded."
            )
            raise CorruptSessionError(msg) from exc


def atomic_write(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` atomically: temporary file, fsync, rename.

    A reader sees either the old file or the complete new one, never a part.
    The temporary file is removed if writing fails.
    """
    target = os.fspath(path)
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
