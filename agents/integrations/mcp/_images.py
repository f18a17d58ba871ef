"""Which images a client may attach: data URLs, and paths inside one folder the server names."""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from typing import Any, Final

from agents.integrations.mcp._checks import brief, json_type
from agents.integrations.mcp._limits import MAX_IMAGE_BYTES, MAX_IMAGES
from agents.integrations.mcp._scope import ToolArgumentError
from agents.memory.prompt import DEFAULT_IMAGE_KEYS

__all__ = ["ImagePolicy"]

_DATA_URL: Final = re.compile(r"data:(image/(?:png|jpeg|gif|webp));base64,([A-Za-z0-9+/=\s]*)")


class ImagePolicy:
    """Check the images a client sends: a data URL is kept as sent, a path must lie in ``folder``.

    Args:
        folder: The real path of the folder image paths must lie in, or ``None``
            to accept data URLs only.
    """

    def __init__(self, folder: str | None) -> None:
        self.folder = folder

    def check_list(self, value: object, argument: str = "images") -> list[str]:
        """Return the ``images`` argument checked: at most 8 data URLs or paths."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise ToolArgumentError(
                argument, f"must be a list of data URLs or paths, got {json_type(value)}."
            )
        if len(value) > MAX_IMAGES:
            raise ToolArgumentError(
                argument, f"holds {len(value)} images; the limit is {MAX_IMAGES}."
            )
        return [self.check(ref, argument) for ref in value]

    def check_fields(self, fields: dict[str, Any], argument: str) -> None:
        """Check, in place, the image fields (``image``, ``screenshot``, ...) of ``fields``.

        Renderers and chat exports read image fields from disk: a path a client
        names there must pass the same checks as the ``images`` argument.
        """
        for key in DEFAULT_IMAGE_KEYS:
            if key in fields:
                refs = fields[key] if isinstance(fields[key], list) else [fields[key]]
                if len(refs) > MAX_IMAGES:
                    raise ToolArgumentError(
                        argument,
                        f"field {key!r} holds {len(refs)} images; the limit is {MAX_IMAGES}.",
                    )
                checked = [self.check(ref, argument) for ref in refs]
                fields[key] = checked if isinstance(fields[key], list) else checked[0]

    def check(self, ref: object, argument: str = "images") -> str:
        """Return one image reference checked: a data URL as sent, a path as its real path."""
        if type(ref) is not str or not ref:
            raise ToolArgumentError(
                argument, f"must hold data URLs or paths (strings), got {brief(ref)}."
            )
        if ref.startswith("data:"):
            return self._data_url(ref, argument)
        return self._path(ref, argument)

    def _data_url(self, ref: str, argument: str) -> str:
        if len(ref) > MAX_IMAGE_BYTES * 4 // 3 + 100:
            raise ToolArgumentError(
                argument, f"a data URL is larger than the {MAX_IMAGE_BYTES} byte limit."
            )
        match = _DATA_URL.fullmatch(ref)
        if match is None:
            raise ToolArgumentError(
                argument,
                "a data URL must read data:image/(png|jpeg|gif|webp);base64,<base64 bytes>.",
            )
        try:
            data = base64.b64decode("".join(match.group(2).split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolArgumentError(argument, f"a data URL holds invalid base64 ({exc}).") from exc
        if not data:
            raise ToolArgumentError(argument, "a data URL holds no bytes.")
        return ref

    def _path(self, ref: str, argument: str) -> str:
        if self.folder is None:
            raise ToolArgumentError(
                argument,
                f"{brief(ref)} is a path, and this server accepts no image paths; send a data URL, "
                "or start the server with an image folder (kvmemory mcp --images DIR).",
            )
        if "\x00" in ref:
            raise ToolArgumentError(argument, "a path holds a NUL character.")
        path = os.path.realpath(os.path.join(self.folder, ref))
        if os.path.commonpath([path, self.folder]) != self.folder:
            raise ToolArgumentError(
                argument, f"path {brief(ref)} lies outside the image folder {self.folder!r}."
            )
        try:
            info = os.stat(path)
        except OSError as exc:
            raise ToolArgumentError(
                argument, f"path {brief(ref)} cannot be read ({exc.strerror or exc})."
            ) from exc
        if not stat.S_ISREG(info.st_mode):
            raise ToolArgumentError(argument, f"path {brief(ref)} is not a regular file.")
        if info.st_size > MAX_IMAGE_BYTES:
            raise ToolArgumentError(
                argument,
                f"file {brief(ref)} is {info.st_size} bytes; the limit is {MAX_IMAGE_BYTES}.",
            )
        return path
