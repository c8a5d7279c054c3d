"""The dashboard and org sockets through WebsocketCommunicator (always disconnected).

Covers: who may connect (anonymous, foreign Origin, non-staff), a snapshot on
connect, numbered messages, refetch on request, group messages it cannot read ignored,
coalescing, and every control with and without its permission.
"""
from __future__ import annotations

import json
import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import SESSION_KEY
from django.test import Client

from charts.models import Chart
from dashboard import consumers
from dashboard.routing import websocket_urlpatterns
from dashboard.simulate import publish_from_db
from common import live_updates
from control.models import SchedulerSettings
from orgs.models import Org, WorkflowCost
from tests.factories import make_user

pytestmark = pytest.mark.django_db(transaction=True)

app = URLRouter(websocket_urlpatterns)


async def _connect(user, path: str = "/ws/dashboard/") -> tuple[WebsocketCommunicator, bool]:
    comm = WebsocketCommunicator(app, path)
    comm.scope["user"] = user
    connected, _ = await comm.connect(timeout=10)
    return comm, connected


async def _open(user, path: str = "/ws/dashboard/") -> tuple[WebsocketCommunicator, dict]:
    comm, connected = await _connect(user, path)
    assert connected
    first = await comm.receive_json_from(timeout=5)
    return comm, first


async def _send(event: live_updates.Event, counters: dict | None = None) -> None:
    await live_updates.asend(event, counters)


def _dispatch(i: int) -> live_updates.Dispatched:
    return live_updates.Dispatched(chart=i, org=1, cost=1)


def _chart_of(org: int) -> live_updates.ChartChanged:
    return live_updates.ChartChanged(action="pause", org=org, chart={"id": 1, "org": org})


# --- who may connect -----------------------------------------------------------------------------------


async def test_anonymous_socket_is_refused():
    from config.asgi import application

    comm = WebsocketCommunicator(application, "/ws/dashboard/", headers=[(b"origin", b"http://localhost"),
                                                                          (b"host", b"localhost")])
    connected, _ = await comm.connect(timeout=10)
    assert not connected
    await comm.disconnect(timeout=10)


async def test_foreign_origin_is_refused_even_when_logged_in(viewer):
    from config.asgi import application

    cookie = await database_sync_to_async(_session_cookie)(viewer)
    good = WebsocketCommunicator(application, "/ws/dashboard/", headers=[
        (b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)])
    ok, _ = await good.connect(timeout=10)
    assert ok, "a logged-in viewer from our own origin gets in (the control case)"
    await good.disconnect(timeout=10)
    evil = WebsocketCommunicator(application, "/ws/dashboard/", headers=[
        (b"origin", b"http://evil.example"), (b"host", b"localhost"), (b"cookie", cookie)])
    connected, _ = await evil.connect(timeout=10)
    assert not connected
    await evil.disconnect(timeout=10)


def _session_cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    assert c.session[SESSION_KEY] == str(user.pk)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


@pytest.mark.parametrize("who", ["member", "staff_without_view_perm", "inactive_staff"])
async def test_non_staff_cannot_open_the_dashboard_socket(two_orgs, who):
    if who == "member":
        user = two_orgs["alice"]
    else:
        user = await database_sync_to_async(make_user)(who, staff=True, perms=() if who != "inactive_staff"
                                                       else ("charts.view_chart",))
        if who == "inactive_staff":
            user.is_active = False
            await database_sync_to_async(user.save)()
    comm, connected = await _connect(user)
    assert not connected
    await comm.disconnect(timeout=10)


# --- snapshot, numbering, refetch, coalescing --------------------------------------------------------


async def test_snapshot_on_connect_from_the_db_without_a_scheduler(two_orgs, viewer, redis_url):
    comm, first = await _open(viewer)
    try:
        assert first["type"] == "snapshot" and first["n"] == 1
        assert first["state"]["source"] == "db"
        assert first["state"]["counters"]["queued"] == 5
        assert first["order"]["known"] is False
    finally:
        await comm.disconnect(timeout=10)


async def test_snapshot_then_numbered_updates(two_orgs, viewer, redis_url):
    seq = await database_sync_to_async(publish_from_db)()
    comm, first = await _open(viewer)
    try:
        assert (first["type"], first["n"], first["seq"]) == ("snapshot", 1, seq)
        assert [r["external_id"] for r in first["order"]["rows"]] == ["a-0", "b-0", "a-1", "b-1", "a-2"]
        await _send(_dispatch(1), {"running": 1})
        ev = await comm.receive_json_from(timeout=2)
        assert (ev["type"], ev["n"], ev["counters"]) == ("events", 2, {"running": 1})
        seq2 = await database_sync_to_async(publish_from_db)()
        snap = await comm.receive_json_from(timeout=2)
        assert (snap["type"], snap["n"], snap["seq"]) == ("snapshot", 3, seq2)
        # The same seq again (a duplicate delivery) sends nothing.
        await _send(live_updates.SnapshotStored(seq=seq2))
        assert await comm.receive_nothing(timeout=0.4)
    finally:
        await comm.disconnect(timeout=10)


@pytest.mark.parametrize("ask", ["refetch", "resync"])  # "resync": pages loaded before the rename
async def test_refetch_request_gets_a_fresh_snapshot(two_orgs, viewer, redis_url, ask):
    await database_sync_to_async(publish_from_db)()
    comm, first = await _open(viewer)
    try:
        # The client saw n jump (say 1 -> 3) and asks for a snapshot.
        await comm.send_json_to({"type": ask, "after": 3})
        again = await comm.receive_json_from(timeout=2)
        assert (again["type"], again["n"]) == ("snapshot", 2)
        assert again["order"]["rows"] == first["order"]["rows"]
    finally:
        await comm.disconnect(timeout=10)


async def test_a_group_message_of_an_unknown_kind_is_ignored(two_orgs, viewer, redis_url):
    """A producer of another version (an unknown kind, a missing field) costs nothing but a log line."""
    comm, _ = await _open(viewer)
    try:
        layer = get_channel_layer()
        await layer.group_send(live_updates.GROUP, {"type": live_updates.GROUP_MESSAGE, "event": {"kind": "nope"}})
        await layer.group_send(live_updates.GROUP, {"type": live_updates.GROUP_MESSAGE, "event": {"kind": "dispatch"}})
        assert await comm.receive_nothing(timeout=0.4)
        await _send(_dispatch(1), {"running": 1})
        ev = await comm.receive_json_from(timeout=2)
        assert (ev["type"], ev["n"], ev["events"]) == ("events", 2, [{"kind": "dispatch", "chart": 1, "org": 1, "cost": 1}])
    finally:
        await comm.disconnect(timeout=10)


async def test_updates_are_coalesced_to_five_per_second(two_orgs, viewer, redis_url):
    comm, _ = await _open(viewer)
    try:
        started = time.monotonic()
        for i in range(50):
            await _send(_dispatch(i), {"running": i})
        received = []
        while not await comm.receive_nothing(timeout=0.3):  # (a receive timeout would kill the app)
            received.append(await comm.receive_json_from())
        elapsed = time.monotonic() - started
        assert 1 <= len(received) <= 1 + 5 * elapsed
        assert sum(len(m["events"]) for m in received) == 50
        assert received[-1]["counters"] == {"running": 49}
        assert [m["n"] for m in received] == list(range(2, 2 + len(received)))
    finally:
        await comm.disconnect(timeout=10)


async def test_view_pages_the_order(two_orgs, viewer, redis_url):
    await database_sync_to_async(publish_from_db)()
    comm, _ = await _open(viewer)
    try:
        await comm.send_json_to({"type": "view", "offset": 2, "limit": 2})
        page = await comm.receive_json_from(timeout=2)
        assert page["type"] == "order"
        assert [r["external_id"] for r in page["order"]["rows"]] == ["a-1", "b-1"]
        await comm.send_json_to({"type": "view", "org": two_orgs["b"].pk})
        page = await comm.receive_json_from(timeout=2)
        assert [r["external_id"] for r in page["order"]["rows"]] == ["b-0", "b-1"]
        # Later snapshots keep this socket's view.
        await database_sync_to_async(publish_from_db)()
        snap = await comm.receive_json_from(timeout=2)
        assert [r["external_id"] for r in snap["order"]["rows"]] == ["b-0", "b-1"]
    finally:
        await comm.disconnect(timeout=10)


# --- controls ------------------------------------------------------------------------------------------------


def _chart(two_orgs, **state):
    chart = two_orgs["charts_a"][0]
    if state:
        Chart.objects.filter(pk=chart.pk).update(**state)
    return chart.pk


CONTROLS = [
    # (action, setup of the chart, extra message fields, check of the DB afterwards)
    ("pause", {}, lambda c, o: {"chart": c}, lambda c, o: Chart.objects.get(pk=c).paused),
    ("resume", {"paused": True}, lambda c, o: {"chart": c}, lambda c, o: not Chart.objects.get(pk=c).paused),
    ("prioritize", {}, lambda c, o: {"chart": c}, lambda c, o: Chart.objects.get(pk=c).priority),
    ("unprioritize", {"priority": True}, lambda c, o: {"chart": c}, lambda c, o: not Chart.objects.get(pk=c).priority),
    ("cancel", {}, lambda c, o: {"chart": c}, lambda c, o: Chart.objects.get(pk=c).state == "cancelled"),
    ("reorder", {}, lambda c, o: {"chart": c}, lambda c, o: Chart.objects.get(pk=c).moved_to_front_at is not None),
    ("hold", {}, lambda c, o: {"org": o}, lambda c, o: Org.objects.get(pk=o).weight == 0),
    ("release", "held", lambda c, o: {"org": o}, lambda c, o: Org.objects.get(pk=o).weight == 3),
    ("set_weight", {}, lambda c, o: {"org": o, "weight": 5}, lambda c, o: Org.objects.get(pk=o).weight == 5),
    ("set_cost", {}, lambda c, o: {"org": o, "workflow": None, "cost": 3},
     lambda c, o: WorkflowCost.objects.filter(org_id=o, cost=3).exists()),
    ("set_budget", {}, lambda c, o: {"budget": 9}, lambda c, o: SchedulerSettings.get().budget == 9),
]


def _setup(two_orgs, setup):
    if setup == "held":
        from orgs.services import org_hold, org_set_weight

        org_set_weight(org=two_orgs["a"], weight=3)
        org_hold(org=two_orgs["a"])
        return _chart(two_orgs)
    return _chart(two_orgs, **setup)


@pytest.mark.parametrize("action,setup,fields,check", CONTROLS, ids=[c[0] for c in CONTROLS])
async def test_control_with_permission_applies_and_reaches_other_dashboards(
        two_orgs, operator, viewer, redis_url, action, setup, fields, check):
    chart = await database_sync_to_async(_setup)(two_orgs, setup)
    org = two_orgs["a"].pk
    msg = fields(chart, org)
    if action == "set_cost":
        msg["workflow"] = two_orgs["wf"].pk
    actor, _ = await _open(operator)
    other, _ = await _open(viewer)
    try:
        await actor.send_json_to({"type": "control", "req": 7, "action": action, **msg})
        result = await actor.receive_json_from(timeout=3)
        assert result["type"] == "control.result" and result["req"] == 7
        assert result["ok"] is True, result
        assert await database_sync_to_async(check)(chart, org)
        # Every open dashboard hears of it at once, before the scheduler's next snapshot.
        # The control's own event and the audit trail's entry (the Activity feed), maybe coalesced.
        events: list = []
        while not (any(e.get("action") == action for e in events) and any(e.get("kind") == "audit" for e in events)):
            pushed = await other.receive_json_from(timeout=1)
            assert pushed["type"] == "events"
            events += pushed["events"]
        entry = next(e for e in events if e.get("kind") == "audit")["entry"]
        assert entry["by"] == "operator" and entry["summary"]
    finally:
        await actor.disconnect(timeout=10)
        await other.disconnect(timeout=10)


@pytest.mark.parametrize("action,setup,fields,check", CONTROLS, ids=[c[0] for c in CONTROLS])
async def test_control_without_permission_is_refused(two_orgs, viewer, redis_url, action, setup, fields, check):
    chart = await database_sync_to_async(_setup)(two_orgs, setup)
    org = two_orgs["a"].pk
    msg = fields(chart, org)
    if action == "set_cost":
        msg["workflow"] = two_orgs["wf"].pk
    comm, _ = await _open(viewer)
    try:
        await comm.send_json_to({"type": "control", "req": 1, "action": action, **msg})
        result = await comm.receive_json_from(timeout=3)
        assert result["ok"] is False and "permission" in result["errors"]
        assert "You do not have permission" in result["message"]
        assert not await database_sync_to_async(check)(chart, org)
        assert await comm.receive_nothing(timeout=0.3)  # nothing was broadcast
    finally:
        await comm.disconnect(timeout=10)


async def test_refused_control_reports_the_services_message(two_orgs, operator, redis_url):
    chart = await database_sync_to_async(_chart)(two_orgs, state="succeeded")
    comm, _ = await _open(operator)
    try:
        await comm.send_json_to({"type": "control", "req": 2, "action": "pause", "chart": chart})
        result = await comm.receive_json_from(timeout=3)
        assert result["ok"] is False
        assert result["errors"] == {"state": [f"cannot pause chart #{chart} : it is succeeded (needs state=queued, paused=False).".replace(" :", ":")]}
        await comm.send_json_to({"type": "control", "req": 3, "action": "set_weight", "org": two_orgs["a"].pk, "weight": "x"})
        result = await comm.receive_json_from(timeout=3)
        assert result["errors"] == {"weight": ["weight must be a whole number, got 'x'."]}
        await comm.send_json_to({"type": "control", "req": 4, "action": "explode"})
        assert "Unknown action" in (await comm.receive_json_from(timeout=3))["message"]
    finally:
        await comm.disconnect(timeout=10)


async def test_permission_revoked_after_connecting_is_honoured(two_orgs, operator, redis_url):
    comm, _ = await _open(operator)
    try:
        await database_sync_to_async(operator.user_permissions.clear)()
        await database_sync_to_async(operator.user_permissions.add)(
            *await database_sync_to_async(lambda: list(
                __import__("django.contrib.auth.models", fromlist=["Permission"]).Permission.objects.filter(
                    codename="view_chart")))())
        await comm.send_json_to({"type": "control", "req": 1, "action": "hold", "org": two_orgs["a"].pk})
        result = await comm.receive_json_from(timeout=3)
        assert result["ok"] is False and "permission" in result["errors"]
    finally:
        await comm.disconnect(timeout=10)


async def test_socket_of_a_user_whose_access_was_revoked_is_closed(two_orgs, viewer, redis_url, monkeypatch):
    monkeypatch.setattr(consumers, "REAUTH_S", 0.0)
    await database_sync_to_async(publish_from_db)()
    staff, _ = await _open(viewer)
    member, _ = await _open(two_orgs["alice"], "/ws/orgs/acme/")
    try:
        await database_sync_to_async(viewer.user_permissions.clear)()
        await database_sync_to_async(two_orgs["a"].members.remove)(two_orgs["alice"])
        await _send(_chart_of(two_orgs["a"].pk))
        for comm in (staff, member):
            assert await comm.receive_output(timeout=3) == {"type": "websocket.close", "code": consumers.CLOSE_FORBIDDEN}
    finally:
        await staff.disconnect(timeout=10)
        await member.disconnect(timeout=10)


async def test_socket_of_a_user_who_keeps_access_stays_open(two_orgs, viewer, redis_url, monkeypatch):
    monkeypatch.setattr(consumers, "REAUTH_S", 0.0)
    await database_sync_to_async(publish_from_db)()
    comm, _ = await _open(viewer)
    try:
        await _send(_dispatch(1), {"running": 1})
        assert (await comm.receive_json_from(timeout=3))["type"] == "events"
    finally:
        await comm.disconnect(timeout=10)


# --- the org socket --------------------------------------------------------------------------------------------


async def test_org_socket_is_member_scoped(two_orgs, redis_url):
    await database_sync_to_async(publish_from_db)()
    comm, first = await _open(two_orgs["alice"], "/ws/orgs/acme/")
    try:
        assert first["type"] == "snapshot"
        assert {c["external_id"] for c in first["state"]["charts"]} == {"a-0", "a-1", "a-2"}
        # Another org's event is not forwarded; our own is, without the global counters.
        await _send(_chart_of(two_orgs["b"].pk), {"queued": 9})
        assert await comm.receive_nothing(timeout=0.4)
        await _send(_chart_of(two_orgs["a"].pk), {"queued": 9})
        ev = await comm.receive_json_from(timeout=2)
        assert ev["type"] == "events" and ev["counters"] == {}
        await comm.send_json_to({"type": "control", "req": 1, "action": "pause", "chart": two_orgs["charts_a"][0].pk})
        assert (await comm.receive_json_from(timeout=2))["ok"] is False
    finally:
        await comm.disconnect(timeout=10)
    other, connected = await _connect(two_orgs["alice"], "/ws/orgs/beta/")
    assert not connected
    await other.disconnect(timeout=10)


async def test_min_interval_is_five_per_second():
    assert consumers.MIN_INTERVAL_S >= 0.2


# --- what an org member receives: built for members ------------------------------------------------------

MEMBER_CONTROLS = [c for c in CONTROLS if c[0] != "set_budget"]  # the budget is no org's: never sent to members


@pytest.mark.parametrize("action,setup,fields,check", MEMBER_CONTROLS, ids=[c[0] for c in MEMBER_CONTROLS])
async def test_a_members_socket_hears_an_operators_control_without_the_operators_name(
        two_orgs, redis_url, action, setup, fields, check):
    """The pages hide operators' names from members; the org socket must too. The member's page
    hears of the control (its action, not who did it), and no frame carries the username."""
    ops = await database_sync_to_async(make_user)("zelda-ops", staff=True, perms=(
        "charts.view_chart", "charts.change_chart", "orgs.change_org", "orgs.change_workflowcost"))
    chart = await database_sync_to_async(_setup)(two_orgs, setup)
    org = two_orgs["a"].pk
    msg = fields(chart, org)
    if action == "set_cost":
        msg["workflow"] = two_orgs["wf"].pk
    await database_sync_to_async(publish_from_db)()
    member, _ = await _open(two_orgs["alice"], "/ws/orgs/acme/")
    actor, _ = await _open(ops)
    try:
        await actor.send_json_to({"type": "control", "req": 1, "action": action, **msg})
        assert (await actor.receive_json_from(timeout=3))["ok"] is True
        frames: list[str] = []
        events: list[dict] = []
        while not any(e.get("action") == action for e in events):
            frames.append(await member.receive_from(timeout=2))
            pushed = json.loads(frames[-1])
            events += pushed.get("events", [])
        while not await member.receive_nothing(timeout=0.3):
            frames.append(await member.receive_from(timeout=1))
        for frame in frames:
            assert "zelda" not in frame, frame
        assert all("by" not in e for e in events), events
    finally:
        await actor.disconnect(timeout=10)
        await member.disconnect(timeout=10)
