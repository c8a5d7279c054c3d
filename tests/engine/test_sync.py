"""Sync alone (:mod:`fairsched.engine.sync`): notes, resyncs, reconcile, finish, cancels,
with the fakes of ``tests/test_tick.py`` behind a fake host."""
from __future__ import annotations

import pytest

from common.notify import ChartNote, SettingsNote
from fairsched.engine.notes import read_note
from fairsched.engine.store.rows import ChartRow
from fairsched.engine.sync import Sync
from fairsched.temporal.client import Outcome
from tests.engine.fakes import FakeHost, settle
from tests.test_tick import T0


@pytest.fixture
async def sync():
    host = FakeHost(budget=2, charts=3)
    await host.load()
    s = Sync(host)
    yield s
    s.stop_watching()


async def test_a_note_naming_a_chart_reads_its_row_and_returns_the_change(sync):
    host = sync.host
    host.store.add(9, 1)
    host.loop.notes.append(ChartNote(id=9))
    fx = await sync.apply_notes()
    assert "9" in host.state.queue and [e["kind"] for e in fx.events] == ["queued"]
    assert host.loop.notes == []


async def test_a_note_this_version_does_not_know_asks_for_a_resync(sync):
    sync.host.loop.notes.append(read_note(b'{"kind": "what"}'))
    await sync.apply_notes()
    assert sync.host.loop.resync_requested


async def test_a_failed_note_batch_keeps_its_notes_for_the_next_try(sync):
    host = sync.host
    host.loop.notes.append(SettingsNote())

    async def down():
        raise OSError("database down")
    host.store.read_config = down
    with pytest.raises(OSError):
        await sync.apply_notes()
    assert host.loop.notes == [SettingsNote()]


async def test_the_incremental_resync_applies_what_changed_and_moves_the_watermark(sync):
    host = sync.host
    host.store.set(2, paused=True)
    await sync.resync()
    assert host.state.queue.get("2").paused and sync.watermark is not None
    assert not host.loop.resync_requested


async def test_the_incremental_resync_reads_a_chunk_a_call_and_moves_the_watermark_after_the_last(sync):
    """At the whole backlog's take-over, or after a bulk import, many rows changed since the
    last read: a chunk a tick (the tick's dispatch between two), the watermark moved
    only once the last chunk is read, to when the first was."""
    host = sync.host
    host.RESYNC_CHUNK = 2
    for pk in (1, 2, 3):
        host.store.set(pk, paused=True)
    await sync.resync()
    q = host.state.queue
    assert [q.get(c).paused for c in ("1", "2", "3")] == [True, True, False]
    assert host.loop.resync_requested and host.loop.wake.is_set() and sync.watermark is None
    host.loop.wake.clear()
    await sync.resync()
    assert q.get("3").paused and sync.watermark is not None
    assert not host.loop.resync_requested and not sync.resync_under_way


async def test_the_full_resync_reads_a_chunk_per_call_then_the_charts_no_chunk_returned(sync):
    host = sync.host
    host.FULL_RESYNC_CHUNK = 2
    del host.store.rows[3]  # deleted by raw SQL: no chunk returns it
    host.clock.advance(host.FULL_RESYNC_S)
    assert sync.full_resync_wanted(host.clock.monotonic())
    await sync.full_resync_step()
    assert sync.full_resync_read == (2, {1, 2}) and host.loop.wake.is_set()
    await sync.full_resync_step()
    assert sync.full_resync_read is None and "3" not in host.state.queue
    assert sync.full_resync_due > host.clock.monotonic()


async def test_a_recorded_outcome_frees_the_budget(sync):
    host = sync.host
    host.state.commit_dispatch(["1"], {"1": ("run-1", T0)})
    host.store.set(1, state="running")
    host.temporal.runs[1] = "run-1"
    host.temporal.close(1)
    fx = await sync.record(1, host.temporal.outcomes[1], "result")
    assert host.store.state(1) == "succeeded" and 1 not in host.state.running
    assert [e["kind"] for e in fx.events] == ["finish"]


async def test_the_result_watch_reports_a_closed_workflow(sync):
    host = sync.host
    host.temporal.runs[1] = "run-1"
    sync.watch(1)
    await settle()
    host.temporal.close(1)
    await settle()
    assert [c for c, _ in host.loop.finished] == [1] and host.loop.wake.is_set()
    await sync.record_finished()
    assert host.loop.finished == []


async def test_the_result_watch_of_a_workflow_temporal_does_not_know_leaves_it_to_the_reconcile(sync):
    sync.watch(5)  # never started: the fake's outcome() raises WorkflowNotFound once it "closes"
    sync.host.temporal.closed[5].set()
    await settle()
    assert sync.host.loop.finished == [] and sync.watching[5].done()


async def test_reconcile_requeues_a_running_chart_temporal_does_not_know(sync):
    host = sync.host
    host.state.commit_dispatch(["1"], {"1": ("run-1", T0)})
    host.store.set(1, state="running")
    await sync.reconcile()
    assert host.store.state(1) == "queued" and 1 not in host.state.running and "1" in host.state.queue


async def test_reconcile_adopts_a_workflow_whose_row_is_still_queued(sync):
    host = sync.host
    host.temporal.runs[2] = "run-2"  # started, then a crash before the compare-and-set
    await sync.reconcile()
    assert host.store.state(2) == "running" and 2 in host.state.running
    assert host.store.marked[0][:3] == (2, 1, "run-2")


async def test_reconcile_describes_only_what_temporal_does_not_list_running_under_a_live_watch(sync):
    """Charts 1 and 2 run, watched; 3 runs unwatched. 1 still runs; 2 closed (Temporal lists
    it no longer; its watch has not reported yet). The reconcile asks about 2 (closed:
    recorded) and 3 (no watch to report its close), not about 1."""
    host = sync.host
    host.state.commit_dispatch(["1", "2", "3"], {c: (f"run-{c}", T0) for c in ("1", "2", "3")})
    for c in (1, 2, 3):
        host.store.set(c, state="running")
        host.temporal.runs[c] = f"run-{c}"
    sync.watch(1), sync.watch(2)
    await settle()
    at = Outcome("succeeded", "", None, None, "run-2")
    host.temporal.outcomes[2] = at  # closed, its watch not woken yet
    asked = []
    outcome = host.temporal.outcome

    async def counted(chart_id):
        asked.append(chart_id)
        return await outcome(chart_id)
    host.temporal.outcome = counted
    await sync.reconcile()
    assert sorted(asked) == [2, 3]
    assert host.store.state(2) == "succeeded" and 2 not in host.state.running
    assert {1, 3} <= set(host.state.running)


async def test_a_cancel_of_an_unknown_workflow_is_requested_all_the_same_and_escalates_after_the_grace(sync):
    host = sync.host
    host.state.commit_dispatch(["1"], {"1": ("run-1", T0)})
    host.store.set(1, state="running")
    host.temporal.runs[1] = "run-1"
    await sync.cancel(1)
    assert host.temporal.cancels == [1] and 1 in sync.cancels_sent
    await sync.escalate_cancels()
    assert host.temporal.terminated == {}  # within the grace
    host.clock.advance(host.CANCEL_GRACE_S)
    await sync.escalate_cancels()
    assert host.temporal.terminated == {1: "cancel not honoured within 60 s"}
    assert host.store.state(1) == "cancelled" and sync.cancels_sent == {}


async def test_a_terminated_workflow_that_closed_meanwhile_is_dropped_from_the_escalation(sync):
    host = sync.host
    host.state.commit_dispatch(["1"], {"1": ("run-1", T0)})
    await sync.cancel(1)  # ignored: still running when its grace is over
    host.clock.advance(host.CANCEL_GRACE_S)

    async def gone(chart_id, reason):
        from fairsched.engine.ports.temporal import WorkflowNotFound
        raise WorkflowNotFound("gone", "NOT_FOUND")
    host.temporal.terminate = gone
    assert 1 in sync.cancels_sent
    await sync.escalate_cancels()
    assert sync.cancels_sent == {}


async def test_a_closed_now_question_temporal_cannot_answer_is_no(sync):
    from fairsched.engine.ports.temporal import TemporalError

    async def busy(chart_id):
        raise TemporalError("deadline exceeded", "DEADLINE_EXCEEDED")
    sync.host.temporal.outcome = busy
    assert await sync._closed_now(1) is False


def test_only_a_terminated_ignored_cancel_is_rewritten_as_cancelled():
    other = Outcome("failed", "boom", None, None, "")
    assert Sync._as_escalated(other) is other


async def test_a_new_row_in_a_new_org_brings_the_org_in(sync):
    from fairsched.engine.store.rows import OrgRow
    host = sync.host
    host.store.orgs[7] = OrgRow(7, "Org 7", "org-7", 1)
    host.store.rows[20] = ChartRow(20, 7, "code", "queued", T0 + 20)
    await sync.apply_rows({20})
    assert "20" in host.state.queue and 7 in host.state.orgs
