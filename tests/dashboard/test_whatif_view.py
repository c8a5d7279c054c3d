"""``/dashboard/whatif.json``: the parameters checked as the controls check them (400 naming
the parameter), staff only, "preview unavailable" (503) when no scheduler answers, and a
preview answered through Redis by the scheduler's own code (fairsched.engine.whatif) over the
database's state: a change that changes nothing previews no difference and writes nothing."""
from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from django.test import Client

from common import previews
from control.models import AuditEntry
from dashboard import whatif as view
from fairsched.engine import whatif
from fairsched.engine.reader import read_state
from orgs.models import Org
from tests.factories import make_chart, make_cost, make_org, make_user, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(db, redis_url):
    wf, audit = make_workflow("code"), make_workflow("audit")
    acme, beta = make_org("Acme", weight=2), make_org("Beta")
    make_cost(acme, audit, 2)
    for i in range(6):
        make_chart(acme if i % 2 else beta, audit if i % 3 == 0 else wf)
    client = Client()
    client.force_login(make_user("op", staff=True, perms=("charts.view_chart",)))
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    return {"acme": acme, "beta": beta, "wf": wf, "audit": audit, "client": client, "redis": r}


class Responder:
    """The scheduler's side, in a thread: pop a request, answer it with fairsched.engine.whatif
    over the database's state (as the forked children do)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r, self.seen = r, []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        got = self.r.blpop([previews.REQUESTS], timeout=10)
        if got is None:
            return
        req = json.loads(got[1])
        self.seen.append(req)
        change = whatif.Change.from_json(req["change"])
        now = req["at"]
        before = whatif.before_of(read_state(), now)
        after = whatif.after_of(read_state(), change, now)
        self.r.rpush(previews.answer_key(req["id"]), json.dumps(whatif.answer(change, before, after)))


@pytest.mark.parametrize("query, param", [
    ("budget=-1", "budget"), ("budget=100001", "budget"), ("budget=1.5", "budget"), ("budget=", "budget"),
    ("org=abc&weight=2", "org"), ("org=999999&weight=2", "org"), ("weight=2", "org"),
    ("org={acme}&weight=1001", "weight"), ("org={acme}&weight=x", "weight"),
    ("org={acme}&workflow={wf}&cost=0", "cost"), ("org={acme}&cost=2", "workflow"),
    ("org={acme}&workflow=424242&cost=2", "workflow"), ("org={acme}&hold=2", "hold"),
    ("budget=4&org={acme}", "org"), ("colour=red", "colour"),
])
def test_bad_values_are_a_400_naming_the_parameter(world, query, param):
    r = world["client"].get("/dashboard/whatif.json?" + query.format(acme=world["acme"].pk, wf=world["wf"].pk))
    assert r.status_code == 400, r.content
    body = r.json()
    assert list(body["errors"]) == [param] and body["error"].startswith(param), body
    assert world["redis"].llen(previews.REQUESTS) == 0  # nothing asked of the scheduler


def test_staff_only(world):
    r = Client().get("/dashboard/whatif.json?budget=4")
    assert r.status_code == 302
    member = Client()
    member.force_login(make_user("member"))
    assert member.get("/dashboard/whatif.json?budget=4").status_code == 302


def test_no_scheduler_is_a_503_preview_unavailable_and_leaves_no_request(world, monkeypatch):
    monkeypatch.setattr(view, "WAIT_S", 0.3)
    r = world["client"].get("/dashboard/whatif.json?budget=6")
    assert r.status_code == 503 and r["Content-Type"] == "application/problem+json"
    assert r.json()["title"] == "preview unavailable" and "no scheduler answered" in r.json()["detail"]
    assert world["redis"].llen(previews.REQUESTS) == 0  # taken back: no scheduler computes it later


def test_a_preview_that_changes_nothing_shows_no_difference_and_writes_nothing(world):
    acme = world["acme"]
    audits, weight = AuditEntry.objects.count(), acme.weight
    Responder(world["redis"])
    r = world["client"].get(f"/dashboard/whatif.json?org={acme.pk}&weight={weight}")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["change"] == {"kind": "weight", "org": acme.pk, "value": weight}
    assert body["clear_before"] == body["clear_after"] is not None
    for org in (acme, world["beta"]):
        row = body["orgs"][str(org.pk)]
        assert row["clear_before"] == row["clear_after"] is not None
        assert row["at_risk_before"] == row["at_risk_after"] == 0
    assert AuditEntry.objects.count() == audits and Org.objects.get(pk=acme.pk).weight == weight


def test_a_hold_previews_the_org_without_a_clear_time_and_the_others_sooner(world):
    acme, beta = world["acme"], world["beta"]
    responder = Responder(world["redis"])
    body = world["client"].get(f"/dashboard/whatif.json?org={acme.pk}&hold=1").json()
    assert responder.seen[0]["change"] == {"kind": "weight", "org": acme.pk, "value": 0}
    assert body["orgs"][str(acme.pk)]["clear_after"] is None
    assert body["orgs"][str(beta.pk)]["clear_after"] <= body["orgs"][str(beta.pk)]["clear_before"]
    assert Org.objects.get(pk=acme.pk).weight == 2  # not held


def test_a_cost_preview_names_the_workflow_to_the_scheduler(world):
    acme = world["acme"]
    responder = Responder(world["redis"])
    r = world["client"].get(f"/dashboard/whatif.json?org={acme.pk}&workflow={world['audit'].pk}&cost=3")
    assert r.status_code == 200, r.content
    assert responder.seen[0]["change"] == {"kind": "cost", "org": acme.pk, "workflow": "audit", "value": 3}


@pytest.mark.parametrize("query, param", [
    ("clear_by=tomorrow", "clear_by"), ("clear_by=", "clear_by"), ("meet_due=2", "meet_due"),
    ("clear_by=2030-01-01T00:00:00Z&budget=3", "budget"),
])
def test_the_planners_bad_values_are_a_400_naming_the_parameter(world, query, param):
    r = world["client"].get("/dashboard/whatif.json?" + query)
    assert r.status_code == 400 and list(r.json()["errors"]) == [param], r.content


def test_a_slow_plan_within_the_planner_wait_is_delivered_and_a_preview_keeps_its_short_wait(world, monkeypatch,
                                                                                            settings):
    # A plan at 100k queued takes seconds: it is given FAIRSCHED_PLAN_WAIT_S, not the preview's wait.
    monkeypatch.setattr(view, "WAIT_S", 0.3)
    settings.FAIRSCHED_PLAN_WAIT_S = 8.0
    got: list = []

    def answer_late():
        req = json.loads(world["redis"].blpop([previews.REQUESTS], timeout=10)[1])
        got.append(req)
        time.sleep(1.5)  # five times the preview's wait
        world["redis"].rpush(previews.answer_key(req["id"]), json.dumps(
            {"change": req["change"], "goal": "meet_due", "budget": 3, "message": "budget 3 keeps every due time"}))
    threading.Thread(target=answer_late, daemon=True).start()
    t = time.monotonic()
    r = world["client"].get("/dashboard/whatif.json?meet_due=1")
    assert r.status_code == 200, r.content
    assert r.json()["budget"] == 3 and time.monotonic() - t >= 1.5
    assert got[0]["wait"] == 8.0  # the scheduler is told how long the web waits (it drops the request after)
    t = time.monotonic()
    r = world["client"].get("/dashboard/whatif.json?budget=6")  # no scheduler: a preview gives up at its own wait
    assert r.status_code == 503 and time.monotonic() - t < 3 and "within 0.3 s" in r.json()["detail"]


def test_the_planner_is_asked_of_the_scheduler(world):
    got: list = []

    def answer():
        req = json.loads(world["redis"].blpop([previews.REQUESTS], timeout=10)[1])
        got.append(req)
        from fairsched.engine.planner import plan_budget
        out = plan_budget(read_state(), req["at"], clear_by=req["change"]["clear_by"]).to_json(req["at"])
        world["redis"].rpush(previews.answer_key(req["id"]), json.dumps({"change": req["change"], **out}))
    threading.Thread(target=answer, daemon=True).start()
    r = world["client"].get("/dashboard/whatif.json?clear_by=2099-01-01T00:00:00Z")
    assert r.status_code == 200, r.content
    assert got[0]["change"]["kind"] == "plan" and got[0]["change"]["clear_by"] == 4070908800.0
    assert r.json()["budget"] == 2 and r.json()["goal"] == "clear_by"  # the largest cost (audit: 2 for Acme)


def test_a_pool_capacity_is_previewed_and_planned_by_the_scheduler(world):
    """With capacity pools: ``pool=<name>&capacity=N`` is the scheduler's pool change, answered
    by its own code over the database's pools; ``clear_by`` with ``pool`` asks the planner for
    that pool's capacity; an unknown pool is a 400 naming ``pool``."""
    from control.services import pool_set
    from orgs.services import workflow_cost_set

    pool_set(name="llm", capacity=1)
    workflow_cost_set(org=world["acme"], workflow=world["wf"], cost=1, pools={"llm": 1})
    responder = Responder(world["redis"])
    r = world["client"].get("/dashboard/whatif.json?pool=llm&capacity=3")
    assert r.status_code == 200, r.content
    assert responder.seen[0]["change"] == {"kind": "pool", "pool": "llm", "value": 3}
    body = r.json()
    assert body["clear_after"] is not None and body["clear_after"] <= body["clear_before"]
    for query in ("pool=tpu&capacity=3", "pool=llm&capacity=3&budget=2", "pool=llm"):
        r = world["client"].get("/dashboard/whatif.json?" + query)
        assert r.status_code == 400, (query, r.content)
    got: list = []

    def answer():
        req = json.loads(world["redis"].blpop([previews.REQUESTS], timeout=10)[1])
        got.append(req)
        from fairsched.engine.planner import plan_budget
        ch = req["change"]
        out = plan_budget(read_state(), req["at"], clear_by=ch["clear_by"], pool=ch["pool"]).to_json(req["at"])
        world["redis"].rpush(previews.answer_key(req["id"]), json.dumps({"change": ch, **out}))
    threading.Thread(target=answer, daemon=True).start()
    r = world["client"].get("/dashboard/whatif.json?clear_by=2099-01-01T00:00:00Z&pool=llm")
    assert r.status_code == 200, r.content
    assert got[0]["change"]["pool"] == "llm" and r.json()["pool"] == "llm" and r.json()["budget"] == 1


def test_an_orgs_ceiling_and_minimum_in_a_pool_are_previewed_by_the_scheduler(world):
    """``org=<id>&pool=<name>&max=N`` (a ceiling) and ``&min=N`` (a minimum) are the scheduler's
    limit changes; a limit preview takes one of them; an unknown org is named."""
    from control.services import pool_set
    from orgs.services import workflow_cost_set

    pool_set(name="llm", capacity=4)
    workflow_cost_set(org=world["acme"], workflow=world["wf"], cost=1, pools={"llm": 1})
    acme = world["acme"]
    responder = Responder(world["redis"])
    r = world["client"].get(f"/dashboard/whatif.json?org={acme.pk}&pool=llm&max=0")
    assert r.status_code == 200, r.content
    assert responder.seen[0]["change"] == {"kind": "ceiling", "org": acme.pk, "pool": "llm", "value": 0}
    row = r.json()["orgs"][str(acme.pk)]  # a ceiling of 0: Acme's coding never starts, its audits clear sooner
    assert row["clear_after"] is not None and row["clear_after"] <= row["clear_before"]
    responder = Responder(world["redis"])
    r = world["client"].get(f"/dashboard/whatif.json?org={acme.pk}&pool=llm&min=1")
    assert r.status_code == 200 and responder.seen[0]["change"]["kind"] == "minimum", r.content
    for query, param in ((f"org={acme.pk}&pool=llm&max=1&min=1", "max"), ("org=99999&pool=llm&max=1", "org"),
                         (f"org={acme.pk}&pool=llm", "max")):
        r = world["client"].get("/dashboard/whatif.json?" + query)
        assert r.status_code == 400 and list(r.json()["errors"]) == [param], (query, r.content)
