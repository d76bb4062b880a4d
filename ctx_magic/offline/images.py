"""Image blocks as the API checks them: media type, base64, what the bytes are, size, count.

An image comes as base64 (`source.type: "base64"`), as a URL (`"url"`, an http(s) address) or
as an uploaded file (`"file"`, a file id). The stand-in cannot fetch a URL or a file, so it
checks their shape only and counts them as an image it cannot see. For base64, the declared
media type must be one the API reads and must match the bytes' own signature (a JPEG declared
as image/png is refused, as by the API). The size limit is applied to the base64 text: reports
of the API's "image exceeds 5 MB maximum" show it counts the encoded form, which is the
stricter reading. The pixel limits are the vision docs': no side over 8,000, and none over
2,000 once the request holds more than 20 images (the API's wording of both is kept).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

from ctx_magic.images import image_size
from ctx_magic.offline.invalid import InvalidRequest, Located, at

MAX_IMAGE_BYTES = 5 * 1024 * 1024  # the API's per-image limit, 5 MB, on the base64 payload
MAX_IMAGES = 100  # the API's limit of images in one request
MAX_SIDE = 8_000  # the vision docs' largest width or height, in pixels
MANY_IMAGES = 20  # a request with more images than this ...
MANY_IMAGES_MAX_SIDE = 2_000  # ... takes none larger than this a side
MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")  # what the API reads


def sniff(data: bytes) -> str | None:
    """The media type the bytes' own signature says, None for none of the accepted four."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_image(located: Located) -> tuple[int, int] | None:
    """One image block's rules; returns its (width, height), None for one the stand-in cannot
    see (by URL or file id) or whose header it cannot read."""
    path, block = located.path, located.block
    if located.role != "user":
        raise at(path, "image content blocks are only allowed in user messages")
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise at(f"{path}.source", "Field required")
    if source.get("type") == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise at(f"{path}.source.url.url", "Input should be a valid URL (http or https)")
        return None
    if source.get("type") == "file":
        if not isinstance(source.get("file_id"), str) or not source["file_id"]:
            raise at(f"{path}.source.file.file_id", "Field required")
        return None
    if source.get("type") != "base64":
        raise at(f"{path}.source.type", "Input tag found using 'type' does not match the expected tags: "
                                        "'base64', 'url', 'file'")
    media_type = source.get("media_type")
    if media_type not in MEDIA_TYPES:
        raise at(f"{path}.source.base64.media_type", "Input should be " + ", ".join(f"'{m}'" for m in MEDIA_TYPES))
    data = source.get("data")
    if not isinstance(data, str) or not data:
        raise at(f"{path}.source.base64.data", "image data must be a non-empty base64 string")
    if len(data) > MAX_IMAGE_BYTES:
        raise at(f"{path}.source.base64", f"image exceeds 5 MB maximum: {len(data)} bytes > {MAX_IMAGE_BYTES} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise at(f"{path}.source.base64.data", "the image data is not valid base64") from error
    actual = sniff(raw)
    if actual is None:
        raise at(f"{path}.source.base64", "Could not process image: the data is not a JPEG, PNG, GIF or WebP image")
    if actual != media_type:
        raise at(f"{path}.source.base64",
                 f"The image was specified using the {media_type} media type, but the image appears to be a "
                 f"{actual} image")
    return image_size(raw, actual)  # None when the header cannot be read: no side to check


def _check_side(located: Located, size: tuple[int, int] | None, limit: int, which: str) -> None:
    if size is not None and max(size) > limit:
        raise at(f"{located.path}.image.source.base64.data",
                 f"At least one of the image dimensions exceed max allowed size{which}: {limit} pixels")


def check_images(blocks: Iterable[Located]) -> None:
    """Every image block valid, no more than MAX_IMAGES of them, none over MAX_SIDE pixels a
    side, and none over MANY_IMAGES_MAX_SIDE when the request holds more than MANY_IMAGES."""
    sized = [(located, check_image(located)) for located in blocks if located.block.get("type") == "image"]
    if len(sized) > MAX_IMAGES:
        raise InvalidRequest(f"messages: too many images in this request ({len(sized)} > {MAX_IMAGES} maximum)")
    for located, size in sized:
        _check_side(located, size, MAX_SIDE, "")
    if len(sized) > MANY_IMAGES:
        for located, size in sized:
            _check_side(located, size, MANY_IMAGES_MAX_SIDE, " for many-image requests")


def image_block(data: bytes, media_type: str) -> dict[str, Any]:
    """An image content block with `data` base64-encoded (for tests and examples)."""
    encoded = base64.b64encode(data).decode("ascii")
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": encoded}}
