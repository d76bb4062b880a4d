"""The panel and an undo, fed events as the session emits them: a compaction's card has an Undo that
names its boundary, and once an `Undone` arrives the card says so and the Undo goes; a snip's or a
clearing's undo marks the newest of them."""

from __future__ import annotations

from ctx_magic.events import Cleared, Compacted, Snipped, Undone
from ctx_magic.ui.panel import ContextPanel


def compacted(boundary: str) -> Compacted:
    return Compacted("manual", 5_000, 1_000, 12, boundary, (boundary, "s"), "the summary",
                     summarized_uuids=("a", "b"), reason="the user asked for it")


def undone(kind: str, key: str) -> Undone:
    return Undone(kind, key, ("a", "b"), {}, (), (), 1_000, 5_000)


def test_a_compaction_card_s_undo_names_its_boundary_and_goes_once_undone():
    asked: list[str] = []
    panel = ContextPanel(clock=lambda: 0.0, undo=lambda boundary: asked.append(boundary) or "Undid it.")
    panel.handle(compacted("b1"))
    panel.flush()
    button = panel.cards._undo_buttons["compaction-b1"]
    button.click()
    assert asked == ["b1"]
    panel.handle(undone("compaction", "b1"))
    panel.flush()
    card = panel.cards._cards["compaction-b1"]
    assert card.get_title(0).endswith(" · undone") and "ctx-magic-card-undone" in card._dom_classes
    assert button.layout.display == "none"
    assert [e.get("undone", False) for e in panel.timeline] == [True]


def test_a_snip_s_undo_marks_the_newest_snip_or_clearing_not_undone():
    panel = ContextPanel(clock=lambda: 0.0)
    panel.handle(Snipped(4, ("x", "y", "z", "w"), "m", 800, "manual"))
    panel.handle(Cleared("user", {"t1": "[cleared]"}, 300))
    panel.handle(undone("clearing", "t1"))
    panel.handle(undone("snip", "m"))
    panel.flush()
    assert [(e["kind"], e.get("undone", False)) for e in panel.timeline] == [("snip", True), ("snip", True)]
    assert [panel.cards._cards[key].value.count(" · undone</summary>") for key in ("snip-0", "snip-1")] == [1, 1]


def test_without_an_undo_the_compaction_card_has_no_button():
    panel = ContextPanel(clock=lambda: 0.0)
    panel.handle(compacted("b2"))
    panel.flush()
    assert panel.cards._undo_buttons == {}
