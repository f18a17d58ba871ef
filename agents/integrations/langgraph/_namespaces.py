"""LangGraph namespaces as kvmemory session ids, and back: one reversible spelling.

A namespace is a tuple of non-empty labels, ``("users", "ann", "memories")``.
Its session id is its labels joined by ``.``, each label spelled in the
characters a session id may hold:

* ASCII letters, digits and ``-`` stand for themselves (``-`` only after a
  label's first character);
* every other character (``.``, ``_``, ``/``, a space, a non-ASCII letter,
  a ``-`` that starts a label) is written ``_`` + its code point in
  lowercase hexadecimal without leading zeros + ``_``: ``.`` is ``_2e_``,
  ``_`` is ``_5f_``, ``é`` is ``_e9_``, ``中`` is ``_4e2d_``.

So ``("users", "ann", "memories")`` is the session ``users.ann.memories``
(``kvmemory show users.ann.memories`` shows it), ``("a.b", "c/d")`` is
``a_2e_b.c_2f_d``, and every spelling reads back to exactly one namespace:
:func:`session_to_namespace` accepts only the spelling
:func:`namespace_to_session` writes, and returns ``None`` for any other id
(a session that no namespace maps to). The id of a namespace starts with the
id of each of its ancestors followed by ``.``, so a namespace prefix is a
prefix of session ids.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Final

from agents.memory.exceptions import InvalidSessionIdError
from agents.memory.stores import SESSION_ID_MAX_LENGTH

__all__ = ["matches", "namespace_to_session", "session_to_namespace"]

_PLAIN: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_ESCAPED: Final = r"_(?:0|[1-9a-f][0-9a-f]*)_"
_LABEL: Final = re.compile(rf"(?:[A-Za-z0-9]|{_ESCAPED})(?:[A-Za-z0-9-]|{_ESCAPED})*")
_ESCAPE: Final = re.compile(r"_([0-9a-f]+)_")


def _label_id(label: str) -> str:
    out = []
    for index, char in enumerate(label):
        if char in _PLAIN and not (index == 0 and char == "-"):
            out.append(char)
        else:
            out.append(f"_{ord(char):x}_")
    return "".join(out)


def namespace_to_session(namespace: Sequence[str]) -> str:
    """Return the session id a namespace is stored under.

    Args:
        namespace: A tuple (or list) of one or more non-empty strings; any
            characters, dots, slashes and non-ASCII letters included.

    Returns:
        The session id, read back by :func:`session_to_namespace`.

    Raises:
        InvalidSessionIdError: if the namespace is empty, a label is not a
            non-empty string, or the spelling is longer than a session id
            may be (128 characters).
    """
    if isinstance(namespace, str) or not namespace or not isinstance(namespace, (tuple, list)):
        msg = f"A namespace is a non-empty tuple of labels such as ('users', 'ann'), got {namespace!r}."
        raise InvalidSessionIdError(msg)
    try:
        return _spelled(tuple(namespace))
    except TypeError:  # an unhashable label: refused below, naming it
        pass
    return _spell(tuple(namespace))


@functools.lru_cache(maxsize=4096)
def _spelled(namespace: tuple[str, ...]) -> str:
    """Return :func:`_spell` of a namespace, remembered: a store spells the same few namespaces over and over."""
    return _spell(namespace)


def _spell(namespace: tuple[str, ...]) -> str:
    parts = []
    for label in namespace:
        if type(label) is not str or not label:
            msg = f"Namespace {tuple(namespace)!r} holds the label {label!r}; every label must be a non-empty string."
            raise InvalidSessionIdError(msg)
        parts.append(_label_id(label))
    session_id = ".".join(parts)
    if len(session_id) > SESSION_ID_MAX_LENGTH:
        msg = (
            f"Namespace {tuple(namespace)!r} is spelled as a session id of {len(session_id)} characters; "
            f"the limit is {SESSION_ID_MAX_LENGTH} (characters other than ASCII letters, digits and '-' "
            "take 4 or more each); use shorter labels."
        )
        raise InvalidSessionIdError(msg)
    return session_id


def _label(text: str) -> str | None:
    """Return the label ``text`` spells, or ``None`` if :func:`namespace_to_session` never writes it."""
    if _LABEL.fullmatch(text) is None:
        return None
    try:
        label = _ESCAPE.sub(lambda match: chr(int(match.group(1), 16)), text)
    except (ValueError, OverflowError):  # a code point past Unicode's last
        return None
    # An escape of a character written plain, or a plain '-' first, is another spelling.
    return label if _label_id(label) == text else None


@functools.lru_cache(maxsize=4096)
def session_to_namespace(session_id: str) -> tuple[str, ...] | None:
    """Return the namespace stored under a session id, or ``None`` if no namespace maps to it.

    Args:
        session_id: A session id of the store.

    Returns:
        The namespace whose :func:`namespace_to_session` is ``session_id``,
        or ``None`` for an id spelled otherwise (``"run_1"``: a plain ``_``
        never appears in a namespace's id).
    """
    labels = []
    for text in session_id.split("."):
        label = _label(text)
        if label is None:
            return None
        labels.append(label)
    return tuple(labels)


def matches(namespace: tuple[str, ...], path: Sequence[str], *, suffix: bool = False) -> bool:
    """Return whether ``namespace`` starts (or, with ``suffix``, ends) with ``path``, ``"*"`` matching any one label."""
    if len(namespace) < len(path):
        return False
    labels = namespace[len(namespace) - len(path) :] if suffix else namespace[: len(path)]
    return all(want in ("*", have) for have, want in zip(labels, path, strict=True))
