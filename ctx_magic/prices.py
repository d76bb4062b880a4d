"""What a call costs in US dollars: a price table per model and the arithmetic on a usage.

Prices are USD per million tokens, in the five columns Anthropic's pricing page bills by: base
input, 5-minute cache writes, 1-hour cache writes, cache hits (reads and refreshes) and output.
A few models bill a whole request at a higher rate once its prompt (input + cache reads + cache
writes) passes a length: `long_prompt` holds those rates and `long_prompt_above` the length.

Sources (read 2026-10; the figures are the published list prices, written here in our own
table): Anthropic's pricing page and each model's overview page on platform.claude.com, and
for two later changes the pricing-tracker changelogs that reported them (see the notes on
Sonnet 5.5 and Fable 5.2 below). A custom contract overrides any column with the `prices`
setting (`Prices.parse`). The table is matched by model-id prefix, longest prefix first, after
`canonical_model` has taken away provider decorations (Bedrock's `us.anthropic.` and `-v1:0`,
Vertex's `@20250929`, dated suffixes).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PER_MILLION = 1_000_000
PRICE_COLUMNS = ("input", "cache_write_5m", "cache_write_1h", "cache_read", "output")


@dataclass(frozen=True)
class Prices:
    """USD per million tokens of one model (and, above a prompt length, the rates that apply)."""

    input: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    output: float
    long_prompt_above: int = 0
    """Prompts over this many tokens bill every token of the request at `long_prompt` (0: never)."""
    long_prompt: Prices | None = None
    source: str = "table"
    """table | config | unknown"""

    def for_prompt(self, prompt_tokens: int) -> Prices:
        """The rates a request with this many prompt tokens is billed at."""
        if self.long_prompt is not None and self.long_prompt_above and prompt_tokens > self.long_prompt_above:
            return self.long_prompt
        return self

    def with_overrides(self, overrides: Mapping[str, float]) -> Prices:
        """These prices with some columns replaced (a custom contract); long-prompt rates go too."""
        if not overrides:
            return self
        return dataclasses.replace(self, **dict(overrides), long_prompt=None, long_prompt_above=0, source="config")

    def figures(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in PRICE_COLUMNS}

    @staticmethod
    def parse(text: str) -> dict[str, float]:
        """`"input=2.5 output=12 cache_read=0.25"` (USD per million tokens) -> the columns named.

        Separators may be spaces, commas or semicolons. Raises ValueError naming the problem.
        """
        out: dict[str, float] = {}
        for item in re.split(r"[\s,;]+", text.strip()):
            if not item:
                continue
            name, sep, value = item.partition("=")
            if not sep or name not in PRICE_COLUMNS:
                raise ValueError(f"expected name=value with a name among {', '.join(PRICE_COLUMNS)}, got {item!r}")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"{name} must be a number of dollars per million tokens, got {value!r}") from None
            if not math.isfinite(number):
                raise ValueError(f"{name} must be a finite number of dollars per million tokens, got {value!r}")
            if number < 0:
                raise ValueError(f"{name} cannot be negative, got {value}")
            out[name] = number
        return out


def _p(input_: float, write_5m: float, write_1h: float, read: float, output: float, **extra: Any) -> Prices:
    return Prices(input_, write_5m, write_1h, read, output, **extra)


_HAIKU_5_5_LONG = _p(0.50, 0.625, 1.00, 0.05, 2.50)
_SONNET_4_LONG = _p(6.00, 7.50, 12.00, 0.60, 22.50)  # the 1M-context beta above 200,000 prompt tokens
HAIKU_5_5_SHORT_PROMPT = 100_000  # Haiku 5.5 bills prompts over 100,000 tokens at five times the rates
SONNET_4_SHORT_PROMPT = 200_000  # Sonnet 4 / 4.5 with the 1M beta: prompts over 200,000 at the long rates

# Longest matching prefix wins. USD per million tokens: input, 5m write, 1h write, cache read, output.
PRICE_TABLE: tuple[tuple[str, Prices], ...] = (
    # Fable / Mythos 5.2: $8 / $40, hits $0.20, writes $10 / $16 (a tracker's changelog; not yet on
    # the model overview pages we read, so flagged as doubtful in the README).
    ("claude-fable-5-2", _p(8.00, 10.00, 16.00, 0.20, 40.00)),
    ("claude-mythos-5-2", _p(8.00, 10.00, 16.00, 0.20, 40.00)),
    ("claude-fable-5-1", _p(10.00, 12.50, 20.00, 0.25, 50.00)),  # cache hits at 0.025x input
    ("claude-mythos-5-1", _p(10.00, 12.50, 20.00, 0.25, 50.00)),
    ("claude-fable-5", _p(10.00, 12.50, 20.00, 1.00, 50.00)),
    ("claude-mythos-5", _p(10.00, 12.50, 20.00, 1.00, 50.00)),
    ("claude-opus-5-5", _p(4.00, 5.00, 8.00, 0.20, 20.00)),  # cache hits at 0.05x input
    ("claude-opus-5", _p(5.00, 6.25, 10.00, 0.50, 25.00)),
    ("claude-opus-4-8", _p(5.00, 6.25, 10.00, 0.50, 25.00)),
    ("claude-opus-4-7", _p(5.00, 6.25, 10.00, 0.50, 25.00)),
    ("claude-opus-4-6", _p(5.00, 6.25, 10.00, 0.50, 25.00)),
    ("claude-opus-4-5", _p(5.00, 6.25, 10.00, 0.50, 25.00)),
    ("claude-opus-4-1", _p(15.00, 18.75, 30.00, 1.50, 75.00)),
    ("claude-opus-4", _p(15.00, 18.75, 30.00, 1.50, 75.00)),
    # Sonnet 5.5: the overview page lists hits at $0.20; three pricing trackers report a cut to
    # $0.10 (0.05x input) from 2026-10-07, which we follow. Override with the `prices` setting.
    ("claude-sonnet-5-5", _p(2.00, 2.50, 4.00, 0.10, 10.00)),
    ("claude-sonnet-5", _p(2.00, 2.50, 4.00, 0.20, 10.00)),
    ("claude-sonnet-4-6", _p(3.00, 3.75, 6.00, 0.30, 15.00)),
    ("claude-sonnet-4-5", _p(3.00, 3.75, 6.00, 0.30, 15.00, long_prompt_above=SONNET_4_SHORT_PROMPT,
                             long_prompt=_SONNET_4_LONG)),
    ("claude-sonnet-4", _p(3.00, 3.75, 6.00, 0.30, 15.00, long_prompt_above=SONNET_4_SHORT_PROMPT,
                           long_prompt=_SONNET_4_LONG)),
    ("claude-3-7-sonnet", _p(3.00, 3.75, 6.00, 0.30, 15.00)),
    ("claude-haiku-5-5", _p(0.10, 0.125, 0.20, 0.01, 0.50, long_prompt_above=HAIKU_5_5_SHORT_PROMPT,
                            long_prompt=_HAIKU_5_5_LONG)),
    ("claude-haiku-4-5", _p(1.00, 1.25, 2.00, 0.10, 5.00)),
    ("claude-3-5-haiku", _p(0.80, 1.00, 1.60, 0.08, 4.00)),
)
UNKNOWN_PRICES = Prices(0.0, 0.0, 0.0, 0.0, 0.0, source="unknown")
"""A model the table does not know costs nothing we can tell: shown as unknown, never guessed."""

_REGION_PREFIX = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.")  # us.anthropic. / global.anthropic. / anthropic.
_DATE_SUFFIX = re.compile(r"(?:@\d{8}|-\d{8})$")
_VERSION_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")


def canonical_model(model: str) -> str:
    """The first-party id behind a provider's id: `us.anthropic.claude-sonnet-4-5-20250929-v1:0`
    and `claude-sonnet-4-5@20250929` are both `claude-sonnet-4-5`."""
    name = model.rsplit("/", 1)[-1]  # an inference-profile ARN ends with the id
    name = _REGION_PREFIX.sub("", name)
    name = _VERSION_SUFFIX.sub("", name)
    return _DATE_SUFFIX.sub("", name)


def table_prices(model: str) -> Prices:
    """The model's list prices (UNKNOWN_PRICES when the table has no row for it)."""
    name = canonical_model(model)
    best = max((entry for entry in PRICE_TABLE if name.startswith(entry[0])), key=lambda e: len(e[0]), default=None)
    return best[1] if best is not None else UNKNOWN_PRICES


def model_prices(model: str, overrides: str = "") -> Prices:
    """The prices in force: the table's, with the columns a contract sets (the `prices` setting)."""
    table = table_prices(model)
    columns = Prices.parse(overrides) if overrides else {}
    if not columns:
        return table
    if table.source == "unknown":
        table = dataclasses.replace(UNKNOWN_PRICES, source="config")
    return table.with_overrides(columns)


@dataclass(frozen=True)
class Billed:
    """The five kinds of tokens one response is billed for."""

    input_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_5m_tokens + self.cache_write_1h_tokens + self.cache_read_tokens


def cost_usd(billed: Billed, prices: Prices) -> float:
    """What one response costs: each kind of token at its rate (the long-prompt rates when the
    prompt passes the model's threshold)."""
    rates = prices.for_prompt(billed.prompt_tokens)
    total = (billed.input_tokens * rates.input + billed.cache_write_5m_tokens * rates.cache_write_5m
             + billed.cache_write_1h_tokens * rates.cache_write_1h + billed.cache_read_tokens * rates.cache_read
             + billed.output_tokens * rates.output)
    return total / PER_MILLION


def format_usd(amount: float) -> str:
    """$0.0123 under a dollar (cents are too coarse for one call), $12.34 above."""
    if amount < 1:
        return f"${amount:.4f}"
    return f"${amount:,.2f}"


def format_saving(amount: float) -> str | None:
    """A saving as `format_usd` shows it, or None when it would read $0.0000: a saving of nothing
    is not news, and "saved at least $0.0000" reads as if something went wrong."""
    shown = format_usd(amount)
    return None if shown == format_usd(0.0) else shown
