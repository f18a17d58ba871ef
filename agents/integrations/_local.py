"""What kvmemory's local servers (``kvmemory mcp --http``, ``kvmemory serve``) share."""

from __future__ import annotations

import os
from typing import Final

from agents.memory.exceptions import InvalidArgumentError

__all__ = ["LOOPBACK", "image_root"]

LOOPBACK: Final = ("127.0.0.1", "localhost", "::1")
"""Hosts a server may bind without a token: only this machine reaches them."""


def image_root(folder: str | os.PathLike[str]) -> str:
    """Return the real path of a folder images may be read from.

    Raises:
        InvalidArgumentError: if ``folder`` is not a directory.
    """
    path = os.path.realpath(os.fspath(folder))
    if not os.path.isdir(path):
        msg = (
            f"The image folder {os.fspath(folder)!r} is not a directory; create it or pass another."
        )
        raise InvalidArgumentError(msg)
    return path
