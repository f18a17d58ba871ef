"""Images of smolagents steps as stored values, and back: PNG bytes, or raw pixels where PNG cannot hold the image exactly."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Mapping
from typing import Any, Final

from agents.memory.exceptions import CorruptSessionError

_PNG_EXACT: Final = frozenset({"1", "L", "LA", "RGB", "RGBA", "I;16"})
"""Pillow modes that a PNG file gives back exactly (mode and pixels); other images are stored raw."""

_BYTES_PER_PIXEL: Final = {
    "L": 1,
    "P": 1,
    "LA": 2,
    "La": 2,
    "PA": 2,
    "I;16": 2,
    "I;16B": 2,
    "I;16L": 2,
    "I;16N": 2,
    "RGB": 3,
    "YCbCr": 3,
    "LAB": 3,
    "HSV": 3,
    "RGBA": 4,
    "RGBa": 4,
    "RGBX": 4,
    "CMYK": 4,
    "I": 4,
    "F": 4,
}
"""The modes a raw image record may have, with the bytes of one pixel (mode ``1`` packs 8 to a byte)."""


def _png_mode(image: Any) -> Any:
    # A value outside the image lists (a code agent's action_output) is kept as
    # PNG bytes and read back as bytes: convert to the nearest mode PNG holds,
    # since a step callback that raises kills the agent's run.
    mode = image.mode
    if mode in _PNG_EXACT or mode in ("P", "I;16B"):
        return image
    if mode == "La":  # premultiplied alpha: Pillow converts it to LA only
        return image.convert("LA")
    if mode == "F" or mode == "I" or mode.startswith("I;"):
        # 32-bit and float greyscale -> 16-bit greyscale (clipped, fractions dropped);
        # F goes through I because Pillow's direct F -> I;16 passes through 8 bits.
        return (image.convert("I") if mode == "F" else image).convert("I;16")
    return image.convert("RGBA" if mode.endswith(("A", "a")) else "RGB")


def encode_png(image: Any) -> bytes:
    """Return an image as PNG bytes, converted first if PNG cannot hold its mode."""
    buffer = io.BytesIO()
    _png_mode(image).save(buffer, format="PNG")
    return buffer.getvalue()


def encode_image(image: Any) -> bytes | dict[str, Any]:
    """Return an image of a step as its stored value: PNG bytes, or a raw record where PNG is not exact.

    Images in modes PNG gives back exactly (``1``, ``L``, ``LA``, ``RGB``,
    ``RGBA``, ``I;16``, without a transparency entry) are PNG bytes. Any
    other (``CMYK``, ``F``, ``I``, ``I;16B``, a palette image, one with a
    transparency entry, ...) is a record ``{"mode", "size", "pixels"}``
    with the pixels as ``tobytes()`` gives them, zlib-compressed, plus
    ``"palette"`` (``[palette mode, bytes]``) and ``"transparency"`` where
    the image has them. Other ``info`` entries (dpi, ICC profile) are not kept.
    """
    mode = image.mode
    if mode in _PNG_EXACT and "transparency" not in image.info:
        return encode_png(image)
    if mode != "1" and mode not in _BYTES_PER_PIXEL:
        return encode_png(image)  # a mode Pillow added later: the nearest PNG mode
    record: dict[str, Any] = {
        "mode": mode,
        "size": list(image.size),
        "pixels": zlib.compress(image.tobytes()),
    }
    if mode in ("P", "PA") and image.palette is not None:
        palette_mode = image.palette.mode
        record["palette"] = [palette_mode, bytes(image.getpalette(palette_mode) or [])]
    transparency = image.info.get("transparency")
    if isinstance(transparency, tuple):
        record["transparency"] = list(transparency)
    elif isinstance(transparency, (int, bytes)):
        record["transparency"] = transparency
    return record


def is_image(value: Any) -> bool:
    """Return whether ``value`` is a PIL image (never imports Pillow for a value that is not)."""
    try:
        from PIL import Image
    except ImportError:  # without Pillow there are no PIL images to encode
        return False
    return isinstance(value, Image.Image)


_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_PNG_IHDR: Final = b"\x00\x00\x00\x0dIHDR"


def _png_size(data: bytes, where: str) -> tuple[int, int]:
    """Return the width and height a PNG's header claims, refusing bytes that are not PNG."""
    if not data.startswith(_PNG_SIGNATURE) or data[8:16] != _PNG_IHDR or len(data) < 24:
        msg = (
            f"{where} holds {len(data)} bytes that are not a PNG image; SmolagentsRecorder writes "
            "PNG only and restore decodes nothing else (other formats can make Pillow run "
            "external programs). The row was not written by SmolagentsRecorder or was altered."
        )
        raise CorruptSessionError(msg)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _decode_png(data: Any, where: str) -> Any:
    """Decode stored image bytes: PNG only, within Pillow's pixel limit, fully read.

    Stored rows are untrusted: the bytes are checked to be PNG before Pillow
    sees them, Pillow is told to try its PNG decoder alone (an EPS file would
    make it call Ghostscript), and a header claiming more pixels than
    ``PIL.Image.MAX_IMAGE_PIXELS`` is refused before any pixel is decoded.
    """
    width, height = _png_size(data, where)
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        msg = (
            f"{where} holds a PNG image of {width}x{height} pixels, more than "
            f"PIL.Image.MAX_IMAGE_PIXELS ({limit}); it was not decoded. Raise that limit "
            "to restore images this large from a session you trust."
        )
        raise CorruptSessionError(msg)
    try:
        image = Image.open(io.BytesIO(data), formats=["PNG"])
        image.load()
    # Pillow reports damaged image data with many exception types (OSError,
    # SyntaxError, ValueError, EOFError, zlib.error, struct.error, its
    # decompression bomb errors); each means the stored bytes are not a PNG
    # image the recorder wrote.
    except Exception as exc:
        msg = f"{where} holds PNG bytes that cannot be decoded ({type(exc).__name__}: {exc}); the row is damaged."
        raise CorruptSessionError(msg) from exc
    return image.copy()  # a plain Image, as the agent held it (not Pillow's PngImageFile)


def is_image_record(value: Any) -> bool:
    """Return whether a stored value is a raw image record (a mapping with ``pixels``), not PNG bytes."""
    return isinstance(value, Mapping) and "pixels" in value


def decode_image(data: Any, where: str) -> Any:
    """Return the PIL image a stored value holds: PNG bytes or a raw record, checked as untrusted input.

    Raises:
        CorruptSessionError: naming ``where``, for anything else, bytes that
            are not a whole PNG, a raw record of the wrong shape or size, or
            an image of more than ``PIL.Image.MAX_IMAGE_PIXELS`` pixels.
    """
    if isinstance(data, (bytes, bytearray)):
        return _decode_png(bytes(data), where)
    if is_image_record(data):
        return _decode_raw(data, where)
    msg = f"{where} holds {type(data).__name__}, not image bytes; the session was not written by SmolagentsRecorder."
    raise CorruptSessionError(msg)


def _raw_error(where: str, detail: str) -> CorruptSessionError:
    msg = (
        f"{where} holds a raw image record that cannot be read: {detail}. "
        "The row was not written by SmolagentsRecorder or was altered; nothing was decoded."
    )
    return CorruptSessionError(msg)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _decode_raw(record: Mapping[str, Any], where: str) -> Any:
    """Rebuild a raw image record with ``Image.frombytes``, after checking every part against the others."""
    from PIL import Image

    mode, size, pixels = record.get("mode"), record.get("size"), record.get("pixels")
    if not isinstance(mode, str) or (mode != "1" and mode not in _BYTES_PER_PIXEL):
        raise _raw_error(where, f"mode {mode!r} is not one the recorder writes raw")
    if not (isinstance(size, list) and len(size) == 2 and all(map(_is_count, size))):
        raise _raw_error(where, f"size must be [width, height] as two whole numbers, got {size!r}")
    if not isinstance(pixels, (bytes, bytearray)):
        raise _raw_error(where, f"pixels must be bytes, got {type(pixels).__name__}")
    width, height = size
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        detail = f"{width}x{height} pixels is more than PIL.Image.MAX_IMAGE_PIXELS ({limit})"
        raise _raw_error(where, detail)
    row = (width + 7) // 8 if mode == "1" else width * _BYTES_PER_PIXEL[mode]
    expected = row * height
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(bytes(pixels), expected + 1)
    except zlib.error as exc:
        raise _raw_error(where, f"the pixels are not zlib data ({exc})") from exc
    if len(raw) != expected or not inflate.eof or inflate.unconsumed_tail:
        detail = f"{mode} {width}x{height} needs {expected} bytes of pixels, the record holds another amount"
        raise _raw_error(where, detail)
    image = Image.frombytes(mode, (width, height), raw)
    palette = record.get("palette")
    if palette is not None:
        palette_mode, colours = _palette(palette, mode, where)
        image.putpalette(colours, rawmode=palette_mode)
    if "transparency" in record:
        image.info["transparency"] = _transparency(record["transparency"], where)
    return image


def _palette(value: Any, mode: str, where: str) -> tuple[str, bytes]:
    if mode not in ("P", "PA"):
        raise _raw_error(where, f"a {mode} image has no palette")
    if not (isinstance(value, list) and len(value) == 2):
        raise _raw_error(where, "palette must be [palette mode, bytes]")
    palette_mode, data = value
    if palette_mode not in ("RGB", "RGBA") or not isinstance(data, (bytes, bytearray)):
        raise _raw_error(where, "palette must be ['RGB' or 'RGBA', bytes]")
    if len(data) % len(palette_mode) or len(data) > 256 * len(palette_mode):
        raise _raw_error(
            where,
            f"a {palette_mode} palette of {len(data)} bytes is not whole colours, at most 256",
        )
    return palette_mode, bytes(data)


def _transparency(value: Any, where: str) -> Any:
    if _is_count(value) or isinstance(value, bytes):
        return value
    if isinstance(value, list) and 1 <= len(value) <= 4 and all(map(_is_count, value)):
        return tuple(value)
    raise _raw_error(
        where,
        f"transparency must be a whole number, bytes or a list of them, got {type(value).__name__}",
    )
