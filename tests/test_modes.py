"""The modes are string enums whose members are their wire values: what is stored, sent
as JSON or typed on the command line is the same text as before the enums."""
from __future__ import annotations

import json

import pytest

from control.models import SchedulerSettings
from fairsched.core.modes import EtaModel, Policy
from fairsched.core.scenario import ScenarioError, simulate
from fairsched.engine.forked import EtaPassIn
from fairsched.engine.rows import Config

TRACE = {"budget": 1, "orgs": [{"id": "a", "weight": 1}],
         "arrivals": [{"id": "1", "org": "a", "workflow": None, "at_s": 0, "actual_s": 5}]}


@pytest.mark.parametrize(("mode", "values"), [
    (Policy, ["wrr", "fifo", "proportional"]), (EtaModel, ["lanes", "forecast"]), (EtaPassIn, ["process", "thread"]),
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
