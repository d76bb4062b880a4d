"""The cache-break baseline a compaction resets, end to end: the offline server's prompt cache shares the
session's clock, so expiry, a lost cache and the legitimate rewrites are all real here."""

from __future__ import annotations

from agent_rig import prompt, rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.events import CacheBroke


def turns(r, numbers) -> None:  # type: ignore[no-untyped-def]
    for n in numbers:
        assert run_turn(r.session, prompt(n)).error is None
        r.clock.advance(20)


def test_a_lost_cache_is_reported_once_as_unexplained(tmp_path):
    with rig(tmp_path, window=200_000) as r:
        seen: list[CacheBroke] = []
        r.session.listeners.append(lambda e: seen.append(e) if isinstance(e, CacheBroke) else None)
        turns(r, range(3))
        assert seen == []
        r.api.endpoint.cache.clear()  # the server lost the cached prefix for no reason the client knows
        turns(r, [3, 4])
        status = r.session.status().to_json()
    assert len(seen) == 1 and seen[0].reason == "unexplained" and not seen[0].expected
    assert seen[0].previous_read > 2_000 and seen[0].cache_read < seen[0].previous_read * 0.95
    assert status["cache_breaks"] == [{"previous_read": seen[0].previous_read, "cache_read": seen[0].cache_read,
                                       "reason": "unexplained", "expected": False}]


def test_an_idle_gap_past_the_ttl_is_reported_as_expiry(tmp_path):
    with rig(tmp_path, window=200_000, model="claude-sonnet-4-6") as r:  # no thinking: the idle rules change nothing
        turns(r, range(3))  # three results: fewer than keep_recent, so the idle clearing has nothing to do
        r.clock.advance(10 * 60)
        turns(r, [3])
    assert [(b.reason, b.expected) for b in r.session.meter.breaks] == [("the cache expired after 10 min idle", True)]


def test_a_compaction_resets_the_baseline_so_its_drop_is_not_a_break(tmp_path):
    with rig(tmp_path, window=200_000) as r:
        turns(r, range(4))
        manual_compact(r.session)
        turns(r, range(4, 12))  # more results than keep_recent since the boundary
        cleared_before = len(r.session.live.state.cleared)
        r.clock.advance(10 * 60)  # idle: the clearing rewrites the prefix on purpose
        turns(r, range(12, 14))
        assert len(r.session.live.state.cleared) > cleared_before
    assert r.session.compaction.boundaries and r.session.meter.breaks == []
