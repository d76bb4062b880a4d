"""The count of a request as the Messages API makes it (context/api_count.py): each part's rule."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from ctx_magic.context import api_count, block_count
from ctx_magic.context.api_count import request_tokens
from ctx_magic.context.model_families import CLAUDE_4, CLAUDE_5, OPUS_4_7, family_of, text_tokens

TOOL = {"name": "python", "description": "Run Python code.",
        "input_schema": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}


def png(width: int, height: int) -> dict:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + bytes(5)
    data = base64.b64encode(header + bytes(32)).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


@pytest.mark.parametrize(("model", "family"), [
    ("claude-sonnet-4-5-20250929", CLAUDE_4), ("claude-haiku-4-5", CLAUDE_4), ("claude-opus-4-6", CLAUDE_4),
    ("claude-3-5-sonnet-20241022", CLAUDE_4), ("claude-opus-4-7", OPUS_4_7), ("claude-opus-4-8", CLAUDE_5),
    ("claude-sonnet-5-5", CLAUDE_5), ("claude-fable-5", CLAUDE_5), ("claude-mythos-preview", CLAUDE_5),
    ("claude-offline-test", CLAUDE_5)])
def test_the_tokenizer_family_follows_the_model(model, family):
    """Opus 4.7 and later Opus models, Sonnet 5 and the 5.x family use the newer tokenizer (Opus 4.7
    under a frame of its own)."""
    assert family_of(model) is family


def test_the_tool_use_prompt_follows_the_model_and_tool_choice():
    """Sonnet 4 keeps the shorter prompt of 2025, Claude 3 the docs' table, Sonnet 4.5 its family's."""
    def prompt(model, choice):
        return api_count.tool_prompt_tokens([TOOL], {"type": choice}, family_of(model), model)
    assert (prompt("claude-sonnet-4-5", "auto"), prompt("claude-sonnet-4-5", "any")) == (
        CLAUDE_4.tool_prompt_auto, CLAUDE_4.tool_prompt_forced)
    earlier = (prompt("claude-sonnet-4-20250514", "auto"), prompt("claude-sonnet-4-0", "tool"))
    assert earlier == api_count.EARLIER_CLAUDE_4
    assert (prompt("claude-3-opus-20240229", "auto"), prompt("claude-3-opus-latest", "any")) == (530, 281)
    assert prompt("claude-opus-5", "auto") < prompt("claude-sonnet-5", "auto") == CLAUDE_5.tool_prompt_auto


def test_adaptive_thinking_adds_instructions_only_in_the_claude_4_family():
    ask = {"messages": [{"role": "user", "content": "What is 2+2?"}], "thinking": {"type": "adaptive"}}
    for model, extra in (("claude-opus-4-6", 17), ("claude-opus-4-8", 0)):
        plain = request_tokens({"model": model, "messages": ask["messages"]})
        assert request_tokens({**ask, "model": model}) - plain == extra


def test_the_newer_tokenizer_counts_about_30_percent_more_of_the_same_text():
    text = ("Context management decides what a model reads on each turn. When the conversation grows past "
            "its window, older tool results are cleared first, then the history is summarized, so that the "
            "newest work stays in full while the rest is kept as a short account. Every change is recorded, "
            "and the user can see why it happened and what it saved.")
    assert 1.2 < text_tokens(text, CLAUDE_5) / text_tokens(text, CLAUDE_4) < 1.4


def test_one_user_message_costs_its_text_and_the_frame():
    request = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hello there"}]}
    assert request_tokens(request) == CLAUDE_4.frame + text_tokens("hello there", CLAUDE_4)


def test_a_change_of_speaker_costs_a_header_and_a_continuation_one_token():
    one = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "a"}]}
    turns = {**one, "messages": [*one["messages"], {"role": "assistant", "content": "a"}]}
    joined = {**one, "messages": [*one["messages"], {"role": "user", "content": "a"}]}
    a = text_tokens("a", CLAUDE_4)
    assert request_tokens(turns) - request_tokens(one) == api_count.ROLE_CHANGE + a
    assert request_tokens(joined) - request_tokens(one) == api_count.SAME_ROLE + a


def test_tools_bring_the_hidden_tool_use_prompt_by_tool_choice():
    base = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}
    auto = request_tokens(base)
    forced = request_tokens({**base, "tool_choice": {"type": "any"}})
    none = request_tokens({**base, "tool_choice": {"type": "none"}})
    assert auto == none
    assert forced - auto == CLAUDE_4.tool_prompt_forced - CLAUDE_4.tool_prompt_auto
    without = request_tokens({**base, "tools": []})
    assert auto - without == CLAUDE_4.tool_prompt_auto + api_count.tool_tokens(TOOL, CLAUDE_4)


def test_a_deferred_tool_counts_only_once_a_tool_reference_loads_it():
    deferred = {**TOOL, "name": "later", "defer_loading": True}
    base = {"model": "claude-sonnet-4-5", "tools": [TOOL, deferred], "messages": [{"role": "user", "content": "go"}]}
    assert api_count.tool_tokens(deferred, CLAUDE_4) == 0
    call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "later"}}
    loaded = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "tool_reference", "tool_name": "later"}]}
    reference = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "tool_reference", "tool_name": "x"}]}
    def with_result(result):
        return {**base, "messages": [*base["messages"], {"role": "assistant", "content": [call]},
                                     {"role": "user", "content": [result]}]}
    extra = request_tokens(with_result(loaded)) - request_tokens(with_result(reference))
    assert extra == api_count.tool_tokens({**deferred, "defer_loading": False}, CLAUDE_4) + (
        api_count.TOOL_REFERENCE_WRAPPER + text_tokens("later", CLAUDE_4) - text_tokens("x", CLAUDE_4))


def test_a_tool_reference_loads_the_definition_of_a_declared_tool_too():
    """The API expands every reference into the tool's definition, even one already declared."""
    call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "python"}}
    def referring_to(name):
        reference = {"type": "tool_reference", "tool_name": name}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [reference]}
        return {"model": "claude-sonnet-4-5", "tools": [TOOL], "messages": [
            {"role": "user", "content": "go"}, {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]}]}
    extra = request_tokens(referring_to("python")) - request_tokens(referring_to("x"))
    assert extra == api_count.tool_tokens(TOOL, CLAUDE_4) + api_count.TOOL_REFERENCE_WRAPPER + text_tokens(
        "python", CLAUDE_4) - text_tokens("x", CLAUDE_4)


def test_a_loaded_definition_costs_its_wrapper_in_the_newer_tokenizers_shorter_markup():
    """Loading by reference costs a few tokens beyond the definition, scaled like a tool round's markup."""
    call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "python"}}
    def referring_to(name, model):
        reference = {"type": "tool_reference", "tool_name": name}
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [reference]}
        return {"model": model, "tools": [TOOL], "messages": [
            {"role": "user", "content": "go"}, {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]}]}
    family = family_of("claude-opus-5")
    assert family is CLAUDE_5
    extra = request_tokens(referring_to("python", "claude-opus-5")) - request_tokens(referring_to("x", "claude-opus-5"))
    wrapper = extra - api_count.tool_tokens(TOOL, family) - text_tokens("python", family) + text_tokens("x", family)
    assert wrapper == round(api_count.TOOL_REFERENCE_WRAPPER * 43 / 53) < api_count.TOOL_REFERENCE_WRAPPER


def test_a_system_messages_tool_addition_loads_the_definition_it_names():
    """A mid-conversation system message adding a deferred tool names it by `name` (a tool result's
    reference says `tool_name`); either way the definition it loads is counted."""
    deferred = {**TOOL, "name": "later", "defer_loading": True}
    def adding(name):
        addition = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": name}}
        return {"model": "claude-opus-4-8", "tools": [TOOL, deferred], "messages": [
            {"role": "user", "content": "go"}, {"role": "system", "content": [addition]}]}
    family = family_of("claude-opus-4-8")
    extra = request_tokens(adding("later")) - request_tokens(adding("x"))
    assert extra == api_count.tool_tokens({**deferred, "defer_loading": False}, family) + block_count.markup(
        api_count.TOOL_REFERENCE_WRAPPER, family) + text_tokens("later", family) - text_tokens("x", family)


def pdf(*pages: bytes) -> dict:
    """A PDF of these content streams (deflated, as PDF writers store them), one page each."""
    parts = [b"%PDF-1.4\n"]
    for i, content in enumerate(pages):
        stream = zlib.compress(content)
        parts.append(b"%d 0 obj << /Type /Page /MediaBox [0 0 612 792] >> endobj\n" % (2 * i + 1))
        parts.append(b"%d 0 obj << /Length %d /Filter /FlateDecode >> stream\n%s\nendstream endobj\n"
                     % (2 * i + 2, len(stream), stream))
    data = base64.b64encode(b"".join(parts)).decode()
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}


def test_a_pdf_counts_each_page_as_an_image_and_the_text_the_pages_show():
    """The PDF docs: every page is read as an image and as its text."""
    said = b"BT /F1 12 Tf 72 700 Td (Quarterly revenue grew by 12 percent) Tj ET"
    kerned = b"BT /F1 12 Tf 72 680 Td [(Costs fell) -250 (\\(slightly\\))] TJ ET"
    blank = block_count.block_tokens(pdf(b"q Q", b"q Q"), CLAUDE_4)
    assert blank == block_count.DOCUMENT_WRAPPER + 2 * block_count.PDF_PAGE
    shown = "Quarterly revenue grew by 12 percent\nCosts fell(slightly)"
    assert block_count.pdf_text(base64.b64decode(pdf(said + b"\n" + kerned)["source"]["data"])) == shown
    with_text = block_count.block_tokens(pdf(said + b"\n" + kerned, b"q Q"), CLAUDE_4)
    assert with_text == blank + text_tokens(shown, CLAUDE_4)


def test_an_image_costs_its_pixels_over_750_after_the_documented_downscale():
    assert block_count.block_tokens(png(200, 200), CLAUDE_4) == 54  # the vision docs' 200 x 200 example
    assert block_count.block_tokens(png(1000, 1000), CLAUDE_4) == 1334
    assert block_count.block_tokens(png(4000, 3000), CLAUDE_4) == CLAUDE_4.image_max_tokens  # scaled down first
    assert block_count.block_tokens(png(4000, 3000), CLAUDE_5) > CLAUDE_4.image_max_tokens  # a larger resolution


def test_earlier_turns_thinking_counts_only_for_models_that_keep_it():
    thought = {"type": "thinking", "thinking": "Let me think about this carefully. " * 20, "signature": "s"}
    answer = {"role": "assistant", "content": [thought, {"type": "text", "text": "a"}]}
    messages = [{"role": "user", "content": "q"}, answer, {"role": "user", "content": "next"}]
    keeps = api_count.message_counts({"model": "claude-opus-4-6", "messages": messages})
    drops = api_count.message_counts({"model": "claude-sonnet-4-5", "messages": messages})
    assert keeps[1][0] > api_count.ROLE_CHANGE and drops[1][0] == api_count.ROLE_CHANGE
    call = {"type": "tool_use", "id": "t1", "name": "python", "input": {"code": "1"}}
    loop = [messages[0], {"role": "assistant", "content": [thought, call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1"}]}]
    assert api_count.message_counts({"model": "claude-sonnet-4-5", "messages": loop})[1][0] > api_count.ROLE_CHANGE


def test_a_server_tool_brings_its_own_hidden_instructions():
    search = {"type": "web_search_20250305", "name": "web_search"}
    base = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    added = request_tokens({**base, "tools": [search]}) - request_tokens(base)
    assert added == api_count.SERVER_TOOL_PROMPTS["web_search"]
