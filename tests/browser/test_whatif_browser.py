"""Chromium: a what-if preview shown inline in the dashboard's controls while the operator
types a budget, before "Set" (answered through Redis by the scheduler's preview code), and
"Preview unavailable" when no scheduler answers; the preview adds no accessibility violation, and
its times are 24 h like every other time on the pages (in en-US too, whose default is 12 h)."""
from __future__ import annotations

import re

import pytest
import redis
from playwright.sync_api import expect

from common import previews
from control.models import AuditEntry, SchedulerSettings
from tests.browser import axe
from tests.browser.conftest import login
from tests.dashboard.test_whatif_view import Responder
from tests.factories import make_chart, make_org, make_user, make_workflow

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
