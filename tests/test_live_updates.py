"""The live-update protocol (common/live_updates.py): every kind's wire round trip, what an
unknown or malformed wire event does, the page's gap rule, and the one send path."""
from __future__ import annotations

import subprocess
import sys

import pytest

from common import live_updates as lu

ONE_OF_EACH = [
    lu.Queued(chart=1, org=2),
    lu.Running(chart=1, org=2),
    lu.Dispatched(chart=1, org=2, cost=3),
    lu.Finish(chart=1, org=2, state="succeeded", cost=3),
    lu.Removed(chart=1, state="deleted"),
    lu.Paused(chart=1),
    lu.Resumed(chart=1),
    lu.Prioritized(chart=1),
    lu.Unprioritized(chart=1),
    lu.MovedToFront(chart=1),
    lu.Weight(org=2, weight=0, held=True),
    lu.Budget(budget=4),
    lu.Budget(budget=4, action="set_budget", at=1.5, by="op"),
    lu.PoolChanged(pool="llm", capacity=8, action="set_pool", at=1.5, by="op"),
    lu.Cost(org=2, workflow="7", cost=2),
    lu.Cost(org=2, workflow=7, cost=2, action="set_cost"),
    lu.Batch(count=600),
    lu.ChartChanged(action="pause", org=2, chart={"id": 1, "org": 2, "paused": True}),
    lu.ChartChanged(action="rerun", org=2, chart={"id": 9, "org": 2}, rerun_of=1, at=2.0, by="op"),
    lu.OrgChanged(action="hold", org=2, org_row={"id": 2, "weight": 0, "held": True}),
    lu.Audit(entry={"id": 5, "summary": "Held Acme"}),
    lu.SnapshotStored(seq=41),
]


def test_every_kind_has_one_event_class_and_a_round_trip():
    assert {type(e).kind for e in ONE_OF_EACH} == set(lu.EventKind)
    for event in ONE_OF_EACH:
        wire = event.to_wire()
        assert wire["kind"] == event.kind.value
        assert lu.event_from_wire(wire) == event
        assert lu.event_from_wire(dict(wire)).to_wire() == wire


def test_the_wire_form_is_what_the_pages_read():
    assert lu.Queued(chart=1, org=2).to_wire() == {"kind": "queued", "chart": 1, "org": 2}
    # The scheduler's budget has no echo fields; the operator's echo has them.
    assert lu.Budget(budget=4).to_wire() == {"kind": "budget", "budget": 4}
    assert lu.Budget(budget=4, action="set_budget").stamped(at=1.0, by="op").to_wire() == {
        "kind": "budget", "budget": 4, "action": "set_budget", "at": 1.0, "by": "op"}
    assert "rerun_of" not in lu.ChartChanged(action="pause", org=1, chart={}).to_wire()
    assert "org" not in lu.Audit(entry={}).to_wire()  # org pages filter on "org": never an audit entry


def _stamped(event: lu.Event) -> lu.Event:
    """``event`` as an operator's echo would carry it, where it can."""
    return event.stamped(at=3.0, by="zelda-ops") if isinstance(event, lu._Echo) else event


def test_what_a_member_receives_is_built_for_members():
    """Members get their org's events with only the fields named for them: never an operator's
    name (the pages hide it), never another org's events, the budget or the audit trail."""
    staff_only = {"secret": "x", "by": "zelda-ops", "actor": "zelda-ops"}
    for event in ONE_OF_EACH + [
            lu.ChartChanged(action="pause", org=2, chart={"id": 1, "org": 2, "paused": True, **staff_only}),
            lu.OrgChanged(action="hold", org=2, org_row={"id": 2, "weight": 0, "held": True, **staff_only})]:
        event = _stamped(event)
        got = lu.for_member(event, 2)
        assert "zelda" not in repr(got), (event, got)
        assert "secret" not in repr(got), (event, got)
        assert lu.for_member(event, 3) is None  # another org's
        if got is not None:
            assert got["kind"] == event.kind.value and got["org"] == 2
            assert set(got) <= set(event.to_wire()) - {"by"}
    assert lu.for_member(lu.Budget(budget=4, action="set_budget", at=1.0, by="op"), 2) is None
    assert lu.for_member(lu.Audit(entry={"by": "op"}), 2) is None
    assert lu.for_member(_stamped(lu.ChartChanged(action="pause", org=2, chart={"id": 1, "paused": True})), 2) == {
        "kind": "chart", "org": 2, "chart": {"id": 1, "paused": True}, "action": "pause", "at": 3.0}


def test_every_kind_has_a_member_decision():
    assert set(lu.MEMBER_KINDS) == set(lu.EventKind)


@pytest.mark.parametrize("wire", [{"kind": "settings", "budget": 3}, {"kind": "resync"}, {}, {"kind": None}])
def test_an_unknown_kind_is_refused(wire):
    with pytest.raises(lu.UnknownEventKind):
        lu.event_from_wire(wire)


@pytest.mark.parametrize("wire", [{"kind": "dispatch", "chart": 1}, {"kind": "queued", "chart": 1, "org": 2, "seq": 3},
                                  ["queued"], "queued"])
def test_a_missing_or_unknown_field_is_refused(wire):
    with pytest.raises(ValueError):
        lu.event_from_wire(wire)


def test_gap_detection_on_n():
    assert not lu.refetch_needed(0, 7, "events")  # the first message on a socket
    assert not lu.refetch_needed(3, 4, "events")
    assert lu.refetch_needed(3, 5, "events")      # 4 went missing
    assert lu.refetch_needed(3, 3, "order")       # a repeat is not the next one either
    assert not lu.refetch_needed(3, 9, "snapshot")  # a snapshot starts afresh


def test_the_page_applies_the_same_rule():
    js = open("dashboard/static/dashboard/live.js").read()
    assert 'lastN && msg.n !== lastN + 1 && msg.type !== "snapshot"' in js
    assert '{type: "refetch"' in js and "resync" not in js


def test_send_and_asend_put_one_group_message_on_the_layer():
    sent = []

    class Layer:
        async def group_send(self, group, message):
            sent.append((group, message))

    lu.send(lu.Dispatched(chart=1, org=2, cost=1), {"running": 1}, layer=Layer())
    assert sent == [("dashboard", {"type": "live.update", "event": {"kind": "dispatch", "chart": 1, "org": 2, "cost": 1},
                                   "counters": {"running": 1}})]


def test_a_failing_layer_is_logged_not_raised(caplog):
    class Broken:
        async def group_send(self, group, message):
            raise OSError("redis down")

    lu.send(lu.SnapshotStored(seq=1), layer=Broken())
    assert "not sent" in caplog.text


def test_the_protocol_module_imports_no_django_app():
    """The engine imports it: it must not pull in the dashboard, charts, orgs or models."""
    code = ("import sys, common.live_updates, fairsched.engine.state; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('dashboard', 'charts', 'orgs', 'django')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
