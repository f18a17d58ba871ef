"""Images in prompt material: which fields name images, and images as URLs a chat API accepts.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

import base64
import mimetypes
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agents.memory.exceptions import ImageReadError

__all__ = ["DEFAULT_IMAGE_KEYS", "count_images", "image_data_url", "image_refs"]

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

_URL_PREFIXES: Final = ("http://", "https://", "data:")


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


def image_data_url(ref: str | os.PathLike[str]) -> str:
    """Return an image reference as a URL a chat API accepts.

    URLs (``http://``, ``https://``, ``data:``) are returned unchanged. A path
    is read now and returned as a ``data:`` URL with the image's MIME type
    (from the file's contents, or its suffix when the contents are not
    recognised) and its bytes in base64.

    Raises:
        ImageReadError: naming the path if it cannot be read or is not an image.
    """
    text = os.fspath(ref)
    if text.startswith(_URL_PREFIXES):
        return text
    try:
        with open(text, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        msg = f"Image {text!r} cannot be read ({exc.strerror or exc}); store an existing path or an http(s) URL."
        raise ImageReadError(msg) from exc
    mime = _sniff(data) or mimetypes.guess_type(text)[0]
    if mime is None or not mime.startswith("image/"):
        msg = f"File {text!r} is not a recognised image (PNG, JPEG, GIF, BMP, WebP or an image suffix); store an image path."
        raise ImageReadError(msg)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
