"""Chromium: a what-if preview shown inline in the dashboard's controls while the operator
types a budget or a weight, before "Set", or points at Hold, before pressing it (answered
through Redis by the scheduler's preview code), and "Preview unavailable" when no scheduler
answers; in the admin's cost forms before "Save"; the preview adds no accessibility violation, and
its times are 24 h like every other time on the pages (in en-US too, whose default is 12 h).
The weight preview leaves a screenshot (var/test-artifacts/whatif-preview.png; also
docs/whatif-preview.png for the README when FAIRSCHED_UPDATE_SCREENSHOT=1)."""
from __future__ import annotations

import os
import re
import shutil

import pytest
import redis
from playwright.sync_api import expect

from common import previews
from control.models import AuditEntry, SchedulerSettings
from orgs.services import org_set_turnaround
from tests.browser import axe
from tests.browser.conftest import ARTIFACTS, ROOT, login
from tests.dashboard.test_whatif_view import Responder
from tests.factories import make_chart, make_cost, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_budget_preview_inline_before_set_and_unavailable_without_a_scheduler(
        browser, browser_server, redis_layer_publish, redis_url):
    s = SchedulerSettings.get()
    s.budget = 1
    s.save()
    wf = make_workflow("code")
    acme, beta = make_org("Acme"), make_org("Beta")
    for i in range(8):
        make_chart(acme if i % 2 else beta, wf)
    make_user("root", superuser=True)
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    redis_layer_publish()
    audits = AuditEntry.objects.count()
    # en-US: its toLocaleTimeString is "07:46 PM"; the pages' clock (FairLive.clock) says "19:46"
    page = browser.new_context(viewport={"width": 1440, "height": 1000}, locale="en-US").new_page()
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)

    responder = Responder(r)
    page.fill("#budget-input", "4")
    out = page.locator("#whatif-budget")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "budget", "value": 4}
    expect(out).to_contain_text("Preview (budget 4, not applied)")
    expect(out.locator("tr[data-preview-org]")).to_have_count(2)  # both orgs clear sooner
    expect(out.locator(f"tr[data-preview-org='{acme.pk}'] td").first).to_have_text("Acme")
    clock = r"(?:[A-Z][a-z]{2} \d{1,2} )?(?:[01]\d|2[0-3]):[0-5]\d"  # "19:46", "Jan 5 19:46" when not today
    times = [out.locator("[data-preview=clear]").inner_text()]
    times += out.locator("tr[data-preview-org] td:nth-child(2)").all_inner_texts()
    for text in times:
        assert re.fullmatch(f"{clock} → {clock}", text), f"a preview time is not 24 h: {times}"
    found = axe.violations(page, within="#whatif-budget")
    assert not found, axe.report({"preview": found})
    assert SchedulerSettings.get().budget == 1 and AuditEntry.objects.count() == audits  # nothing applied

    page.fill("#budget-input", "5")  # no scheduler answers now
    expect(out).to_have_attribute("data-state", "unavailable", timeout=10_000)
    expect(out).to_contain_text("Preview unavailable.")
    expect(out).to_contain_text("no scheduler answered")
    assert r.llen(previews.REQUESTS) == 0


def _orgs_world():
    s = SchedulerSettings.get()
    s.budget = 2
    s.save()
    wf = make_workflow("code")
    acme, beta, cedar = make_org("Acme"), make_org("Beta"), make_org("Cedar")
    org_set_turnaround(org=cedar, turnaround=5400)  # Cedar's charts are due in 1 h 30 min
    for org, n in ((acme, 12), (beta, 6), (cedar, 4)):
        for _ in range(n):
            make_chart(org, wf)
    return acme, beta, cedar


def test_a_weight_and_a_hold_preview_inline_before_set(browser, browser_server, redis_layer_publish, redis_url):
    acme, beta, cedar = _orgs_world()
    make_user("root", superuser=True)
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    redis_layer_publish()
    audits = AuditEntry.objects.count()
    # en-GB: the preview's times in 24 h, as the rest of the dashboard shows them (the screenshot)
    page = browser.new_context(viewport={"width": 1440, "height": 1000}, locale="en-GB").new_page()
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    out = page.locator("#whatif-orgs")

    def row(org):
        return page.locator(f"#orgs-body tr[data-org-id='{org.pk}']")

    # a weight, typed: previewed before Set
    responder = Responder(r)
    row(acme).locator("input[data-field=weight]").fill("3")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "weight", "org": acme.pk, "value": 3}
    expect(out).to_contain_text("Preview (weight 3 for Acme, not applied)")
    expect(out.locator(f"tr[data-preview-org='{acme.pk}'] td").first).to_have_text("Acme")  # Acme clears sooner
    expect(out.locator(f"tr[data-preview-org='{cedar.pk}'] td").last).to_have_text("0 → 1")  # Cedar: one at risk
    found = axe.violations(page, within="#whatif-orgs")
    assert not found, axe.report({"weight preview": found})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "whatif-preview.png"
    page.locator(".card", has=page.locator("#orgs")).screenshot(path=str(shot))
    if os.environ.get("FAIRSCHED_UPDATE_SCREENSHOT") == "1":  # docs/whatif-preview.png, for the README
        shutil.copy(shot, ROOT / "docs" / "whatif-preview.png")
    row(acme).locator("input[data-field=weight]").press("Escape")  # the shown weight back: no preview
    expect(out).to_be_hidden()

    # Hold: previewed while the pointer is on the button, before it is pressed
    responder = Responder(r)
    hold = row(beta).get_by_role("button", name="Hold")
    hold.hover()
    expect(out).to_contain_text("Preview (hold Beta, not applied)", timeout=10_000)
    expect(out).to_have_attribute("data-state", "ready")
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "weight", "org": beta.pk, "value": 0}
    expect(out.locator(f"tr[data-preview-org='{beta.pk}'] td").nth(1)).to_contain_text("→ no clear-time")
    found = axe.violations(page, within="#whatif-orgs")
    assert not found, axe.report({"hold preview": found})
    # ... or while it has the focus (the keyboard's way there)
    responder = Responder(r)
    row(cedar).get_by_role("button", name="Hold").focus()
    expect(out).to_contain_text("Preview (hold Cedar, not applied)", timeout=10_000)
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "weight", "org": cedar.pk, "value": 0}
    beta.refresh_from_db()
    cedar.refresh_from_db()
    assert beta.weight == cedar.weight == 1 and AuditEntry.objects.count() == audits  # nothing applied
    assert r.llen(previews.REQUESTS) == 0

    # pressing Hold applies it, and the preview is spent
    hold.click()
    expect(out).to_be_hidden()
    expect(row(beta).locator(".badge.held")).to_be_visible(timeout=10_000)
    beta.refresh_from_db()
    assert beta.weight == 0 and AuditEntry.objects.count() == audits + 1


def test_the_admin_cost_forms_preview_a_cost_before_save(browser, browser_server, redis_url):
    acme, _, _ = _orgs_world()
    audit = make_workflow("audit")
    make_chart(acme, audit)
    cost = make_cost(acme, audit, 2)
    make_user("root", superuser=True)
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()

    # the cost's own change form: its org and workflow from the form's selects
    login(page, browser_server, "root", then=f"/admin/orgs/workflowcost/{cost.pk}/change/")
    responder = Responder(r)
    page.fill("#id_cost", "5")
    out = page.locator("#whatif-cost")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    expect(out).to_contain_text("Preview (cost 5, not applied)")
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "cost", "org": acme.pk, "workflow": "audit", "value": 5}
    found = axe.violations(page, within="#whatif-cost")
    assert not found, axe.report({"admin cost preview": found})

    # the org's change form, its costs inline: the org from the URL, the workflow from the row
    page.goto(f"{browser_server}/admin/orgs/org/{acme.pk}/change/")
    responder = Responder(r)
    page.fill("#id_costs-0-cost", "7")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    expect(out).to_contain_text("Preview (cost 7, not applied)")
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "cost", "org": acme.pk, "workflow": "audit", "value": 7}
    # the orgs by name, as on the dashboard (the admin's page has no org rows to read them from: it said "org 1")
    expect(out.locator(f"tr[data-preview-org='{acme.pk}'] td").first).to_have_text("Acme")
    cost.refresh_from_db()
    assert cost.cost == 2 and r.llen(previews.REQUESTS) == 0  # nothing saved


def test_the_admin_limit_form_previews_a_ceiling_before_save(browser, browser_server, redis_url):
    """An org's limit in a pool (OrgPoolLimit's change form): typing a ceiling previews it, the
    org and pool from the form, before Save; nothing is saved."""
    from control.services import pool_set
    from orgs.models import OrgPoolLimit
    from orgs.services import org_pool_limit_set, workflow_cost_set

    acme, _, _ = _orgs_world()
    pool_set(name="llm", capacity=4)
    workflow_cost_set(org=acme, workflow=make_workflow("audit"), cost=1, pools={"llm": 1})
    limit = org_pool_limit_set(org=acme, pool="llm", max=2)
    make_user("root", superuser=True)
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, browser_server, "root", then=f"/admin/orgs/orgpoollimit/{limit.pk}/change/")
    responder = Responder(r)
    page.fill("#id_max", "1")
    out = page.locator("#whatif-limit")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    expect(out).to_contain_text("Preview (ceiling 1 in pool llm, not applied)")
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "ceiling", "org": acme.pk, "pool": "llm", "value": 1}
    found = axe.violations(page, within="#whatif-limit")
    assert not found, axe.report({"admin limit preview": found})
    assert OrgPoolLimit.objects.get(pk=limit.pk).max == 2 and r.llen(previews.REQUESTS) == 0  # nothing saved
