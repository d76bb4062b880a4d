"""Which counter counts text (context/model_families.exact_counter) and what ctok's count becomes
(context/claude_tokenizer.py): the text's own tokens, the message frame left out."""

from __future__ import annotations

import math
import os
import sys
import threading
import time

import pytest

from ctx_magic.context import api_count, claude_tokenizer, model_families
from ctx_magic.context.o200k import o200k_tokens

PROSE = ("The stand-in counts every request the way the Messages API bills it, so a test that fits a "
         "conversation into its window fits it into the real one.")


@pytest.fixture
def ctok():
    """ctok itself: CI installs it, so there its absence fails; elsewhere it skips saying why."""
    if not claude_tokenizer.available():
        if os.environ.get("CI") == "true":
            pytest.fail("ctok is not installed: .ci/run installs it after the test dependencies")
        pytest.skip("ctok is not installed (pip install --no-deps --ignore-requires-python ctok)")
    import ctok
    return ctok


@pytest.fixture
def fallback(monkeypatch):
    """The calibrated o200k counter, as where ctok is absent."""
    monkeypatch.setenv(model_families.COUNTER_VARIABLE, "o200k")
    model_families.exact_counter.cache_clear()
    yield
    monkeypatch.delenv(model_families.COUNTER_VARIABLE, raising=False)
    model_families.exact_counter.cache_clear()


@pytest.mark.parametrize(("model", "frame"),
                         [("claude-sonnet-4-5", 7), ("claude-opus-4-7", 11), ("claude-opus-4-8", 6)])
def test_a_text_counts_as_one_user_message_without_the_frame(ctok, model, frame):
    family = model_families.family_of(model)
    assert family.frame == frame
    assert model_families.text_tokens(PROSE, family) == ctok.token_count(PROSE, family.tokenizer) - frame
    request = {"model": model, "messages": [{"role": "user", "content": PROSE}]}
    assert api_count.request_tokens(request) == ctok.token_count(PROSE, family.tokenizer)


def test_the_status_names_the_counter_in_use(ctok, fallback):
    assert model_families.counter_name().startswith("o200k")
    del os.environ[model_families.COUNTER_VARIABLE]
    model_families.exact_counter.cache_clear()
    assert model_families.counter_name() == f"Claude's tokenizer (ctok {claude_tokenizer.version()})"


def test_without_ctok_text_is_o200k_scaled_by_the_family(fallback):
    family = model_families.family_of("claude-sonnet-4-5")
    assert model_families.text_tokens(PROSE, family) == math.ceil(o200k_tokens(PROSE) * family.text_factor)


def test_very_long_text_is_counted_from_samples_within_a_few_percent(ctok):
    lines = [f"line {i}: {PROSE}" for i in range(1_500)]  # over 100,000 characters
    text = "\n".join(lines)
    exact = sum(claude_tokenizer.text_tokens(line, "3.0") for line in lines)
    assert len(text) > claude_tokenizer.EXACT_COUNT_CHARS
    assert abs(claude_tokenizer.text_tokens(text, "3.0") / exact - 1) < 0.05


class SlowCtok:
    """A stand-in for the ctok module whose vocabularies take a while to load, noting each load."""

    def __init__(self) -> None:
        self.loads: list[str] = []
        self.ready: set[str] = set()
        self.lock = threading.Lock()

    def _vocabulary(self, family: str) -> None:
        with self.lock:
            if family in self.ready:
                return
        time.sleep(0.05)  # long enough for another thread to ask meanwhile
        with self.lock:
            self.loads.append(family)
            self.ready.add(family)

    def token_count(self, text: str, family: str) -> int:
        self._vocabulary(family)
        return len(text.split()) + 7

    def tokenize(self, text: str, family: str) -> list[str]:
        self._vocabulary(family)
        return [text, *[claude_tokenizer.FRAME_TOKEN] * 7]


def test_a_warm_up_thread_and_the_first_count_load_each_vocabulary_once(monkeypatch):
    fake = SlowCtok()
    monkeypatch.setitem(sys.modules, "ctok", fake)
    monkeypatch.setattr(claude_tokenizer, "_loaded", {})
    claude_tokenizer._frame.cache_clear()
    claude_tokenizer.text_tokens.cache_clear()
    try:
        warming = threading.Thread(target=claude_tokenizer.warm, args=("4.8",))
        warming.start()
        assert claude_tokenizer.text_tokens("three words here", "4.8") == 3  # asked while it loads
        warming.join()
        assert sorted(fake.loads) == ["3.0", "4.8"]  # the probe's vocabulary and the family's, once each
    finally:
        claude_tokenizer._frame.cache_clear()
        claude_tokenizer.text_tokens.cache_clear()
