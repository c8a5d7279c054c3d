"""Each ETA pass's due states (fairsched.engine.due_states), published in the snapshot, and the
warnings it raises written through the store (with the hysteresis)."""
from __future__ import annotations

import dataclasses
import pickle

from fairsched.engine.due_states import due_pass
from fairsched.engine.publish import build_snapshot
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.engine.state import LiveState
from tests.test_tick import FakePublisher, pass_ends, rig  # noqa: F401 (the fixture)

T = 1_800_000_000.0


def state_of(charts, *, budget=1, turnaround=None):
    orgs = [OrgRow(1, "Acme", "acme", 1, turnaround), OrgRow(2, "Beta", "beta", 1, None)]
    return LiveState(World(Config(budget, eta_model="lanes"), orgs, {}, {}, charts))


def test_states_follow_the_etas_the_turnaround_and_the_own_due_times():
    # budget 1, 600 s each: ETAs 600, 1200, 1800, 2400 s after T
    charts = [ChartRow(i, 1 + (i == 4), "code", "queued", T - 10 + i) for i in range(1, 5)]
    charts[1] = dataclasses.replace(charts[1], due_at=T + 1000.0, due_explicit=True)  # own due: ETA 1200 > 1000
    charts.append(ChartRow(5, 1, "code", "queued", T, paused=True))
    state = state_of(charts, turnaround=3600.0)
    cap = state.capture()
    report = cap.eta_report(T)
    due = due_pass(cap, report.etas, T, None)
    got = {i: due.by_chart[i][1] for i in due.by_chart}
    # 1: ETA 600 <= T-9+3600; 2: own due 1000 < ETA 1200; 3: due 3593 vs ETA 1800;
    # 4 is Beta's (no turnaround, no own due: none); 5 paused: at risk until due
    assert got == {1: "on_time", 2: "late", 3: "on_time", 5: "at_risk"}
    assert due.by_chart[2][2] == 1000.0 - report.etas["2"].finish_s
    snap, rows, per_org = build_snapshot(cap, report, T, due=due)
    assert snap["due"]["counts"] == {"on_time": 2, "at_risk": 1, "late": 1}
    assert [c["id"] for c in snap["due"]["charts"]] == [2, 5]  # least slack first
    assert snap["due"]["charts"][1]["reason"] == "paused: no ETA"
    assert next(o for o in snap["orgs"] if o["id"] == 1)["due"] == {"on_time": 2, "at_risk": 1, "late": 1}
    by_id = {r["id"]: r for r in rows}
    assert by_id[2]["due_state"] == "late" and by_id[4]["due_state"] is None
    assert [f["id"] for f in per_org[1]["flagged"]] == [2, 5] and per_org[2]["flagged"] == []
    assert set(due.levels) == {2, 5} and sorted(due.rose) == [2, 5]
    assert due.levels == {2: 2, 5: 1} and due.levels[5] == 1 and dict(due.levels.items()) == {2: 2, 5: 1}
    sent = pickle.loads(pickle.dumps(due))  # what a forked pass sends its parent
    assert sent.levels == {2: 2, 5: 1} and list(sent.rose) == list(due.rose)


def test_a_turnaround_change_reaches_every_unfinished_chart_without_rereading_one():
    charts = [ChartRow(i, 1, "code", "queued", T) for i in range(1, 4)]
    state = state_of(charts)
    cap = state.capture()
    assert due_pass(cap, cap.eta_report(T).etas, T, None).by_chart == {}
    state.apply_orgs([OrgRow(1, "Acme", "acme", 1, 1000.0)])  # what the org's notification reads
    cap = state.capture()
    got = due_pass(cap, cap.eta_report(T).etas, T, None).by_chart
    assert {i: s for i, (_, s, _) in got.items()} == {1: "on_time", 2: "late", 3: "late"}


async def test_the_scheduler_writes_the_warnings_that_rise_once(rig):  # noqa: F811
    r = rig(budget=1, charts=4, eta_pass_in="thread")
    snaps = []
    r.publisher.store_snapshot = lambda snap, rows, per_org: snaps.append(snap) or len(snaps)
    r.store.orgs[1] = OrgRow(1, "Org 1", "org-1", 1, 1500.0)  # due 1500 s after each chart's creation
    await r.lead()
    await r.tick()
    await pass_ends(r.s)
    assert snaps and snaps[-1]["due"]["counts"]["late"] >= 1
    first = r.store.due_alerts[-1]
    assert first[1] and set(first[1]) <= {2, 3, 4}
    n = len(r.store.due_alerts)
    for _ in range(5):  # nothing changes: no warning rises again
        r.clock.advance(1.0)
        r.renew_lease()
        r.s.etas.request_pass()
        await r.tick()
        await pass_ends(r.s)
    assert all(not rose for _, rose, _ in r.store.due_alerts[n:])
    assert r.store.rows[first[1][0]].due_alert in ("at_risk", "late")
