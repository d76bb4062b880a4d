"""The panel's counts card: the dollars row says what was saved only when something was."""

from __future__ import annotations

import pytest

from ctx_magic.prices import format_saving
from ctx_magic.ui.cards import counts_html


def dollars(spent: float, saved: float) -> str:
    shown = counts_html({"cost": {"session_usd": spent, "saved_usd": saved, "prices_source": "table"}})
    return shown.split("<dt>Dollars</dt><dd>", 1)[1].split("</dd>", 1)[0]


def test_a_saving_is_shown_with_its_amount():
    assert dollars(0.25, 0.0123) == "$0.2500 spent · saved at least $0.0123 by the context changes"


@pytest.mark.parametrize("saved", [0.0, 0.00004])
def test_a_saving_that_would_read_zero_dollars_is_not_mentioned(saved):
    assert dollars(0.25, saved) == "$0.2500 spent"


def test_a_saving_is_formatted_like_any_amount_or_not_at_all():
    assert (format_saving(0.0), format_saving(0.00004), format_saving(0.00006)) == (None, None, "$0.0001")
    assert format_saving(12.345) == "$12.35"
