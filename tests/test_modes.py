"""The modes are string enums whose members are their wire values: what is stored, sent
as JSON or typed on the command line is the same text as before the enums."""
from __future__ import annotations

import json

import pytest

from control import models as control_models
from control.models import SchedulerSettings
from scheduling.queue import FairQueue
from scheduling.modes import Dispatch, EtaModel, Policy, Share
from scheduling.contract.fields import ScenarioError
from scheduling.contract.scenario import simulate
from fairsched.engine.publish import build_snapshot
from fairsched.engine.forked import EtaPassIn
from fairsched.engine.store.rows import Config, OrgRow, World
from fairsched.engine.state import LiveState

TRACE = {"budget": 1, "orgs": [{"id": "a", "weight": 1}],
         "arrivals": [{"id": "1", "org": "a", "workflow": None, "at_s": 0, "actual_s": 5}]}


@pytest.mark.parametrize(("mode", "values"), [
    (Policy, ["wrr", "fifo", "proportional"]), (EtaModel, ["lanes", "forecast"]), (EtaPassIn, ["process", "thread"]),
    (Share, ["charts", "work"]), (Dispatch, ["strict", "backfill"]),
])
def test_each_member_is_its_wire_text(mode, values):
    assert [m.value for m in mode] == values
    assert [json.dumps(m) for m in mode] == [json.dumps(v) for v in values]
    assert [f"{m}" for m in mode] == values and all(mode(v) == v for v in values)


def test_the_settings_field_offers_the_same_stored_values():
    field = SchedulerSettings._meta.get_field("eta_model")
    assert field.choices == [("forecast", "forecast"), ("lanes", "lanes")] and field.default == "forecast"


@pytest.mark.parametrize("model", ["lanes", "forecast"])
def test_simulate_answers_plain_strings(model):
    result = simulate({**TRACE, "eta_model": model}, "fifo")
    assert (type(result["policy"]), type(result["eta_model"])) == (str, str)
    assert (result["policy"], result["eta_model"]) == ("fifo", model)
    with pytest.raises(ScenarioError, match="unknown policy 'lottery'"):
        simulate(TRACE, "lottery")


def test_the_scheduler_config_reads_the_settings_text_as_the_enum():
    assert Config(1, eta_model="lanes").eta_model is EtaModel.LANES
    assert Config(1).eta_model is EtaModel.FORECAST
    with pytest.raises(ValueError, match="eta_model: 'tarot' is not one of lanes, forecast"):
        Config(1, eta_model="tarot")


@pytest.mark.parametrize(("field", "choices", "default"), [
    ("share", control_models.Share, "charts"), ("dispatch", control_models.Dispatch, "strict"),
])
def test_the_policy_fields_store_the_core_members_text(field, choices, default):
    core = {"share": Share, "dispatch": Dispatch}[field]
    assert list(choices.values) == [m.value for m in core]
    assert SchedulerSettings._meta.get_field(field).default == default == core(default)
    assert control_models.RoundState._meta.get_field("share").default == "charts"


def test_the_queue_keeps_the_policies_as_members_given_as_text():
    q = FairQueue(budget=1, weights={"a": 1}, share="work", quantum_s=300, dispatch="backfill")
    assert (q.share, q.dispatch_policy) == (Share.WORK, Dispatch.BACKFILL)
    assert type(q.share) is Share and type(q.dispatch_policy) is Dispatch
    assert q.export_rounds().share == (Share.WORK, 300.0) == ("work", 300.0)
    assert q.set_policies(share="charts", dispatch="strict")
    assert type(q.share) is Share and type(q.dispatch_policy) is Dispatch
    assert q.share_key == (Share.CHARTS, None)
    assert not q.set_policies(share=Share.CHARTS, dispatch=Dispatch.STRICT)  # the same, as members
    with pytest.raises(ValueError, match="share: 'bytes' is not one of charts, work"):
        q.set_policies(share="bytes")
    with pytest.raises(ValueError, match="dispatch: 'eager' is not one of strict, backfill"):
        FairQueue(budget=1, weights={}, dispatch="eager")


def test_the_scheduler_config_reads_the_policies_text_as_the_members():
    c = Config(1, share="work", quantum_s=300, dispatch="backfill")
    assert (type(c.share), type(c.dispatch), type(c.quantum_s)) == (Share, Dispatch, float)
    assert c.policies == {"share": Share.WORK, "quantum_s": 300.0, "dispatch": Dispatch.BACKFILL}
    assert (Config(1).share, Config(1).dispatch) == (Share.CHARTS, Dispatch.STRICT)
    with pytest.raises(ValueError, match="share: 'bytes' is not one of charts, work"):
        Config(1, share="bytes")


def test_the_snapshot_and_the_simulation_give_the_policies_as_plain_text():
    state = LiveState(World(Config(1, share="work", dispatch="backfill"), [OrgRow(1, "Acme", "acme", 1)], {}, {}, []))
    snap, _, _ = build_snapshot(state, state.capture().eta_report(0.0), 0.0)
    json.dumps(snap)
    assert [type(v) for v in snap["policies"].values()] == [str, float, str]
    assert snap["policies"] == {"share": "work", "quantum_s": 600.0, "dispatch": "backfill"}
    result = simulate({**TRACE, "share": "work", "dispatch": "backfill"}, "wrr")
    assert (type(result["share"]), type(result["dispatch"])) == (str, str)
    assert (result["share"], result["dispatch"]) == ("work", "backfill")
    with pytest.raises(ScenarioError, match="unknown share 'bytes'"):
        simulate({**TRACE, "share": "bytes"}, "wrr")
