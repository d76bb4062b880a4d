"""Images the Messages API accepts, checked before they enter the context.

The API refuses a whole request for one bad image: bytes that are not what the media type says
(an `Image(filename='x.png')` of a JPEG), a format other than PNG, JPEG, GIF and WebP, corrupt
data, more than 5 MB of base64, a side over 8,000 pixels (2,000 when the request holds more than
20 images), or more than 100 images. Since the image stays in the conversation, every later
turn would fail too. So `check_image` decides each image once, from its bytes: sent (with the
media type corrected when the bytes are another supported type), or replaced by a text stand-in
saying what was left out and why; and `limit_images` keeps each request within the count.

A bottom floor: pure functions, importing nothing of ctx_magic but the message types.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctx_magic.messages import Block, Message

SUPPORTED_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
API_MAX_BASE64_CHARS = 5 * 1024 * 1024  # the API measures an image's base64 string, not its bytes
API_MAX_IMAGES = 100  # per request
API_MAX_SIDE = 8_000  # pixels, either side
MANY_IMAGES = 20  # a request with more images than this ...
MANY_IMAGES_MAX_SIDE = 2_000  # ... takes none larger than this a side
# Once over the count, the oldest are left out in steps of this many, so the set sent (and the
# prompt-cache prefix) changes once every 20 new images instead of at each one.
OMIT_STEP = 20
TAIL_BYTES = 4_096  # a file's end marker (PNG IEND, JPEG EOI) is searched for this far from its end
HEADER_CHARS = 87_384  # base64 of the first 64 KiB: enough for the JPEG segments before the frame header

_PNG_END = b"IEND\xaeB`\x82"


def sniff_media_type(data: bytes) -> str | None:
    """The image type the bytes say they are (magic numbers), or None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _be(data: bytes) -> int:
    return int.from_bytes(data, "big")


def _le(data: bytes) -> int:
    return int.from_bytes(data, "little")


def _png_size(data: bytes) -> tuple[int, int] | None:
    return (_be(data[16:20]), _be(data[20:24])) if data[12:16] == b"IHDR" and len(data) >= 24 else None


def _gif_size(data: bytes) -> tuple[int, int] | None:
    return (_le(data[6:8]), _le(data[8:10])) if len(data) >= 10 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + _le(data[24:27]), 1 + _le(data[27:30])
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = _le(data[21:25])
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return _le(data[26:28]) & 0x3FFF, _le(data[28:30]) & 0x3FFF
    return None


_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn; C4/C8/CC are other segments


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """From the frame header, walking the segments after SOI."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD9)):  # segments without a length
            i += 2
            continue
        if marker in _JPEG_FRAMES:
            return (_be(data[i + 7:i + 9]), _be(data[i + 5:i + 7])) if i + 9 <= len(data) else None
        i += 2 + _be(data[i + 2:i + 4])
    return None


_SIZE: dict[str, Callable[[bytes], tuple[int, int] | None]] = {
    "image/png": _png_size, "image/gif": _gif_size, "image/webp": _webp_size, "image/jpeg": _jpeg_size}


def image_size(data: bytes, media_type: str) -> tuple[int, int] | None:
    """(width, height) in pixels from the file's header, or None when it cannot be read."""
    reader = _SIZE.get(media_type)
    return reader(data) if reader else None


def _whole(data: bytes, media_type: str) -> bool:
    """The file is not cut short: its end marker or declared length is there."""
    if media_type == "image/png":
        return _PNG_END in data[-TAIL_BYTES:]
    if media_type == "image/jpeg":
        return b"\xff\xd9" in data[-TAIL_BYTES:]
    if media_type == "image/webp":
        return _le(data[4:8]) + 8 <= len(data)
    return data.rstrip(b"\0").endswith(b";")  # the GIF trailer


def stand_in(reason: str) -> Block:
    """The text block an image left out becomes."""
    return {"type": "text", "text": f"[image omitted: {reason}]"}


def image_block(media_type: str, payload: str) -> Block:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": payload}}


@dataclass(frozen=True)
class ImageCheck:
    """What becomes of one image: `block` is the image to send, or the text standing in for it."""

    block: Block
    left_out: str | None = None
    """Why the image is not sent (one line, for the cell and the stand-in); None when it is."""
    corrected_from: str | None = None
    """The declared media type, when the bytes were another supported type and it was fixed."""

    @property
    def sent(self) -> bool:
        return self.left_out is None


def human_size(count: int) -> str:
    """A byte count as a person reads it: 5 MB, 1.3 KB, 200 bytes."""
    if count >= 1024 * 1024:
        return f"{count / 1024 / 1024:.3g} MB"
    if count >= 1024:
        return f"{count / 1024:.3g} KB"
    return f"{count:,} bytes"


def check_image(data: str | bytes, declared: str, *, max_chars: int = API_MAX_BASE64_CHARS) -> ImageCheck:
    """Decide one image from its bytes (base64 text, as in a display bundle, or raw bytes).

    `max_chars` is the user's cap on an image's base64 length; the API's own 5 MB always holds.
    """
    payload = "".join(data.split()) if isinstance(data, str) else base64.b64encode(data).decode("ascii")
    limit = min(max_chars, API_MAX_BASE64_CHARS)
    if len(payload) > limit:
        which = "the API's limit" if limit == API_MAX_BASE64_CHARS else "the size cap"
        return ImageCheck(stand_in(f"{declared} of {human_size(len(payload))} (base64), over {which} of "
                                   f"{human_size(limit)}"), f"over {which}")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return ImageCheck(stand_in(f"{declared} whose data is not valid base64"), "not valid base64")
    actual = sniff_media_type(raw)
    if actual is None:
        return ImageCheck(stand_in(f"declared {declared}, but the bytes are not a PNG, JPEG, GIF or WebP image"),
                          "not a PNG, JPEG, GIF or WebP image")
    size = image_size(raw, actual)
    if size is None or min(size) < 1 or not _whole(raw, actual):
        return ImageCheck(stand_in(f"{actual} that is corrupt or cut short"), "corrupt or cut short")
    if max(size) > API_MAX_SIDE:
        return ImageCheck(stand_in(f"{actual} of {size[0]:,}x{size[1]:,} pixels, over the API's "
                                   f"{API_MAX_SIDE:,}-pixel limit per side"), f"over {API_MAX_SIDE:,} pixels a side")
    return ImageCheck(image_block(actual, payload), corrected_from=declared if declared != actual else None)


# -- the count per request ---------------------------------------------------------------------


def block_pixels(block: Block) -> tuple[int, int] | None:
    """Pixels of an image block from the first 64 KiB of its data (None when unreadable)."""
    source = block.get("source") or {}
    head = str(source.get("data", ""))[:HEADER_CHARS]
    try:
        raw = base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    media_type = sniff_media_type(raw)
    return image_size(raw, media_type) if media_type else None


def _map_images(messages: Sequence[Message], change: Callable[[int, Block], Block]) -> list[Message]:
    """The messages with `change(ordinal, block)` applied to every image block of the sent ones,
    at the top level or inside tool results, numbered oldest first."""
    ordinal = 0

    def blocks(content: Sequence[Block]) -> list[Block]:
        nonlocal ordinal
        out = []
        for block in content:
            if block.get("type") == "image":
                block = change(ordinal, block)
                ordinal += 1
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                inner = blocks(block["content"])
                if any(new is not old for new, old in zip(inner, block["content"])):
                    block = {**block, "content": inner}
            out.append(block)
        return out

    result = []
    for message in messages:
        if message.sent and _image_count(message):
            changed = blocks(message.content)
            if any(new is not old for new, old in zip(changed, message.content)):
                message = message.with_content(changed)  # unchanged messages stay the same objects
        result.append(message)
    return result


def _holds_image(block: Block) -> bool:
    inner = block.get("content")
    return block.get("type") == "image" or (
        block.get("type") == "tool_result" and isinstance(inner, list) and any(b.get("type") == "image" for b in inner))


def _image_count(message: Message) -> int:
    """The image blocks in a message, top level and inside tool results, counted once per
    message: a request walks every message each call, and looking into 10,000 messages' blocks
    each time cost more than the rest of the pipeline (benchmarks/scale.py)."""
    memo = message.memo
    if "image_count" not in memo:
        memo["image_count"] = sum(
            1 if b.get("type") == "image" else sum(i.get("type") == "image" for i in b["content"])
            for b in message.content if _holds_image(b))
    return memo["image_count"]


def count_images(messages: Sequence[Message]) -> int:
    """The image blocks the messages send (unsent messages' images are not counted)."""
    total = 0
    for message in messages:
        memo = message.memo
        count = memo.get("sent_images")
        if count is None:
            count = memo["sent_images"] = _image_count(message) if message.sent else 0
        total += count
    return total


def left_out_per_message(messages: Sequence[Message]) -> dict[str, int]:
    """How many images `limit_images` leaves out of each message (by uuid; only those it leaves some out of)."""
    total = count_images(messages)
    if total <= MANY_IMAGES:  # under both limits: nothing is left out for the count (recheck aside)
        return {}
    limited, left_out = limit_images(messages, total=total)
    if not left_out:
        return {}
    counts = {m.uuid: _image_count(m) - _image_count(kept) for m, kept in zip(messages, limited, strict=True)
              if kept is not m}
    return {uuid: n for uuid, n in counts.items() if n}


def recheck(block: Block) -> Block:
    """A stored image block as it may be sent: its media type fixed from its first bytes, or a
    stand-in when it is over the API's size or no supported image at all (a block stored before
    these checks existed; a cheap look, not the whole of `check_image`)."""
    source = block.get("source") or {}
    if source.get("type") != "base64":
        return block
    data, declared = str(source.get("data", "")), str(source.get("media_type", ""))
    if len(data) > API_MAX_BASE64_CHARS:
        return stand_in(f"{declared} of {human_size(len(data))} (base64), over the API's limit of "
                        f"{human_size(API_MAX_BASE64_CHARS)}")
    try:
        actual = sniff_media_type(base64.b64decode(data[:32]))
    except (binascii.Error, ValueError):
        actual = None
    if actual is None:
        return stand_in(f"declared {declared}, but the bytes are not a PNG, JPEG, GIF or WebP image")
    return block if actual == declared else image_block(actual, data)


def limit_images(messages: Sequence[Message], max_images: int = API_MAX_IMAGES,
                 step: int = OMIT_STEP, *, total: int | None = None) -> tuple[list[Message], int]:
    """The messages of one request with at most `max_images` images, and how many were left out.

    The most recent are kept; once over the count the oldest are left out in steps of `step`
    (the set sent changes once every `step` new images: the cached prefix breaks that rarely).
    When more than MANY_IMAGES remain, any over MANY_IMAGES_MAX_SIDE pixels a side are left out
    too, as the API requires; every image kept is `recheck`ed. Left-out images become
    `[image omitted: ...]` text. Pure: the same messages always give the same request.
    `total` is `count_images(messages)` when the caller knows it already.
    """
    total = count_images(messages) if total is None else total
    if total == 0:
        return list(messages), 0
    over = total - max_images
    dropped = min(total, math.ceil(over / step) * step) if over > 0 else 0
    kept = total - dropped
    left_out = 0

    def change(n: int, block: Block) -> Block:
        nonlocal left_out
        if n < dropped:
            # The same words whatever the totals: a stand-in that changed would break the cached prefix.
            new = stand_in(f"an older image; at most the {max_images} most recent are sent with each request")
        elif kept > MANY_IMAGES and max(block_pixels(block) or (0, 0)) > MANY_IMAGES_MAX_SIDE:
            new = stand_in(f"over {MANY_IMAGES_MAX_SIDE:,} pixels a side, the API's limit when a request holds "
                           f"more than {MANY_IMAGES} images")
        else:
            new = recheck(block)
        left_out += new.get("type") != "image"
        return new

    return _map_images(messages, change), left_out
