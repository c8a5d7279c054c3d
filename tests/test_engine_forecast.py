"""The live scheduler's ETA model: LiveState keeps the forecast's statistics and runs the chosen pass."""
from __future__ import annotations

from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from fairsched.engine.state import LiveState

T0 = 1_800_000_000.0


def q(pk: int, org: int, at: float, workflow: str = "code") -> ChartRow:
    return ChartRow(pk, org, workflow, "queued", at)


def state(charts, *, eta_model: str, budget: int = 1) -> LiveState:
    orgs = [OrgRow(1, "Big", "big", 1), OrgRow(2, "Small", "small", 1)]
    return LiveState(World(Config(budget, 1.0, 2.0, eta_model), orgs, {}, {("1", "code"): 60.0,
                                                                          ("2", "code"): 60.0}, list(charts)))


def backlog():
    # Big dumped 10 charts at once; Small has sent one chart a minute for an hour (all but one ran)
    return [q(i, 1, T0 + 3600) for i in range(1, 11)] + [q(100, 2, T0 + 3540)]


def small_history(s: LiveState) -> None:
    for i in range(59):
        s.forecast.observe_arrival("2", "code", T0 + 60 * i)


def test_lanes_model_is_the_lane_simulation():
    s = state(backlog(), eta_model="lanes")
    small_history(s)
    assert s.capture().eta_report(T0 + 3600).etas == s.queue.etas([], T0 + 3600, estimate=s.durations).etas


def test_forecast_model_expects_the_small_org_to_keep_sending():
    lanes = state(backlog(), eta_model="lanes")
    fore = state(backlog(), eta_model="forecast")
    small_history(fore)
    now = T0 + 3600
    lane_eta = lanes.capture().eta_report(now).etas["10"].finish_s
    fore_eta = fore.capture().eta_report(now).etas["10"].finish_s
    # Small's next charts (about one a minute) each take a turn ahead of Big's later charts
    assert lane_eta == 11 * 60.0
    assert fore_eta > lane_eta + 4 * 60.0


def test_arrivals_are_counted_once_and_successful_finishes_teach_durations():
    s = state(backlog(), eta_model="forecast")
    n0 = s.forecast.rates(T0 + 3600)["1"][1]
    s.apply_chart(11, q(11, 1, T0 + 3601))
    s.apply_chart(11, q(11, 1, T0 + 3601))  # the same row re-read (a resync): not a new arrival
    assert s.forecast.rates(T0 + 3600)["1"][1] == n0 * 11 / 10
    planned = s.to_start()
    s.commit_dispatch(planned, {cid: ("run", T0 + 3600) for cid in planned})
    cid = int(planned[0])
    org = str(s.running[cid].org)
    assert s.forecast.mean(org, "code") == 60.0
    s.finished(cid, "succeeded", 660.0)
    assert s.forecast.mean(org, "code") > 60.0
    planned = s.to_start()
    s.commit_dispatch(planned, {c: ("run", T0 + 3700) for c in planned})
    org = str(s.running[int(planned[0])].org)
    before = s.forecast.mean(org, "code")
    s.finished(int(planned[0]), "failed", 5.0)  # a failure says nothing about how long work takes
    assert s.forecast.mean(org, "code") == before


def test_changing_the_model_asks_for_a_pass_now():
    s = state(backlog(), eta_model="forecast")
    assert not s.apply_config(Config(1, 1.0, 2.0, "forecast")).eta_now
    assert s.apply_config(Config(1, 1.0, 2.0, "lanes")).eta_now
    assert s.config.eta_model == "lanes"


def test_snapshot_rows_carry_the_90_percent_bound_and_first_etas_are_promises():
    from fairsched.engine.publish import build_snapshot

    s = state(backlog(), eta_model="forecast", budget=2)
    for d in (30.0, 60.0, 120.0, 60.0):
        s.forecast.observe_finish("1", "code", d)
    now = T0 + 3600
    report = s.capture().eta_report(now)
    _, rows, _ = build_snapshot(s, report, now, p90=s.forecast.p90_finisher())
    assert all(r["p90_s"] > r["finish_s"] for r in rows if r["org"] == 1)  # a spread is known for Big
    first = s.first_etas(report.etas, now, list(report.etas))
    assert set(first) == {int(c) for c in report.etas}
    assert all(p90 >= eta for eta, p90 in first.values())
    # the promise of chart 1 calibrates the bound once it finishes
    planned = s.to_start()
    s.commit_dispatch(planned, {c: ("run", now) for c in planned})
    for c in planned:
        s.finished(int(c), "succeeded", 60.0, finished_at=now + 60.0)
    assert len(s.forecast._ratios) == len(planned)


def test_only_charts_without_a_first_eta_are_promised_each_pass():
    s = state(backlog(), eta_model="forecast")
    assert s.unpromised == {str(i) for i in range(1, 11)} | {"100"}
    s.unpromised -= {"100"}  # the database had its first ETA (start-up)
    s.unpromised.clear()     # a pass recorded the rest
    s.apply_chart(12, q(12, 2, T0 + 3700))
    s.apply_chart(12, q(12, 2, T0 + 3700))
    assert s.unpromised == {"12"}
    s.apply_chart(12, None)  # gone before any pass: nothing to record
    assert s.unpromised == set()
