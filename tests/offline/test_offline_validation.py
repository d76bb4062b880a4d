"""Every request rule of the stand-in, through the real SDK: a 400 in the API's shape naming the
offending place for each broken request, and the nearest valid request passing."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from ctx_magic.offline import OfflineAPI, offline_client
from ctx_magic.offline.images import MAX_IMAGE_BYTES, MAX_IMAGES, image_block
from ctx_magic.offline.invalid import InvalidRequest
from ctx_magic.offline.server_context import sign_compaction
from ctx_magic.offline.thinking import sign
from ctx_magic.offline.validate_messages import check_messages

from .offline_support import MODEL, PYTHON_TOOL, api_message, marked, refusal, user

Body = dict[str, Any]
CALL = {"type": "tool_use", "id": "toolu_a", "name": "python", "input": {"code": "1 + 1"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_a", "content": "2"}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(32)
JPEG = b"\xff\xd8\xff\xe0" + bytes(32)
GIF = b"GIF89a" + bytes(32)
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(32)
THOUGHT = "Let me add the numbers."


def _png(width: int, height: int) -> bytes:
    """The start of a PNG file of that many pixels: its signature and header chunk."""
    return (b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big")
            + bytes(24))


def _base() -> Body:
    """A valid request with a system prompt, a tool, and a finished tool loop."""
    return {
        "model": MODEL,
        "max_tokens": 2_000,
        "system": [{"type": "text", "text": "You help in a notebook."}],
        "tools": [copy.deepcopy(PYTHON_TOOL)],
        "messages": [
            user("add 1 and 1"),
            {"role": "assistant", "content": [{"type": "text", "text": "Running it."}, dict(CALL)]},
            {"role": "user", "content": [dict(RESULT)]},
            {"role": "assistant", "content": "It is 2."},
            user("thanks"),
        ],
    }


def _thinking_base() -> Body:
    """A valid request continuing a tool loop with thinking on."""
    body = _base()
    body["thinking"] = {"type": "enabled", "budget_tokens": 1_024}
    body["messages"] = [
        user("add 1 and 1"),
        {"role": "assistant", "content": [{"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT)},
                                          dict(CALL)]},
        {"role": "user", "content": [dict(RESULT)]},
    ]
    return body


def _set(path: str, value: Any) -> Callable[[Body], None]:
    """A change that sets `path` (dots between keys and list indexes) to `value`."""

    def change(body: Body) -> None:
        *parents, last = path.split(".")
        target: Any = body
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return change


def _both(*changes: Callable[[Body], None]) -> Callable[[Body], None]:
    def change(body: Body) -> None:
        for one in changes:
            one(body)

    return change


def _images(count: int, last: bytes = PNG) -> Callable[[Body], None]:
    """`count` images in the last message, the last of them `last`."""
    images = [image_block(PNG, "image/png") for _ in range(count - 1)] + [image_block(last, "image/png")]
    return _set("messages.4", {"role": "user", "content": images})


def _split(index: int, *messages: Body) -> Callable[[Body], None]:
    """A change that puts `messages` in place of message `index`."""

    def change(body: Body) -> None:
        body["messages"][index:index + 1] = list(messages)

    return change


def _marks(count: int) -> Callable[[Body], None]:
    """Breakpoints on the tool, the system block and count - 2 of the plain-text messages."""

    def change(body: Body) -> None:
        body["tools"][0]["cache_control"] = {"type": "ephemeral"}
        body["system"][0]["cache_control"] = {"type": "ephemeral"}
        for index in (4, 3, 0)[: count - 2]:
            message = body["messages"][index]
            body["messages"][index] = {"role": message["role"], "content": [marked(message["content"], None)]}

    return change


BROKEN: dict[str, tuple[Callable[[Body], None], str]] = {
    # cache_control
    "five breakpoints": (_marks(5), "A maximum of 4 blocks with cache_control may be provided. Found 5."),
    "cache type not ephemeral": (_set("system.0.cache_control", {"type": "persistent"}),
                                 "system.0.cache_control.type: Input should be 'ephemeral'"),
    "ttl not 5m or 1h": (_set("system.0.cache_control", {"type": "ephemeral", "ttl": "10m"}),
                         "system.0.cache_control.ttl: Input should be '5m' or '1h'"),
    "1h after 5m": (_both(_set("system.0.cache_control", {"type": "ephemeral", "ttl": "5m"}),
                          _set("messages.4", {"role": "user", "content": [marked("thanks", "1h")]})),
                    "messages.4.content.0: a cache_control block with ttl='1h' cannot come after one with ttl='5m'"),
    # text blocks
    "empty text": (_set("messages.4.content", [{"type": "text", "text": ""}]),
                   "messages.4.content.0: text content blocks must be non-empty"),
    "whitespace text": (_set("messages.4.content", [{"type": "text", "text": " \n\t"}]),
                        "messages.4.content.0: text content blocks must contain non-whitespace text"),
    "whitespace string content": (_set("messages.4.content", "   "),
                                  "messages.4.content: text content blocks must contain non-whitespace text"),
    "whitespace system block": (_set("system.0.text", "\n\n"),
                                "system.0: text content blocks must contain non-whitespace text"),
    "empty system block": (_set("system.0.text", ""), "system.0: text content blocks must be non-empty"),
    "empty text in a tool result": (_set("messages.2.content.0.content", [{"type": "text", "text": ""}]),
                                    "messages.2.content.0.content.0: text content blocks must be non-empty"),
    "whitespace tool result": (_set("messages.2.content.0.content", "  "),
                               "messages.2.content.0.content: text content blocks must contain non-whitespace"),
    "empty-string tool result": (_set("messages.2.content.0.content", ""),
                                 "messages.2.content.0.tool_result: content cannot be an empty string"),
    "error result without content": (_set("messages.2.content.0", {**RESULT, "content": [], "is_error": True}),
                                     "messages.2.content.0.tool_result: content cannot be empty if `is_error`"),
    "prefill ending in whitespace": (_set("messages.4", {"role": "assistant", "content": "The answer is "}),
                                     "messages.4.content: final assistant content cannot end with trailing "
                                     "whitespace"),
    "a prefill to a 4.6 model": (_both(_set("model", "claude-sonnet-4-6"),
                                      _set("messages.4", {"role": "assistant", "content": "The answer is"})),
                                "This model does not support assistant message prefill. The conversation must "
                                "end with a user message."),
    "a prefill to a 5.x model": (_both(_set("model", "claude-fable-5-1"),
                                      _set("messages.4", {"role": "assistant", "content": "The answer is"})),
                                "The conversation must end with a user message."),
    "an image over 8,000 pixels a side": (_images(1, _png(8_001, 600)),
                                          "messages.4.content.0.image.source.base64.data: At least one of the "
                                          "image dimensions exceed max allowed size: 8000 pixels"),
    "an image over 2,000 pixels among 21": (_images(21, _png(600, 2_001)),
                                            "messages.4.content.20.image.source.base64.data: At least one of the "
                                            "image dimensions exceed max allowed size for many-image requests: "
                                            "2000 pixels"),
    "tool_result in a user message after a text one": (
        _split(2, user("here they are"), {"role": "user", "content": [dict(RESULT)]}),
        "messages.2.content: `tool_result` blocks must come first in a user message"),
    # order, roles, ids
    "tool_result after text": (_set("messages.2.content", [{"type": "text", "text": "here"}, dict(RESULT)]),
                               "messages.2.content.1: `tool_result` blocks must come first in a user message"),
    "first message a system message": (_set("messages.0", {"role": "system", "content": "be brief"}),
                                       "messages.0.role: the first message must use the `user` role"),
    "system message of an older model": (_both(_set("model", "claude-sonnet-4-6"),
                                               _set("messages.4", {"role": "system", "content": "be brief"})),
                                         "messages.4: each message needs a role of 'user' or 'assistant'"),
    "a system message after an assistant's answer": (
        lambda b: b["messages"].insert(4, {"role": "system", "content": "be brief"}),
        "messages.4: a system message must follow a user message (or an assistant message ending in a server tool"),
    "a system message before a user message": (
        lambda b: b["messages"].insert(3, {"role": "system", "content": "be brief"}) or b["messages"].pop(4),
        "messages.3: a system message must be the last message or be followed by an assistant message"),
    "system message holding an image": (_set("messages.4", {"role": "system", "content": [image_block(PNG,
                                                                                                       "image/png")]}),
                                        "messages.4.content: a system message holds text and tool_addition blocks"),
    "tool_use in a user message": (_set("messages.4.content", [dict(CALL, id="toolu_b")]),
                                   "messages.4.content.0: `tool_use` blocks are only allowed in assistant messages"),
    "unknown block type": (_set("messages.4.content", [{"type": "video", "url": "x"}]),
                           "messages.4.content.0.type: Input tag 'video'"),
    "tool_use id twice in one turn": (_both(_set("messages.1.content", [dict(CALL), dict(CALL)]),
                                            _set("messages.2.content", [dict(RESULT), dict(RESULT)])),
                                      "messages.1.content: `tool_use` ids must be unique"),
    "tool_use id with a colon": (_both(_set("messages.1.content.1.id", "cell:1"),
                                       _set("messages.2.content.0.tool_use_id", "cell:1")),
                                 "messages.1.content.1.id: String should match pattern"),
    # tools and tool_choice
    "tool name with a space": (_set("tools.0.name", "run code"), "tools.0.custom.name: String should match pattern"),
    "tool name of 65 characters": (_set("tools.0.name", "x" * 65), "tools.0.custom.name: String should match"),
    "two tools with one name": (lambda b: b["tools"].append(copy.deepcopy(PYTHON_TOOL)),
                                "tools: Tool names must be unique."),
    "tool without input_schema": (_set("tools.0", {"name": "python"}), "tools.0.custom.input_schema: Field required"),
    "tool_choice naming no tool": (_set("tool_choice", {"type": "tool", "name": "bash"}), "tool_choice.name"),
    "tool_choice any without tools": (_both(_set("tool_choice", {"type": "any"}), lambda b: b.pop("tools"),
                                            lambda b: b.update(messages=[user("hi")])),
                                      "tool_choice may only be specified while providing tools."),
    # fields and sampling
    "unknown field": (_set("temprature", 0.5), "temprature: Extra inputs are not permitted"),
    "temperature and top_p": (_both(_set("temperature", 0.5), _set("top_p", 0.9)),
                              "`temperature` and `top_p` cannot both be specified"),
    "temperature and top_p on Opus 4.1": (_both(_set("model", "claude-opus-4-1"), _set("temperature", 0.5),
                                                _set("top_p", 0.9)), "`temperature` and `top_p` cannot both"),
    "temperature over 1": (_set("temperature", 1.5), "temperature: Input should be a number between 0 and 1"),
    "max_tokens of 0": (_set("max_tokens", 0), "max_tokens: Field required (an integer of at least 1)"),
    # thinking parameter
    "thinking budget under 1024": (_set("thinking", {"type": "enabled", "budget_tokens": 1_000}),
                                   "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"),
    "thinking budget not under max_tokens": (_set("thinking", {"type": "enabled", "budget_tokens": 2_000}),
                                             "`max_tokens` must be greater than `thinking.budget_tokens`"),
    "thinking of an unknown type": (_set("thinking", {"type": "on"}), "thinking.type: Input should be"),
    "thinking with a budget and a forced tool": (_both(_set("thinking", {"type": "enabled", "budget_tokens": 1_024}),
                                                       _set("tool_choice", {"type": "any"})),
                                                 "Thinking may not be enabled when tool_choice forces tool use."),
    "effort xhigh on an older model": (_both(_set("model", "claude-opus-4-6"),
                                             _set("output_config", {"effort": "xhigh"})),
                                       "This model does not support effort level 'xhigh'."),
    "thinking with temperature 0.5": (_both(_set("thinking", {"type": "adaptive"}), _set("temperature", 0.5)),
                                      "`temperature` may only be set to 1 when thinking is enabled."),
    "thinking with top_k": (_both(_set("thinking", {"type": "adaptive"}), _set("top_k", 5)), "`top_k` may not be set"),
    "thinking block in a user message": (_set("messages.4.content", [{"type": "thinking", "thinking": THOUGHT,
                                                                      "signature": sign(THOUGHT)}]),
                                         "messages.4.content.0: `thinking` blocks are only allowed in assistant"),
    # images
    "image of an unread type": (_set("messages.4.content", [{**image_block(PNG, "image/png"), "source": {
        "type": "base64", "media_type": "image/bmp", "data": base64.b64encode(PNG).decode()}}]),
        "messages.4.content.0.source.base64.media_type: Input should be 'image/jpeg'"),
    "image that is not base64": (_set("messages.4.content", [{**image_block(PNG, "image/png"), "source": {
        "type": "base64", "media_type": "image/png", "data": "not base64!"}}]),
        "messages.4.content.0.source.base64.data: the image data is not valid base64"),
    "JPEG declared as PNG": (_set("messages.4.content", [image_block(JPEG, "image/png")]),
                             "The image was specified using the image/png media type, but the image appears to be a "
                             "image/jpeg image"),
    "bytes of no image format": (_set("messages.4.content", [image_block(b"hello world, not an image", "image/png")]),
                                 "messages.4.content.0.source.base64: Could not process image"),
    "JPEG as PNG in a tool result": (_set("messages.2.content.0.content", [image_block(JPEG, "image/png")]),
                                     "messages.2.content.0.content.0.source.base64: The image was specified"),
    "image in an assistant message": (_set("messages.3", {"role": "assistant", "content": [image_block(PNG,
                                                                                                       "image/png")]}),
                                      "messages.3.content.0: image content blocks are only allowed in user messages"),
    "image by a URL that is not http": (_set("messages.4.content", [{"type": "image", "source": {
        "type": "url", "url": "ftp://x/y.png"}}]), "messages.4.content.0.source.url.url: Input should be a valid URL"),
    "image source of an unknown kind": (_set("messages.4.content", [{"type": "image", "source": {
        "type": "s3", "bucket": "b"}}]), "messages.4.content.0.source.type: Input tag found using 'type'"),
    "101 images": (_images(MAX_IMAGES + 1), "too many images in this request (101 > 100 maximum)"),
}


@pytest.fixture
def big_api() -> OfflineAPI:
    """A window wide enough for 100 images (2,000 tokens each), so only the rules can refuse."""
    return OfflineAPI(window=1_000_000, max_output=8_192)


@pytest.fixture
def big(big_api: OfflineAPI) -> anthropic.Anthropic:
    return offline_client(big_api, max_retries=0)


def test_the_base_requests_are_valid(big: anthropic.Anthropic) -> None:
    assert api_message(big, _base()).stop_reason == "end_turn"
    assert api_message(big, _thinking_base()).content


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_rule_is_a_400_naming_its_place(big: anthropic.Anthropic, case: str) -> None:
    change, expected = BROKEN[case]
    body = _base()
    change(body)
    with pytest.raises(anthropic.BadRequestError) as caught:
        api_message(big, body)
    assert caught.value.status_code == 400
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert expected in caught.value.body["error"]["message"]


NEAR_MISSES: dict[str, Callable[[Body], None]] = {
    "four breakpoints": _marks(4),
    "1h before 5m": _both(_set("system.0.cache_control", {"type": "ephemeral", "ttl": "1h"}),
                          _set("messages.4", {"role": "user", "content": [marked("thanks", "5m")]})),
    "a tool result with no content": _set("messages.2.content.0", {"type": "tool_result", "tool_use_id": "toolu_a"}),
    "a prefill without trailing whitespace": _set("messages.4", {"role": "assistant", "content": "The answer is"}),
    "a prefill to Sonnet 4.5": _both(_set("model", "claude-sonnet-4-5"),
                                     _set("messages.4", {"role": "assistant", "content": "The answer is"})),
    "a tool name of 64 characters": _both(_set("tools.0.name", "x" * 64), _set("messages.1.content.1.name", "x" * 64)),
    "temperature alone": _set("top_p", 0.9),
    "temperature with top_p on Sonnet 4": _both(_set("model", "claude-sonnet-4-0"), _set("temperature", 0.5),
                                                _set("top_p", 0.9)),
    "cache_control null on blocks": _both(_set("system.0.cache_control", None),
                                          _set("messages.0.content", [{"type": "text", "text": "Add 1 and 1.",
                                                                       "cache_control": None}])),
    "thinking with tool_choice none": _both(_set("thinking", {"type": "enabled", "budget_tokens": 1_024}),
                                            _set("tool_choice", {"type": "none"})),
    "PNG, JPEG, GIF and WebP": _set("messages.4.content", [
        image_block(PNG, "image/png"), image_block(JPEG, "image/jpeg"), image_block(GIF, "image/gif"),
        image_block(WEBP, "image/webp")]),
    "100 images": _images(MAX_IMAGES),
    "an image of 8,000 pixels a side": _images(1, _png(8_000, 8_000)),
    "an image over 2,000 pixels among 20": _images(20, _png(2_001, 600)),
    "21 images of 2,000 pixels a side": _images(21, _png(2_000, 2_000)),
    "a server tool": lambda b: b["tools"].append({"type": "web_search_20250305", "name": "web_search"}),
    # What the real API answered 200 to in recorded traffic:
    "the first message from the assistant": lambda b: b["messages"].insert(0, {"role": "assistant",
                                                                                "content": "Hello."}),
    "adaptive thinking with a forced tool": _both(_set("thinking", {"type": "adaptive"}),
                                                  _set("tool_choice", {"type": "any"})),
    "effort xhigh on a newer model": _both(_set("model", "claude-opus-4-8"),
                                           _set("output_config", {"effort": "xhigh"})),
    "an image by URL": _set("messages.4.content", [{"type": "image", "source": {"type": "url",
                                                                                "url": "https://x/y.png"}}]),
    "an image from a file": _set("messages.4.content", [{"type": "image", "source": {"type": "file",
                                                                                     "file_id": "file_011"}}]),
    "a tool_use id used again in a later turn": _both(
        _set("messages.3", {"role": "assistant", "content": [dict(CALL)]}),
        _set("messages.4", {"role": "user", "content": [dict(RESULT)]})),
    "a text message after the tool results' message": lambda b: b["messages"].insert(3, user("and a note")),
    "a system message between turns": lambda b: b["messages"].insert(3, {"role": "system", "content": "Be brief."}),
    "two system messages after the last user message": lambda b: b["messages"].extend(
        [{"role": "system", "content": "Be brief."}, {"role": "system", "content": "Answer in French."}]),
    "a tool call split over two assistant messages": _split(1, {"role": "assistant", "content": "Running it."},
                                                            {"role": "assistant", "content": [dict(CALL)]}),
    "a tool_reference in a tool result": _set("messages.2.content.0.content", [{"type": "tool_reference",
                                                                                 "tool_name": "python"}]),
    "a tool search tool": lambda b: b["tools"].append({"type": "tool_search_tool_bm25_20251119",
                                                       "name": "tool_search_tool_bm25"}),
}


@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_the_valid_neighbour_of_each_rule_passes(big: anthropic.Anthropic, case: str) -> None:
    body = _base()
    NEAR_MISSES[case](body)
    assert api_message(big, body).id.startswith("msg_offline_")


def test_a_compaction_block_sent_back_comes_with_a_compaction_beta(big: anthropic.Anthropic) -> None:
    """The on-demand page: the beta header goes on every later request that carries the block
    (a paused server compaction sent back carries its own)."""
    body = _base()
    _both(_set("model", "claude-sonnet-4-6"), _set("messages.4", {
        "role": "assistant", "content": [{"type": "compaction", "content": "Summary.",
                                          "signature": sign_compaction("Summary.")}]}))(body)
    with pytest.raises(anthropic.BadRequestError) as caught:
        api_message(big, body)
    assert refusal(caught.value).startswith("messages.4.content.0: `compaction` blocks require the beta header "
                                            "'anthropic-beta: compact-2026-09-04'")
    for beta in ("compact-2026-09-04", "compact-2026-01-12"):
        assert api_message(big, body, (beta,)).id.startswith("msg_offline_")


@pytest.mark.parametrize(("provider", "may_open"), [("anthropic", {"summary", "greeting"}), ("vertex", {"summary"}),
                                                     ("bedrock", set())])
def test_which_assistant_message_may_open_a_conversation_depends_on_the_platform(provider: str,
                                                                                  may_open: set[str]) -> None:
    """Anthropic's API takes any assistant message first; Vertex, where on-demand compaction runs, the
    one opening with the API's compaction block; Bedrock a user message only."""
    firsts = {"summary": {"role": "assistant", "content": [{"type": "compaction", "content": "Summary.",
                                                            "signature": sign_compaction("Summary.")}]},
              "greeting": {"role": "assistant", "content": "Hello."}}
    for name, first in firsts.items():
        if name in may_open:
            check_messages([first, user("go on")], MODEL, provider)
        else:
            with pytest.raises(InvalidRequest, match="the first message must use the `user` role"):
                check_messages([first, user("go on")], MODEL, provider)


def test_an_image_of_five_megabytes_is_refused_by_its_base64_size(big: anthropic.Anthropic) -> None:
    raw = PNG + bytes(MAX_IMAGE_BYTES * 3 // 4)  # about 3.75 MB of bytes: over 5 MB once base64
    body = _base()
    body["messages"][4]["content"] = [image_block(raw, "image/png")]
    with pytest.raises(anthropic.BadRequestError) as caught:
        api_message(big, body)
    assert "image exceeds 5 MB maximum" in refusal(caught.value)
    body["messages"][4]["content"] = [image_block(PNG + bytes(MAX_IMAGE_BYTES * 3 // 4 - 64), "image/png")]
    assert api_message(big, body).content


def test_a_body_over_32_mb_is_a_413_request_too_large(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.RequestTooLargeError) as caught:
        api_message(client, {"model": MODEL, "max_tokens": 10, "messages": [user("x" * 33_000_000)]})
    assert caught.value.status_code == 413 and caught.value.body["error"]["type"] == "request_too_large"


def test_count_tokens_applies_the_same_rules(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model=MODEL, messages=[user("hi"), {"role": "assistant", "content": "ok "}])
    assert "trailing whitespace" in refusal(caught.value)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=[user("hi")], extra_body={"max_tokens": 10})


def test_a_rule_broken_over_http_gets_the_same_answer(sdk: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model=MODEL, max_tokens=100,
                            messages=[user("hi"), {"role": "assistant", "content": "  "}, user("well?")])
    assert refusal(caught.value) == "messages.1.content: text content blocks must contain non-whitespace text"
