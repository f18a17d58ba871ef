"""Images in prompt material: which fields name images, and images as URLs a chat API accepts.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agents.memory.exceptions import ImageReadError

__all__ = [
    "DEFAULT_IMAGE_KEYS",
    "MAX_IMAGE_BYTES",
    "count_images",
    "image_data_url",
    "image_refs",
    "is_image_url",
]

DEFAULT_IMAGE_KEYS: Final[tuple[str, ...]] = (
    "image",
    "image_path",
    "image_url",
    "images",
    "screenshot",
    "screenshot_path",
    "screenshots",
)
"""Field keys whose string values (or lists of strings) are read as image paths or URLs."""

MAX_IMAGE_BYTES: Final = 20 * 1024 * 1024
"""The largest image file read into a prompt (20 MiB, the limit chat APIs commonly set)."""

_URL_PREFIXES: Final = ("http://", "https://", "data:")


def is_image_url(ref: str) -> bool:
    """Return whether ``ref`` is a URL (``http://``, ``https://`` or ``data:``, any case) rather than a path."""
    return ref[:8].lower().startswith(_URL_PREFIXES)


def image_refs(value: Any) -> list[str]:
    """Return the image paths or URLs held by a field value (a string or a list of strings)."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, os.PathLike):
        return [os.fspath(value)]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str) and v]
    return []


def count_images(record: Mapping[str, Any], image_keys: Sequence[str]) -> int:
    return sum(len(image_refs(record[k])) for k in image_keys if k in record)


_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_data_url(ref: str | os.PathLike[str], *, max_bytes: int = MAX_IMAGE_BYTES) -> str:
    """Return an image reference as a URL a chat API accepts.

    URLs (``http://``, ``https://``, ``data:``, the scheme in any case) are returned unchanged. A path
    is read now and returned as a ``data:`` URL with the image's MIME type
    (from the file's contents, or its suffix when the contents are not
    recognised) and its bytes in base64. Only regular files are read, and at
    most ``max_bytes`` of them: a path naming a device (``/dev/zero``), a pipe
    or a huge file fails at once instead of filling memory or blocking.

    Args:
        ref: A path or URL.
        max_bytes: The largest file accepted.

    Raises:
        ImageReadError: naming the path if it cannot be read, is not a regular
            file, is larger than ``max_bytes`` or is not an image.
    """
    text = os.fspath(ref)
    if is_image_url(text):
        return text
    if "\0" in text:
        msg = f"Image path {text!r} holds a NUL byte, which no file name can contain; store the image's real path."
        raise ImageReadError(msg)
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer.
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        msg = f"Image {text!r} cannot be read ({exc.strerror or exc}); store an existing path or an http(s) URL."
        raise ImageReadError(msg) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        msg = f"Image {text!r} is not a regular file (a device, pipe or directory); store the path of an image file."
        raise ImageReadError(msg)
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        msg = (
            f"Image {text!r} is larger than max_bytes={max_bytes} bytes; "
            "store a smaller image, or pass a larger max_bytes."
        )
        raise ImageReadError(msg)
    mime = _sniff(data) or mimetypes.guess_type(text)[0]
    if mime is None or not mime.startswith("image/"):
        msg = f"File {text!r} is not a recognised image (PNG, JPEG, GIF, BMP, WebP or an image suffix); store an image path."
        raise ImageReadError(msg)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
