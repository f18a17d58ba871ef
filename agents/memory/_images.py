"""Images in prompt material: which fields name images, and images as URLs a chat API accepts.

Part of :mod:`agents.memory.prompt`, which re-exports the public names.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
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
    "image_size",
    "image_url_problem",
    "is_image_url",
    "size_of_image_bytes",
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
_HTTP_URL: Final = re.compile(r"https?://[^\s/?#]+(?:[/?#]\S*)?", re.IGNORECASE)
_DATA_IMAGE_URL: Final = re.compile(r"data:image/[a-z0-9.+-]+;base64,", re.IGNORECASE)


def is_image_url(ref: str) -> bool:
    """Return whether ``ref`` is a URL (``http://``, ``https://`` or ``data:``, any case) rather than a path."""
    return ref[:8].lower().startswith(_URL_PREFIXES)


def image_url_problem(url: str) -> str | None:
    """Return why a chat API would refuse ``url`` as an image URL, or ``None`` when it takes it.

    Chat APIs take an ``http://`` or ``https://`` URL with a host, or a
    ``data:image/<type>;base64,...`` URL (the scheme in any case). Anything
    else (a local path, ``file:``, a ``data:`` URL of another type or without
    base64) is refused there, so it must not leave in a message.

    Args:
        url: The ``url`` of an ``image_url`` content part.

    Returns:
        A phrase to follow the URL in a message (``"is a local path ..."``), or ``None``.
    """
    if _DATA_IMAGE_URL.match(url) or _HTTP_URL.fullmatch(url):
        return None
    if url[:5].lower() == "data:":
        return "is a data: URL that is not data:image/<type>;base64,..., the only kind a chat API takes"
    if is_image_url(url):
        return "is not an http(s) URL with a host (and no spaces)"
    return "is not an http(s) or data:image/...;base64 URL but a local path (or another scheme), which a chat API refuses"


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


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Return (width, height) from a JPEG's first start-of-frame segment."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if length < 2:
            return None
        # SOF0..SOF15 carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) do not.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if pos + 9 > len(data):
                return None
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            return width, height
        pos += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(
            data[28:30], "little"
        ) & 0x3FFF
    return None


def size_of_image_bytes(data: bytes) -> tuple[int, int] | None:
    """Return (width, height) read from the header of a PNG, JPEG, GIF, BMP or WebP image.

    Only the header is parsed; nothing is decoded. Returns ``None`` for other
    formats and for headers too short or damaged to read.
    """
    size: tuple[int, int] | None = None
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24 and data[12:16] == b"IHDR":
        size = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    elif data.startswith((b"GIF87a", b"GIF89a")) and len(data) >= 10:
        size = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    elif data.startswith(b"\xff\xd8\xff"):
        size = _jpeg_size(data)
    elif data.startswith(b"BM") and len(data) >= 26:
        width = int.from_bytes(data[18:22], "little", signed=True)
        height = int.from_bytes(data[22:26], "little", signed=True)
        size = abs(width), abs(height)  # a negative height means rows stored top-down
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_size(data)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


_HEADER_BYTES: Final = 64 * 1024
_SIZE_CACHE: dict[tuple[str, int, int], tuple[int, int] | None] = {}
_SIZE_CACHE_LIMIT: Final = 1024


def _file_size_of(path: str) -> tuple[int, int] | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (path, info.st_mtime_ns, info.st_size)
        if key in _SIZE_CACHE:
            return _SIZE_CACHE[key]
        head = stream.read(_HEADER_BYTES)
        size = size_of_image_bytes(head)
        if size is None and head.startswith(b"\xff\xd8\xff") and info.st_size > len(head):
            # A JPEG's frame header can follow large metadata segments.
            size = size_of_image_bytes(head + stream.read(MAX_IMAGE_BYTES))
    if len(_SIZE_CACHE) >= _SIZE_CACHE_LIMIT:
        _SIZE_CACHE.clear()
    _SIZE_CACHE[key] = size
    return size


def image_size(ref: str | os.PathLike[str]) -> tuple[int, int] | None:
    """Return the (width, height) in pixels of an image path or ``data:`` URL, or ``None``.

    Paths are opened and only their header is read (sizes are cached by path,
    modification time and file size); base64 ``data:`` URLs are decoded.
    ``http(s)`` URLs are not fetched, so their size is unknown: ``None``, as
    for files that are missing or not a PNG, JPEG, GIF, BMP or WebP image.
    """
    text = os.fspath(ref)
    if text[:5].lower() == "data:":
        head, _, payload = text.partition(",")
        if not head.lower().endswith(";base64"):
            return None
        try:
            data = base64.b64decode(payload, validate=False)
        except (ValueError, TypeError):
            return None
        return size_of_image_bytes(data)
    if text[:7].lower() == "http://" or text[:8].lower() == "https://":
        return None
    return _file_size_of(text)


def image_mime_of(data: bytes) -> str | None:
    """Return the MIME type of image bytes, recognised by their contents only (never a name).

    Args:
        data: The first bytes of a file (16 are enough).

    Returns:
        ``"image/png"``, ``"image/jpeg"``, ``"image/gif"``, ``"image/bmp"``,
        ``"image/webp"``, or ``None`` when the bytes are none of these.
    """
    return _sniff(data)
