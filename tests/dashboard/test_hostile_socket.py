"""The sockets under hostile frames and origins (WebsocketCommunicator, always disconnected).

A malformed frame gets an ``error`` message and the socket stays open (the next
``ping`` is answered); numbers out of range are refused naming the field; controls
are rate-limited per socket; the origin check compares scheme, host and port; a
snapshot that goes stale is followed by one that says so.
"""
from __future__ import annotations

import logging
import time

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import SESSION_KEY
from django.test import Client

from dashboard import consumers
from dashboard.routing import websocket_urlpatterns
from dashboard.simulate import publish_from_db
from control.models import SchedulerSettings
from orgs.models import Org, WorkflowCost

pytestmark = pytest.mark.django_db(transaction=True)

app = URLRouter(websocket_urlpatterns)


async def _open(user, path: str = "/ws/dashboard/") -> tuple[WebsocketCommunicator, dict]:
    comm = WebsocketCommunicator(app, path)
    comm.scope["user"] = user
    connected, _ = await comm.connect(timeout=10)
    assert connected
    return comm, await comm.receive_json_from(timeout=5)


async def _still_open(comm: WebsocketCommunicator) -> None:
    await comm.send_json_to({"type": "ping"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "pong"


# --- malformed frames -------------------------------------------------------------------------------


FRAMES = [
    ("text", "{not json", "frame", "Not valid JSON."),
    ("bytes", b"\x00\x01binary", "frame", "Binary frames are not understood; send JSON text."),
    ("text", "[1, 2, 3]", "frame", "Expected a JSON object, got list."),
    ("text", '"a string"', "frame", "Expected a JSON object, got str."),
    ("text", "null", "frame", "Expected a JSON object, got NoneType."),
    ("text", '{"type": "view", "offset": 1e400}', "offset", None),
    ("text", '{"type": "view", "offset": NaN}', "offset", None),
    ("text", '{"type": "view", "offset": "abc"}', "offset", None),
    ("text", '{"type": "view", "offset": -1}', "offset", None),
    ("text", '{"type": "view", "limit": [1]}', "limit", None),
    ("text", '{"type": "view", "org": {"id": 1}}', "org", None),
    ("text", '{"type": "view", "org": 100000000000000000000000000000}', "org", None),
    ("text", '{"type": 7}', "type", None),
    ("text", '{"type": "nonsense"}', "type", None),
    ("text", "[" * 100_000, "frame", None),
    ("text", "1" * 10_000, "frame", None),
]


@pytest.mark.parametrize(("kind", "frame", "field", "message"), FRAMES,
                         ids=["bad-json", "binary", "list", "string", "null", "offset-1e400", "offset-nan",
                              "offset-text", "offset-negative", "limit-list", "org-object", "org-huge",
                              "type-number", "type-unknown", "deep-nesting", "huge-number"])
async def test_a_malformed_frame_gets_an_error_and_the_socket_stays_open(two_orgs, viewer, redis_url, caplog,
                                                                         kind, frame, field, message):
    comm, _ = await _open(viewer)
    try:
        with caplog.at_level(logging.WARNING):
            if kind == "bytes":
                await comm.send_to(bytes_data=frame)
            else:
                await comm.send_to(text_data=frame)
            answer = await comm.receive_json_from(timeout=5)
        assert answer["type"] == "error" and field in answer["errors"], answer
        if message is not None:
            assert answer["message"] == message
        await _still_open(comm)
        assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.exc_info]
    finally:
        await comm.disconnect(timeout=10)


async def test_a_good_view_after_a_bad_one_still_pages(two_orgs, viewer, redis_url):
    await database_sync_to_async(publish_from_db)()
    comm, _ = await _open(viewer)
    try:
        await comm.send_to(text_data='{"type": "view", "offset": 1e400}')
        assert (await comm.receive_json_from(timeout=5))["type"] == "error"
        await comm.send_json_to({"type": "view", "offset": 1, "limit": 2})
        page = await comm.receive_json_from(timeout=5)
        assert page["type"] == "order" and [r["external_id"] for r in page["order"]["rows"]] == ["b-0", "a-1"]
    finally:
        await comm.disconnect(timeout=10)


# --- numbers out of range in controls ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("control", "field"),
    [({"action": "set_budget", "budget": 2**31}, "budget"),
     ({"action": "set_weight", "org": "ORG", "weight": 2**31}, "weight"),
     ({"action": "set_cost", "org": "ORG", "workflow": "WF", "cost": 2**31}, "cost"),
     ({"action": "pause", "chart": 2**63}, "chart"),
     ({"action": "pause", "chart": 1.5}, "chart"),
     ({"action": "set_weight", "org": "ORG", "weight": "1e400"}, "weight"),
     ({"action": ["pause"]}, "action")],
    ids=["budget-2^31", "weight-2^31", "cost-2^31", "chart-2^63", "chart-float", "weight-text", "action-list"],
)
async def test_out_of_range_controls_over_the_socket_are_refused_naming_the_field(two_orgs, operator, redis_url,
                                                                                  control, field):
    control = {k: two_orgs["a"].pk if v == "ORG" else two_orgs["wf"].pk if v == "WF" else v
               for k, v in control.items()}
    comm, _ = await _open(operator)
    try:
        await comm.send_json_to({"type": "control", "req": 1, **control})
        result = await comm.receive_json_from(timeout=5)
        assert result["type"] == "control.result" and result["ok"] is False and field in result["errors"], result
        await _still_open(comm)
    finally:
        await comm.disconnect(timeout=10)
    assert await database_sync_to_async(lambda: SchedulerSettings.get().budget)() == 4
    assert await database_sync_to_async(lambda: Org.objects.get(pk=two_orgs["a"].pk).weight)() == 1
    assert not await database_sync_to_async(WorkflowCost.objects.exists)()


async def test_a_control_with_infinity_in_the_frame_is_refused(two_orgs, operator, redis_url):
    comm, _ = await _open(operator)
    try:
        await comm.send_to(text_data='{"type": "control", "action": "set_budget", "budget": 1e400}')
        result = await comm.receive_json_from(timeout=5)
        assert result["ok"] is False and "budget" in result["errors"]
        await _still_open(comm)
    finally:
        await comm.disconnect(timeout=10)


# --- the control rate ---------------------------------------------------------------------------------------


async def _results(comm: WebsocketCommunicator, n: int) -> list[dict]:
    """The next ``n`` control results (the events that successful controls broadcast come in between)."""
    out: list[dict] = []
    while len(out) < n:
        message = await comm.receive_json_from(timeout=5)
        if message["type"] == "control.result":
            out.append(message)
    return out


async def test_controls_beyond_the_rate_are_refused_with_a_message(two_orgs, operator, redis_url, settings,
                                                                   monkeypatch):
    settings.FAIRSCHED_WS_CONTROL_RATE = 20
    clock = {"t": 1000.0}
    monkeypatch.setattr(consumers._LiveConsumer, "clock", staticmethod(lambda: clock["t"]))
    comm, _ = await _open(operator)
    try:
        for i in range(25):  # the clock stands still: a burst of 25 within one instant
            await comm.send_json_to({"type": "control", "req": i, "action": "set_budget", "budget": 4 + i % 2})
        results = await _results(comm, 25)
        refused = [r for r in results if "rate" in r["errors"]]
        assert len(refused) == 5 and [r["req"] for r in refused] == [20, 21, 22, 23, 24]
        assert refused[0]["message"].startswith("Too many controls: at most 20 a second")
        assert all(r["ok"] for r in results[:20])
        clock["t"] += 0.5  # half a second later: ten more tokens
        for i in range(11):
            await comm.send_json_to({"type": "control", "req": 100 + i, "action": "set_budget", "budget": 4})
        later = await _results(comm, 11)
        assert [("rate" in r["errors"]) for r in later] == [False] * 10 + [True]
    finally:
        await comm.disconnect(timeout=10)


# --- origin: scheme, host and port ----------------------------------------------------------------------------


def _session_cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    assert c.session[SESSION_KEY] == str(user.pk)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        (b"http://127.0.0.1:8000", b"127.0.0.1:8000", "ws", True),
        (b"http://127.0.0.1:9999", b"127.0.0.1:8000", "ws", False),
        (b"http://127.0.0.1", b"127.0.0.1:8000", "ws", False),
        (b"https://127.0.0.1:8000", b"127.0.0.1:8000", "ws", False),
        (b"http://localhost:8000", b"127.0.0.1:8000", "ws", False),
        (b"https://localhost", b"localhost", "wss", True),
        (b"https://localhost:443", b"localhost", "wss", True),
        (b"http://localhost", b"localhost", "wss", False),
        (b"http://evil.example:8000", b"evil.example:8000", "ws", False),  # not an allowed host
        (b"null", b"localhost", "ws", False),
        (None, b"localhost", "ws", False),
    ],
    ids=["same-origin", "other-port", "default-port-vs-8000", "https-page-ws-socket", "other-host",
         "wss-same", "wss-explicit-443", "http-page-wss-socket", "host-not-allowed", "null-origin", "no-origin"],
)
async def test_the_origin_check_compares_scheme_host_and_port(viewer, origin, host, scheme, allowed):
    from config.asgi import application

    cookie = await database_sync_to_async(_session_cookie)(viewer)
    headers = [(b"host", host), (b"cookie", cookie)] + ([(b"origin", origin)] if origin is not None else [])
    comm = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
    comm.scope["scheme"] = scheme
    connected, _ = await comm.connect(timeout=10)
    assert connected is allowed
    await comm.disconnect(timeout=10)


async def test_a_listed_origin_may_open_the_socket(viewer, settings):
    from config.asgi import application

    settings.FAIRSCHED_WS_ALLOWED_ORIGINS = ["https://ops.example.com", "https://*.corp.example"]
    cookie = await database_sync_to_async(_session_cookie)(viewer)
    for origin, ok in [(b"https://ops.example.com", True), (b"https://a.corp.example", True),
                       (b"https://ops.example.com:8443", False), (b"http://ops.example.com", False)]:
        comm = WebsocketCommunicator(application, "/ws/dashboard/", headers=[
            (b"origin", origin), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie)])
        connected, _ = await comm.connect(timeout=10)
        assert connected is ok, origin
        await comm.disconnect(timeout=10)


# --- stale snapshots ---------------------------------------------------------------------------------------------


async def test_a_socket_on_a_stale_snapshot_says_so(two_orgs, viewer, redis_url):
    await database_sync_to_async(publish_from_db)(time.time() - 3600)
    comm, first = await _open(viewer)
    try:
        assert first["state"]["source"] == "db" and first["state"]["stale"] is True
        assert first["state"]["age_s"] >= 3500 and first["order"]["known"] is False
    finally:
        await comm.disconnect(timeout=10)


async def test_a_live_snapshot_that_is_not_followed_turns_stale_on_the_open_socket(two_orgs, viewer, redis_url,
                                                                                  settings):
    from charts import selectors

    # stale 3 s after it: long enough for the socket to open first on a loaded machine (at 1 s
    # it once opened on a snapshot already stale), short enough to wait for
    settings.FAIRSCHED_STALE_MIN_S = 3
    settings.FAIRSCHED_STALE_INTERVALS = 0
    selectors.forget_interval()
    await database_sync_to_async(publish_from_db)()
    comm, first = await _open(viewer)
    try:
        assert first["state"]["source"] == "scheduler" and first["state"]["stale"] is False
        # The scheduler publishes nothing more: the socket is told, without asking.
        nxt = await comm.receive_json_from(timeout=15)
        assert nxt["type"] == "snapshot" and nxt["state"]["stale"] is True and nxt["state"]["source"] == "db"
    finally:
        await comm.disconnect(timeout=10)
