"""How the Messages API counts one content block, by its kind: text, a tool call and its result in
their wrappers, thinking, images by their size, documents and PDFs by their text and pages.
`api_count` walks a request and adds these up; every figure names where it comes from, as there.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import zlib
from collections.abc import Mapping
from typing import Any

from ctx_magic.context.model_families import Family, text_tokens
from ctx_magic.images import block_pixels

JsonObject = Mapping[str, Any]
"""A JSON object of a request as sent: a content block or a tool definition."""

# Per block, beyond its text, with text counted exactly: the call and result of one tool round
# together (38; the two are never apart in the traffic, so the split is a guess) and each argument
# of a call, a tagged parameter (15): the best median error on the fitted half of the Claude Code
# deltas, which are mostly tool rounds.
TOOL_USE_WRAPPER = 18
TOOL_PARAMETER = 15
TOOL_RESULT_WRAPPER = 20
# A thinking block counts as the model's full thinking, of which the text sent back is a summary
# for the Claude 4 models: 1.25 times the text, fitted on the same half's deltas with thinking.
THINKING_FACTOR = 1.25
# Without ctok, o200k counts these kinds of text sparser than Claude's tokenizer does, beyond the
# family's factor (a regression on the same fitted half): tool arguments (code, paths, JSON) and
# thinking.
TOOL_INPUT_FACTOR = 1.15
THINKING_O200K_FACTOR = 1.24
THINKING_WRAPPER = 4
# A document's wrapper beyond its text: the fitted half's one plain-text document, counted exactly.
DOCUMENT_WRAPPER = 36
SEARCH_RESULT_WRAPPER = 10
# Images the stand-in cannot see (a URL, a file id): the vision docs' largest image that is not
# scaled down (1092 x 1092 pixels, about 1,590 tokens). A PDF page is its text plus the page as an
# image (the PDF docs: 1,500 to 3,000 tokens a page); the image is the lower end, 1,500.
UNSEEN_IMAGE = 1590
PDF_PAGE = 1500
PDF_STREAM_BYTES = 4_000_000  # a content stream inflated past this is cut: a compressed bomb costs no memory
IMAGE_PIXELS_PER_TOKEN = 750  # the vision docs: tokens = width x height / 750


def json_text(value: Any) -> str:
    """A JSON value written as the API writes it into the prompt (a tool's schema, a call's arguments)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# -- images and documents ---------------------------------------------------------------------

def image_tokens_for(width: int, height: int, family: Family) -> int:
    """The vision docs' formula after the documented downscaling (aspect ratio kept)."""
    if width <= 0 or height <= 0:
        return UNSEEN_IMAGE
    scale = min(1.0, family.image_long_edge / max(width, height))
    tokens = (width * scale) * (height * scale) / IMAGE_PIXELS_PER_TOKEN
    return max(1, math.ceil(min(tokens, family.image_max_tokens)))


def image_tokens(block: JsonObject, family: Family) -> int:
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        size = block_pixels(block)
        if size is not None:
            return image_tokens_for(size[0], size[1], family)
    return UNSEEN_IMAGE


def _pdf_bytes(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return b""


def _pdf_pages(raw: bytes) -> int:
    return max(1, len(re.findall(rb"/Type\s*/Page(?![s\w])", raw)))


def _inflate(stream: bytes) -> bytes:
    """A content stream, deflated if it is (the common FlateDecode), at most PDF_STREAM_BYTES."""
    try:
        return zlib.decompressobj().decompress(stream, PDF_STREAM_BYTES)
    except zlib.error:
        return stream[:PDF_STREAM_BYTES]


def pdf_text(raw: bytes) -> str:
    """The text a PDF shows, as far as its content streams spell it out: the literal strings of
    each text object (BT ... ET), one line per object. Text drawn through a font's own glyph codes
    (hex strings) cannot be read without the font and is left out, as are images."""
    lines = []
    for stream in re.findall(rb"stream\r?\n(.*?)\r?\nendstream", raw, re.DOTALL):
        for text_object in re.findall(rb"(?<!\S)BT\s(.*?)\sET(?!\S)", _inflate(stream), re.DOTALL):
            strings = re.findall(rb"\(((?:\\.|[^\\)])*)\)", text_object)
            lines.append(re.sub(rb"\\(.)", rb"\1", b"".join(strings)).decode("latin-1"))
    return "\n".join(line for line in lines if line.strip())


def pdf_tokens(data: str, family: Family) -> int:
    """The PDF docs: each page is read as text and as an image. The text is counted as text (what
    the content streams spell out), each page's image as the docs' lower estimate of a page."""
    raw = _pdf_bytes(data)
    return PDF_PAGE * _pdf_pages(raw) + text_tokens(pdf_text(raw), family)


def document_tokens(block: JsonObject, family: Family) -> int:
    source = block.get("source")
    extra = text_tokens(str(block.get("title") or ""), family) + text_tokens(str(block.get("context") or ""), family)
    if not isinstance(source, Mapping):
        return DOCUMENT_WRAPPER + extra
    kind = source.get("type")
    if kind == "text":
        return DOCUMENT_WRAPPER + extra + text_tokens(str(source.get("data", "")), family)
    if kind == "content":
        inner = source.get("content")
        if isinstance(inner, str):
            return DOCUMENT_WRAPPER + extra + text_tokens(inner, family)
        return DOCUMENT_WRAPPER + extra + sum(block_tokens(b, family) for b in inner or [] if isinstance(b, Mapping))
    if kind == "base64" and source.get("media_type") == "application/pdf":
        return DOCUMENT_WRAPPER + extra + pdf_tokens(str(source.get("data", "")), family)
    return DOCUMENT_WRAPPER + extra + PDF_PAGE  # a URL or a file: one page, as the docs' lower estimate


# -- blocks -----------------------------------------------------------------------------------

def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json_text(value)


def markup(tokens: int, family: Family) -> int:
    """A tool call's or result's wrapper (measured in the Claude 4 family) in this family."""
    return round(tokens * family.tool_markup)


def tool_use_tokens(name: str, arguments: Any, family: Family) -> int:
    """A tool call: its wrapper, the tool's name, each argument as a tagged parameter."""
    tokens = markup(TOOL_USE_WRAPPER, family) + text_tokens(name, family)
    if isinstance(arguments, Mapping):
        for key, value in arguments.items():
            tokens += markup(TOOL_PARAMETER, family) + text_tokens(str(key), family) + text_tokens(
                _value_text(value), family, TOOL_INPUT_FACTOR)
    elif arguments is not None:
        tokens += text_tokens(json_text(arguments), family, TOOL_INPUT_FACTOR)
    return tokens


def _content_tokens(content: Any, family: Family) -> int:
    if isinstance(content, str):
        return text_tokens(content, family)
    if isinstance(content, list):
        return sum(block_tokens(b, family) for b in content if isinstance(b, Mapping))
    if content is None:
        return 0
    return text_tokens(json_text(content), family)


def block_tokens(block: JsonObject, family: Family) -> int:
    """One content block as the API counts it, its wrapper included."""
    kind = block.get("type")
    if kind == "text":
        return text_tokens(str(block.get("text", "")), family)
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return tool_use_tokens(str(block.get("name", "")), block.get("input"), family)
    if kind in ("tool_result", "mcp_tool_result"):
        return markup(TOOL_RESULT_WRAPPER, family) + _content_tokens(block.get("content"), family)
    if kind == "image":
        return image_tokens(block, family)
    if kind == "document":
        return document_tokens(block, family)
    if kind == "thinking":
        thinking = text_tokens(str(block.get("thinking", "")), family, THINKING_O200K_FACTOR)
        return THINKING_WRAPPER + math.ceil(thinking * THINKING_FACTOR)
    if kind == "redacted_thinking":  # encrypted: its base64 is about four characters a token
        return THINKING_WRAPPER + math.ceil(len(str(block.get("data", ""))) / 4)
    if kind == "search_result":
        texts = [str(block.get("title", "")), str(block.get("source", ""))]
        return SEARCH_RESULT_WRAPPER + sum(text_tokens(t, family) for t in texts) + _content_tokens(
            block.get("content"), family)
    if kind == "compaction":
        return text_tokens(str(block.get("content") or ""), family)
    if kind == "tool_reference":
        return text_tokens(str(block.get("tool_name", "")), family)
    if kind and str(kind).endswith("_tool_result"):  # a server tool's result, as its JSON
        return markup(TOOL_RESULT_WRAPPER, family) + _content_tokens(block.get("content"), family)
    rest = {k: v for k, v in block.items() if k not in ("type", "cache_control", "citations")}
    return text_tokens(json_text(rest), family)
