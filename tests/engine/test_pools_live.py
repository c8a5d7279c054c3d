"""Capacity pools in the live scheduler's state (docs/scheduling.md, "Pools"): the state
dispatches by the pools its settings carry, a running chart holds what it started with,
a change applies live, and the database's pools, costs and limits are read as the
contract reads a scenario's."""
from __future__ import annotations


import pytest

from fairsched.engine.state import LiveState
from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World
from scheduling.pools import Limit, Pools

T0 = 1_800_000_000.0


def q(pk: int, org: int, workflow: str) -> ChartRow:
    return ChartRow(pk, org, workflow, "queued", T0 + pk)


def pools(gpu: int = 1, a_max: int | None = None) -> Pools:
    # org 1's audits draw llm 1 + gpu 1, org 2's reviews llm 1; the budget is default (unused)
    limits = {("1", "llm"): Limit(max=a_max)} if a_max is not None else {}
    return Pools({"default": 4, "llm": 2, "gpu": gpu}, {("1", "audit"): (("gpu", 1), ("llm", 1)),
                                                         ("2", "review"): (("llm", 1),)}, limits)


def state(p: Pools | None, charts) -> LiveState:
    orgs = [OrgRow(1, "A", "a", 1), OrgRow(2, "B", "b", 1)]
    return LiveState(World(Config(4, 1.0, 2.0, pools=p), orgs, {}, {}, list(charts)))


def test_dispatch_walks_the_pools_and_a_running_chart_holds_its_demand():
    s = state(pools(), [q(1, 1, "audit"), q(2, 1, "audit"), q(3, 2, "review"), q(4, 2, "review")])
    assert s.queue.order() == ["1", "3", "2", "4"]
    planned = s.to_start()
    assert planned == ["1", "3"]  # gpu 1: the second audit waits, and blocks llm for the review behind it
    new = s.commit_dispatch(planned, {c: ("run", T0) for c in planned})
    assert {r.id: r.demand for r in new} == {1: (("gpu", 1), ("llm", 1)), 3: (("llm", 1),)}
    assert s.to_start() == []
    from fairsched.engine.publish import pool_summary
    got = pool_summary(s.capture())  # what the snapshot, the dashboard and the metrics read
    use = {p["name"]: (p["capacity"], p["in_use"]) for p in got["pools"]}
    assert use["llm"] == (2, 2) and use["gpu"] == (1, 1)
    assert got["org_pools"]["1"]["gpu"] == {"in_use": 1, "max": None, "min": 0, "waiting_at_ceiling": None}


def test_a_change_of_pools_applies_live_and_a_ceiling_holds_only_its_org():
    s = state(pools(gpu=0), [q(1, 1, "audit"), q(3, 2, "review")])
    assert s.queue.blocked == ["1"] and s.to_start() == ["3"]  # gpu at 0: the audit can never start
    fx = s.apply_config(Config(4, 1.0, 2.0, pools=pools(gpu=2, a_max=0)))
    assert fx.eta_now and s.queue.blocked == ["1"]  # now a's ceiling of 0 in llm blocks it
    s.apply_config(Config(4, 1.0, 2.0, pools=pools(gpu=2)))
    assert s.queue.blocked == [] and s.to_start() == ["1", "3"]
    s.apply_config(Config(4, 1.0, 2.0, pools=None))  # no pools: the budget alone, every cost 1
    assert s.queue.pools is None and s.to_start() == ["1", "3"]


def test_under_backfill_a_chart_of_one_pool_starts_past_a_head_waiting_for_another():
    """docs/scheduling.md, "Backfill with pools": the second audit waits for the gpu until
    600 s; the review behind it (llm only) fits beside it for its bound, and starts now; its
    guard's window is held in llm and saved with the round state."""
    p = Pools({"default": 4, "llm": 3, "gpu": 1}, pools().demands)
    s = LiveState(World(Config(4, 1.0, 2.0, pools=p, dispatch="backfill"),
                        [OrgRow(1, "A", "a", 1), OrgRow(2, "B", "b", 1)], {}, {},
                        [q(1, 1, "audit"), q(2, 1, "audit"), q(3, 2, "review"), q(4, 2, "review")]))
    assert s.queue.order() == ["1", "3", "2", "4"]
    planned = s.to_start(T0)
    assert planned == ["1", "3", "4"]  # strict would stop at 2 (gpu) and keep 4 behind it in llm
    s.commit_dispatch(planned, {c: ("run", T0) for c in planned})
    assert [h[3] for h in s.queue.export_rounds().holds] == [{"llm": 1}]
    assert s.capture().eta_report(T0).etas["2"] == (600.0, 1200.0)


def test_under_backfill_a_ceiling_holds_its_org_and_blocks_no_one():
    """docs/scheduling.md, "Backfill with limits": A's ceiling of 1 in llm; A's second audit
    waits at it until the first ends (600 s), and B's reviews behind it start now in llm."""
    p = Pools({"default": 4, "llm": 3, "gpu": 2}, pools().demands, {("1", "llm"): Limit(max=1)})
    s = LiveState(World(Config(4, 1.0, 2.0, pools=p, dispatch="backfill"),
                        [OrgRow(1, "A", "a", 1), OrgRow(2, "B", "b", 1)], {}, {},
                        [q(1, 1, "audit"), q(2, 1, "audit"), q(3, 2, "review"), q(4, 2, "review")]))
    assert s.queue.order() == ["1", "3", "2", "4"]
    planned = s.to_start(T0)
    assert planned == ["1", "3", "4"]  # gpu has room for 2, A's ceiling has not
    s.commit_dispatch(planned, {c: ("run", T0) for c in planned})
    assert s.capture().eta_report(T0).etas["2"] == (600.0, 1200.0)
    assert s.to_start(T0) == []


def test_the_etas_account_for_every_pool():
    s = state(pools(), [q(1, 1, "audit"), q(2, 1, "audit"), q(3, 2, "review")])
    planned = s.to_start()
    s.commit_dispatch(planned, {c: ("run", T0) for c in planned})
    rep = s.capture().eta_report(T0)
    # estimates are the default 600 s: the second audit waits for the gpu until the first ends
    assert rep.etas["2"] == (600.0, 1200.0)


@pytest.mark.django_db
def test_the_database_pools_costs_and_limits_are_read_as_the_scheduler_needs_them():
    from control import services as control
    from fairsched.engine.store import db
    from orgs import services as orgs
    from tests.factories import make_org, make_workflow

    assert db.read_config().pools is None  # nothing set up: the budget alone
    a = make_org("A")
    audit = make_workflow("audit")
    control.pool_set(name="llm", capacity=8)
    control.pool_set(name="gpu", capacity=4)
    orgs.workflow_cost_set(org=a, workflow=audit, cost=1, pools={"llm": 1, "gpu": 2})
    orgs.org_pool_limit_set(org=a, pool="llm", max=3, min=1)
    p = db.read_config().pools
    assert p.capacity == {"default": db.read_config().budget, "gpu": 4, "llm": 8}
    assert p.demand(str(a.pk), "audit") == (("gpu", 2), ("llm", 1))
    assert p.limits == {(str(a.pk), "llm"): Limit(max=3, min=1)}
    from control.models import AuditEntry
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True))[-4:] == ["pool", "pool", "cost",
                                                                                              "limit"]


def test_a_restart_counts_what_a_running_chart_held_not_its_pairs_demand_after_a_change():
    """A running audit was dispatched drawing llm 2; its cost now draws llm 1. After a restart
    it still holds 2 of llm's 2 (what Temporal runs), so no review starts: with its pair's
    demand now it would hold 1, and a review would take llm past its capacity."""
    after = Pools({"default": 4, "llm": 2}, {("1", "audit"): (("llm", 1),), ("2", "review"): (("llm", 1),)})
    running = ChartRow(1, 1, "audit", "running", T0, started_at=T0, dispatched_cost=1)
    orgs = [OrgRow(1, "A", "a", 1), OrgRow(2, "B", "b", 1)]
    world = World(Config(4, 1.0, 2.0, pools=after), orgs, {}, {}, [running, q(3, 2, "review")],
                  running_pools={1: (("llm", 2),)})
    s = LiveState(world)
    assert s.running[1].demand == (("llm", 2),) and s.to_start() == []
    s = LiveState(World(Config(4, 1.0, 2.0, pools=after), orgs, {}, {}, [running, q(3, 2, "review")]))
    assert s.running[1].demand is None and s.to_start() == ["3"]  # nothing recorded: its pair's demand now


@pytest.mark.django_db
def test_what_a_chart_holds_is_recorded_when_it_starts_and_cleared_when_it_is_requeued():
    from charts.lifecycle import chart_requeue
    from fairsched.engine.store import db
    from tests.factories import make_chart, make_org, make_workflow

    a, audit = make_org("A"), make_workflow("audit")
    one, two, three = (make_chart(a, audit) for _ in range(3))
    ran = db.mark_running([(one.pk, 1, "r1", T0), (two.pk, 1, "r2", T0), (three.pk, 1, "r3", T0)],
                          pools={one.pk: (("gpu", 2), ("llm", 1)), two.pk: (("llm", 1),)})
    assert ran == {one.pk: True, two.pk: True, three.pk: True}
    assert db.read_running_pools() == {one.pk: (("gpu", 2), ("llm", 1)), two.pk: (("llm", 1),)}
    assert db.read_world().running_pools == db.read_running_pools()
    assert db.mark_running([(one.pk, 1, "r9", T0)], pools={one.pk: (("llm", 5),)}) == {one.pk: False}
    assert db.read_running_pools()[one.pk] == (("gpu", 2), ("llm", 1))  # not moved: not touched
    assert chart_requeue(chart_id=one.pk, reason="test")
    assert db.read_running_pools() == {two.pk: (("llm", 1),)}


@pytest.mark.django_db
@pytest.mark.parametrize("call, message", [
    (lambda a, wf: __import__("orgs.services").services.workflow_cost_set(org=a, workflow=wf, cost=1,
                                                                          pools={"tpu": 1}), "unknown pool 'tpu'"),
    (lambda a, wf: __import__("orgs.services").services.org_pool_limit_set(org=a, pool="llm", max=1, min=2),
     "must be at most max"),
    (lambda a, wf: __import__("control.services").services.pool_set(name="default", capacity=3),
     "the budget's pool"),
])
def test_bad_pool_settings_are_refused_naming_the_field(call, message):
    from django.core.exceptions import ValidationError

    from control import services as control
    from tests.factories import make_org, make_workflow

    control.pool_set(name="llm", capacity=2)
    with pytest.raises(ValidationError) as e:
        call(make_org("A"), make_workflow("audit"))
    assert message in str(e.value)




def test_the_snapshot_names_each_pool_its_use_and_its_blocked_head():
    from fairsched.engine.publish import pool_summary

    s = state(pools(a_max=1), [q(1, 1, "audit"), q(2, 1, "audit"), q(3, 2, "review"), q(4, 2, "review")])
    planned = s.to_start()
    s.commit_dispatch(planned, {c: ("run", T0) for c in planned})
    got = pool_summary(s.capture())
    assert got["pools"] == [{"name": "default", "capacity": 4, "in_use": 0, "blocked_by": None},
                            {"name": "llm", "capacity": 2, "in_use": 2, "blocked_by": 4},
                            {"name": "gpu", "capacity": 1, "in_use": 1, "blocked_by": None}]
    # org 1 holds 1 of its ceiling of 1 in llm: its second audit waits there (and blocks no pool),
    # so org 2's second review is the head that waits for llm
    assert got["org_pools"]["1"]["llm"] == {"in_use": 1, "max": 1, "min": 0, "waiting_at_ceiling": 2}
    assert pool_summary(state(None, [q(1, 1, "audit")]).capture()) == {}


def test_the_metrics_carry_each_pool(monkeypatch):
    from monitoring import collector, sources

    reading = sources.Reading(orgs=[(1, "acme")], source="scheduler", charts={}, budget=4, in_use=1,
                              pools=[{"name": "default", "capacity": 4, "in_use": 1, "blocked_by": None},
                                     {"name": "llm", "capacity": 8, "in_use": 8, "blocked_by": 12}],
                              org_pools={1: {"llm": {"in_use": 8, "max": None}}})
    monkeypatch.setattr(sources, "read", lambda: reading)
    got = {(m.name, s.labels.get("pool"), s.labels.get("org")): s.value
           for m in collector.FairschedCollector().collect() for s in m.samples if "pool" in m.name}
    assert got[("fairsched_pool_capacity_units", "llm", None)] == 8
    assert got[("fairsched_pool_in_use_units", "llm", None)] == 8
    assert got[("fairsched_pool_blocked_heads", "llm", None)] == 1
    assert got[("fairsched_pool_blocked_heads", "default", None)] == 0
    assert got[("fairsched_org_pool_in_use_units", "llm", "acme")] == 8


def test_the_planner_finds_the_capacity_of_one_pool_that_clears_by_a_time():
    """'How many units of llm clear everything by then?': the answer meets the goal, one unit
    less does not (each checked by an ETA pass of its own here), and the budget is untouched."""
    from copy import deepcopy

    from fairsched.engine.planner import plan_budget

    charts = [q(i, 2, "review") for i in range(1, 13)]  # 12 reviews of 600 s, llm 1 each
    base = pools(gpu=1)
    got = plan_budget(state(base, charts), T0, clear_by=T0 + 1900, pool="llm")
    assert got.pool == "llm" and got.current == 2 and got.budget is not None

    def clear_at(llm: int) -> float:
        p = deepcopy(base)
        p.capacity["llm"] = llm
        return state(p, charts).capture().eta_report(T0).clear_s

    assert clear_at(got.budget) <= 1900 < clear_at(got.budget - 1)
    assert got.budget == 4  # 12 charts of 600 s in 1,900 s: 3 rounds of 4
    assert "capacity of pool llm 4 clears the backlog by then (now 2)" in got.why
    with pytest.raises(ValueError, match="unknown pool"):
        plan_budget(state(base, charts), T0, clear_by=T0 + 1900, pool="tpu")


def test_what_if_previews_a_pool_a_ceiling_and_a_minimum():
    """The preview's answer of each pool change equals the state with the change made."""
    from copy import deepcopy

    from fairsched.engine import whatif

    charts = [q(1, 1, "audit"), q(2, 1, "audit"), q(3, 2, "review"), q(4, 2, "review")]
    now = T0 + 100

    def clear_of(p: Pools) -> float:
        return state(p, charts).capture().eta_report(now).clear_s

    more_llm = deepcopy(pools(gpu=2))
    more_llm.capacity["llm"] = 4
    got = whatif.after_of(state(pools(gpu=2), charts),
                          whatif.Change.from_json({"kind": "pool", "pool": "llm", "value": 4}), now)
    assert got.clear_s == clear_of(more_llm) < clear_of(pools(gpu=2))
    got = whatif.after_of(state(pools(), charts),
                          whatif.Change.from_json({"kind": "ceiling", "org": 1, "pool": "llm", "value": 0}), now)
    assert got.orgs["1"][0] is None  # a ceiling of 0: org 1's audits never start, no clear-time
    assert whatif.changes_nothing(state(pools(), charts),
                                  whatif.Change.from_json({"kind": "pool", "pool": "llm", "value": 2}))
    with pytest.raises(whatif.ChangeError, match="pool"):
        whatif.Change.from_json({"kind": "pool", "value": 2})
    with pytest.raises(whatif.ChangeError, match="above the ceiling"):
        whatif.after_of(state(pools(a_max=1), charts),
                        whatif.Change.from_json({"kind": "minimum", "org": 1, "pool": "llm", "value": 2}), now)


def test_the_forecast_model_with_pools_is_the_forecasts_pass_unless_limits():
    """Under the forecast model (the default) a pooled state's ETAs are the forecast's pass
    with the pools (its phantoms and learned durations); with limits, the pools' own pass."""
    charts = [q(i, 1, "audit") for i in range(1, 7)]  # org 1's backlog; org 2's reviews share llm
    tight = Pools({"default": 4, "llm": 1, "gpu": 1}, pools().demands)
    s = state(tight, charts)
    for k in range(36):  # org 2 has sent a review every 100 s for an hour
        s.forecast.observe_arrival("2", "review", T0 - 3600 + k * 100)
    cap = s.capture()
    assert cap.eta_model.value == "forecast" and cap.forecast_pass
    rep = cap.eta_report(T0)
    assert dict(rep.etas) == dict(cap.forecast.etas(cap.queue, cap.running_charts(), T0).etas)
    assert dict(rep.etas) != dict(cap.queue.etas(cap.running_charts(), T0, estimate=cap.durations).etas)
    limited = state(Pools(tight.capacity, tight.demands, {("1", "llm"): Limit(max=2)}), charts)
    cap = limited.capture()
    assert not cap.forecast_pass
    assert dict(cap.eta_report(T0).etas) == dict(cap.queue.etas(cap.running_charts(), T0, estimate=cap.durations).etas)
