"""Images the API accepts: the type from the bytes, size and pixel limits, a text stand-in for
what is left out, and at most 100 images a request."""

from __future__ import annotations

import base64

import pytest
from image_samples import GIF_1X1, jpeg, png, png_header, webp

from ctx_magic.images import (
    API_MAX_BASE64_CHARS,
    OMIT_STEP,
    check_image,
    count_images,
    image_size,
    limit_images,
    recheck,
    sniff_media_type,
)
from ctx_magic.messages import Message, text_block, tool_result_block


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def image(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": b64(data)}}


@pytest.mark.parametrize(("data", "kind", "size"), [
    (png(3, 5), "image/png", (3, 5)), (jpeg(640, 480), "image/jpeg", (640, 480)),
    (GIF_1X1, "image/gif", (1, 1)), (webp(300, 200), "image/webp", (300, 200)),
])
def test_the_type_and_size_come_from_the_bytes(data, kind, size):
    assert sniff_media_type(data) == kind and image_size(data, kind) == size


def test_other_bytes_are_no_supported_image():
    assert sniff_media_type(b"BM6\x00\x00") is None  # a BMP
    assert sniff_media_type(b"hello world") is None


def test_a_valid_image_is_sent_as_it_is():
    check = check_image(b64(png()), "image/png")
    assert check.sent and check.block == image(png()) and check.corrected_from is None


def test_a_jpeg_declared_as_png_is_sent_as_jpeg():
    check = check_image(b64(jpeg()), "image/png")  # Image(filename='x.png') of a JPEG
    assert check.sent and check.block["source"]["media_type"] == "image/jpeg" and check.corrected_from == "image/png"


def test_raw_bytes_and_base64_with_line_breaks_are_both_taken():
    assert check_image(png(), "image/png").block == image(png())
    wrapped = "\n".join(b64(png())[i:i + 20] for i in range(0, len(b64(png())), 20)) + "\n"
    assert check_image(wrapped, "image/png").block == image(png())


def test_over_the_users_cap_is_left_out_with_a_stand_in():
    check = check_image(b64(png(40, 40, noise=True)), "image/png", max_chars=200)
    assert not check.sent and check.block["type"] == "text"
    assert check.block["text"].startswith("[image omitted: image/png of ") and "over the size cap of 200 bytes" in (
        check.block["text"])


def test_over_the_apis_5_mb_is_left_out_whatever_the_cap():
    big = png(1_200, 1_200, noise=True)  # 4.3 MB of pixels, 5.8 MB of base64
    check = check_image(b64(big), "image/png", max_chars=50_000_000)
    assert len(b64(big)) > API_MAX_BASE64_CHARS and not check.sent
    assert "over the API's limit of 5 MB" in check.block["text"]


@pytest.mark.parametrize(("data", "why"), [
    (b"not an image at all", "not a PNG, JPEG, GIF or WebP"),
    (png()[:40], "corrupt or cut short"),
    (jpeg()[:-2], "corrupt or cut short"),
    (png_header(9_000, 10), "over the API's 8,000-pixel limit"),
])
def test_unsupported_corrupt_and_oversized_images_are_left_out(data, why):
    check = check_image(b64(data), "image/png")
    assert not check.sent and why in check.block["text"] and why.split(",")[0] in (check.left_out or "") + (
        check.block["text"])


def test_data_that_is_not_base64_is_left_out():
    check = check_image("not base64!!", "image/png")
    assert not check.sent and "not valid base64" in check.block["text"]


# -- the count per request ----------------------------------------------------------------------


def conversation(n: int) -> list[Message]:
    """n images, alternating between a user message and a tool result, oldest first."""
    messages = []
    for i in range(n):
        block = image(png(1, 1, seed=i))
        if i % 2:
            messages.append(Message("user", (tool_result_block(f"t{i}", [text_block(f"plot {i}"), block]),)))
        else:
            messages.append(Message("user", (text_block(f"look {i}"), block)))
    return messages


def sent_images(messages: list[Message]) -> int:
    return count_images(messages)


def test_within_the_count_nothing_changes():
    messages = conversation(100)
    assert limit_images(messages) == (messages, 0)


def test_the_most_recent_100_are_kept_and_older_ones_become_text():
    messages = conversation(101)
    limited, omitted = limit_images(messages, step=1)
    assert sent_images(limited) == 100 and omitted == 1
    assert limited[0].content[1] == {"type": "text", "text": "[image omitted: an older image; at most the 100 most "
                                                             "recent are sent with each request]"}
    assert limited[1:] == messages[1:]


def test_the_oldest_go_in_steps_so_the_request_prefix_changes_rarely():
    first, omitted = limit_images(conversation(101))
    assert omitted == OMIT_STEP and sent_images(first) == 101 - OMIT_STEP
    later, _ = limit_images(conversation(120))
    assert [m.content for m in later[:101]][:OMIT_STEP] == [m.content for m in first[:OMIT_STEP]]  # same prefix
    assert sent_images(later) == 100


def test_with_more_than_20_images_none_over_2000_pixels_goes():
    messages = [*conversation(20), Message("user", (image(png_header(3_000, 100)),))]
    limited, omitted = limit_images(messages)
    assert omitted == 1 and "over 2,000 pixels a side" in limited[-1].content[0]["text"]
    fewer, omitted = limit_images([*conversation(19), Message("user", (image(png_header(3_000, 100)),))])
    assert omitted == 0


def test_stored_images_are_rechecked_a_wrong_type_fixed_and_no_image_replaced():
    wrong = image(jpeg(), "image/png")
    assert recheck(wrong)["source"]["media_type"] == "image/jpeg"
    junk = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(b"hello there")}}
    limited, omitted = limit_images([Message("user", (text_block("x"), junk, wrong))])
    assert omitted == 1 and limited[0].content[1]["type"] == "text" and limited[0].content[2] == recheck(wrong)


def test_unsent_messages_do_not_count():
    boundary = Message("user", (image(png()),), kind="boundary")
    assert count_images([boundary, *conversation(3)]) == 3


def test_the_request_frames_image_count_counts_only_what_was_added_and_recounts_after_a_change():
    from ctx_magic.agent.request import TurnCache

    cache, messages = TurnCache(), conversation(5)
    assert cache.image_count(messages) == 5
    grown = [*messages, *conversation(2), Message("user", (image(png()),), kind="boundary")]
    assert cache.image_count(grown) == 7  # the two new images; the boundary's is never sent
    changed = [Message("user", (text_block("cleared"),)), *grown[1:]]  # a message replaced: counted again
    assert cache.image_count(changed) == 6 == count_images(changed)
    assert cache.image_count(conversation(3)) == 3  # shorter: counted from scratch
