"""The worker-capacity warning on the dashboard, in the admin's live counters and in the JSON."""
from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from fairsched.temporal import capacity
from fairsched.temporal.capacity import Advert, Poller, queue_capacity, summarise
from common.notify import redis_client

pytestmark = pytest.mark.django_db

WARNING = ("Running 3 charts but the 1 live worker has 2 activity slots: 1 chart waits for a slot while holding "
           "budget. Start more workers or raise FAIRSCHED_WORKER_CONCURRENCY (see README, Sizing workers).")


def _store(running: int, slots: int) -> dict:
    now = time.time()
    q = queue_capacity("fairsched", [Poller("h:1:fairsched", now)], {"h:1:fairsched": Advert("h:1:fairsched", slots, now)},
                       running, now=now, default_queue="fairsched")
    result = summarise([q], now=now)
    redis_client().set(capacity.RESULT_KEY, json.dumps(result))
    return result


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_dashboard_shows_the_warning(viewer, redis_url):
    _store(running=3, slots=2)
    html = _client(viewer).get("/dashboard/").content.decode()
    assert WARNING in html
    assert 'class="capacity capacity-warn"' in html and "dashboard/capacity.js" in html


def test_no_warning_when_the_slots_suffice(viewer, redis_url):
    _store(running=3, slots=5)
    html = _client(viewer).get("/dashboard/").content.decode()
    assert "wait for a slot" not in html and "waits for a slot" not in html
    assert 'id="capacity" class="capacity capacity-note"' in html and " hidden>" in html.split('id="capacity"')[1][:400]


def test_unknown_capacity_is_a_quiet_note_not_an_error(viewer, settings):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing answers
    response = _client(viewer).get("/dashboard/")
    assert response.status_code == 200
    assert "Worker capacity unknown" in response.content.decode()
    assert "capacity-warn" not in response.content.decode().split('id="capacity"')[1][:200]


def test_not_checked_yet_is_unknown(viewer, redis_url):
    html = _client(viewer).get("/dashboard/").content.decode()
    assert "Worker capacity unknown: not checked in the last minute" in html


def test_the_json_endpoints_carry_the_figures(viewer, redis_url):
    _store(running=3, slots=2)
    c = _client(viewer)
    state = c.get("/dashboard/state.json").json()
    assert state["capacity"]["known"] is True
    assert (state["capacity"]["running"], state["capacity"]["slots"], state["capacity"]["workers"],
            state["capacity"]["short"]) == (3, 2, 1, 1)
    assert state["capacity"]["warning"] == WARNING
    got = c.get("/dashboard/capacity.json").json()
    assert got["warning"] == WARNING and got["queues"][0]["workers"][0]["identity"] == "h:1:fairsched"
    assert Client().get("/dashboard/capacity.json").status_code == 302  # staff only


def test_the_admin_live_counters_show_the_slots_and_the_warning(redis_url):
    from tests.factories import make_user

    admin = make_user("boss", superuser=True)
    _store(running=3, slots=2)
    html = _client(admin).get("/admin/").content.decode()
    assert 'id="admin-capacity" class="capacity-warn"' in html
    assert "worker slots <b>2</b> · 1 waiting for a slot" in html
    assert f'title="{WARNING}"' in html
