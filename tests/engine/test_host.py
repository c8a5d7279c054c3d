"""The loop's shared state (:class:`fairsched.engine.host.LoopState`) and what the Host
protocol declares: the inbox the reporters fill and the tick empties, and no private member."""
from __future__ import annotations

from common.notify import ChartNote
from fairsched.engine.host import BACKOFF_STEPS, Host, LoopState


async def test_each_report_wakes_the_loop_and_waits_in_the_inbox():
    loop = LoopState.new(0.5, 10.0)
    assert not loop.has_news and not loop.wake.is_set()
    loop.report_note(ChartNote(id=1))
    assert loop.wake.is_set() and loop.has_news
    loop.wake.clear()
    loop.report_finished(2, "outcome")
    assert loop.wake.is_set() and loop.finished == [(2, "outcome")]
    loop.wake.clear()
    loop.request_resync()
    assert loop.wake.is_set() and loop.resync_requested


async def test_notes_taken_and_not_applied_come_first_again():
    loop = LoopState.new(0.5, 10.0)
    loop.report_note(ChartNote(id=1))
    taken = loop.take_notes()
    assert loop.notes == []
    loop.report_note(ChartNote(id=2))  # reported while the step ran, which then failed
    loop.put_back_notes(taken)
    assert [n.id for n in loop.take_notes()] == [1, 2]


async def test_a_step_down_forgets_the_reports_not_the_events_or_backoffs():
    loop = LoopState.new(0.5, 10.0)
    loop.report_note(ChartNote(id=1))
    loop.report_finished(2, "outcome")
    loop.commits_done.append(("plan",))
    loop.backoff["dispatch"].fail(0.0)
    loop.forget_reports()
    assert not loop.has_news and loop.commits_done == []
    assert loop.wake.is_set() and loop.backoff["dispatch"].failures == 1
    assert set(loop.backoff) == set(BACKOFF_STEPS)


def test_the_host_protocol_declares_no_private_member():
    declared = set(Host.__annotations__) | {n for n in vars(Host) if callable(vars(Host)[n])}
    assert declared >= {"state", "rounds", "loop", "install", "sleep", "guarded", "rounds_settled"}
    assert not [n for n in declared if n.startswith("_") and not n.startswith("__")]
