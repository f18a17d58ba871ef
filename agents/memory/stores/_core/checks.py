"""The rules a session id and a store path follow, checked before any store touches them."""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Final

from agents.memory.exceptions import InvalidSessionIdError, InvalidStoreURLError

__all__ = ["SESSION_ID_MAX_LENGTH", "check_session_id", "check_store_path", "redact_url"]

SESSION_ID_MAX_LENGTH: Final = 128
"""The longest session id a store accepts, in characters."""
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a valid session id, else raise.

    A session id is 1 to 128 characters among ASCII letters, digits, ``_``,
    ``.`` and ``-``, and does not start with ``.`` or ``-``. It is matched
    exactly (no prefix or wildcard), and is safe as a file name and as a bound
    SQL parameter.

    Raises:
        InvalidSessionIdError: naming the id and the rule it breaks.
    """
    if type(session_id) is not str:
        msg = (
            f"A session id must be a string, got {session_id!r} ({type(session_id).__name__}); "
            "every store call names the session it reads or writes."
        )
        raise InvalidSessionIdError(msg)
    if not session_id:
        msg = "A session id must not be empty; pick a name such as 'run-1'."
        raise InvalidSessionIdError(msg)
    if len(session_id) > SESSION_ID_MAX_LENGTH:
        msg = (
            f"Session id {session_id[:40]!r}... is {len(session_id)} characters long; "
            f"the limit is {SESSION_ID_MAX_LENGTH}."
        )
        raise InvalidSessionIdError(msg)
    if _SESSION_ID.fullmatch(session_id) is None:
        msg = (
            f"Session id {session_id!r} holds characters a store does not accept; use ASCII "
            "letters, digits, '_', '.' and '-' (not first), with no path separators, quotes or spaces."
        )
        raise InvalidSessionIdError(msg)
    return session_id


def check_store_path(path: str | os.PathLike[str]) -> str:
    """Return ``path`` as text if a store may live there, else raise.

    A NUL character cannot be part of a file name; the operating system would
    cut the path at it and open another file, so it is refused outright.

    Raises:
        InvalidStoreURLError: if the path is empty or holds a NUL character.
    """
    text = os.fspath(path)
    if type(text) is not str:
        msg = f"A store path must be text, got {path!r}."
        raise InvalidStoreURLError(msg)
    if "\x00" in text:
        msg = (
            f"Store path {text!r} holds a NUL character, which no file name can contain; remove it."
        )
        raise InvalidStoreURLError(msg)
    if not text:
        msg = "The store path is empty; pass a file or directory path."
        raise InvalidStoreURLError(msg)
    return text


def redact_url(url: str) -> str:
    """Return ``url`` with its password, if any, shown as ``***`` (for messages and ``store.url``)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
