"""Capacity pools in headless Chromium against a real daphne (issue 43, "Visible everywhere"):
the dashboard's Pools panel in words, a pool's dial turned in one page (through
control.services.pool_set: the pool in the database, the audit entry, the echo on a second
page), the budget's dial as the pool default's, and an org member's page saying why each
chart waits; axe-core finds nothing on either."""
from __future__ import annotations

import pytest
import redis
from playwright.sync_api import expect

from common import previews
from control.models import AuditEntry, Pool, SchedulerSettings
from tests.browser import axe
from tests.browser.conftest import login
from tests.browser.test_dashboard_browser import open_dashboard, wait_for
from tests.dashboard.test_whatif_view import Responder
from tests.factories import make_pooled_world, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pooled(db):
    w = make_pooled_world()
    make_user("root", superuser=True)
    bob = make_user("bob")
    w["beta"].members.add(bob)
    return w


def test_a_pool_dial_turned_in_one_page_reaches_the_db_the_audit_and_another_page(
        browser, browser_server, redis_layer_publish, pooled, redis_url):
    redis_layer_publish()
    one = open_dashboard(browser, browser_server)
    two = open_dashboard(browser, browser_server)
    panel = one.locator("#pools-panel")
    expect(panel).to_be_visible()
    b1 = pooled["b1"].pk
    llm = one.locator('[data-pool-card="llm"]')
    expect(llm.locator("[data-pool-text]")).to_have_text(
        f"waiting for pool llm: 2 of 2 in use — chart #{b1} of Beta at the head")
    expect(llm.locator("[data-pool-use]")).to_have_text("2 / 2")
    expect(one.locator('[data-pool-card="gpu"] [data-pool-text]')).to_have_text(
        "pool gpu: capacity 0: every chart that draws on it is blocked")
    expect(one.locator("#pool-orgs")).to_contain_text("Acme: llm 1 of 1 (ceiling)")
    expect(one.locator("#pool-orgs")).to_contain_text(f"chart #{pooled['a1'].pk} waits at its ceiling in pool llm (1 of 1)")
    # the budget's dial is the pool default's, in the panel; the Budget card says where it went
    expect(one.locator('[data-pool-card="default"] #budget-dial')).to_be_visible()
    expect(one.locator("#budget-moved")).to_be_visible()
    expect(one.locator("#pools-panel [data-pool-card]")).to_have_count(3)
    assert axe.violations(one, tags=axe.ALL) == []

    # Typing a capacity previews it first (the scheduler's answer, fairsched.engine.whatif), before Set.
    r = redis.Redis.from_url(redis_url)
    r.delete(previews.REQUESTS)
    responder = Responder(r)
    one.fill("#pool-capacity-llm", "3")
    out = one.locator("#whatif-pool-llm")
    expect(out).to_have_attribute("data-state", "ready", timeout=10_000)
    responder.thread.join(5)
    assert responder.seen[0]["change"] == {"kind": "pool", "pool": "llm", "value": 3}
    expect(out).to_contain_text("Preview (pool llm capacity 3, not applied)")
    assert axe.violations(one, tags=axe.ALL) == []

    # Turn llm's dial to 3 in page one: the pool in the DB, audited as root, the echo on page two.
    one.locator('[data-pool-card="llm"] button[type=submit]').click()
    wait_for(lambda: Pool.objects.get(name="llm").capacity == 3, what="pool llm set to 3")
    entry = AuditEntry.objects.filter(action="pool").latest("id")
    assert entry.actor.username == "root" and entry.summary == "Set the capacity of pool llm to 3 (was 2)"
    expect(two.locator('[data-pool-card="llm"] [data-pool-use]')).to_have_text("2 / 3", timeout=5_000)
    expect(two.locator("#pool-capacity-llm")).to_have_value("3")
    expect(two.locator("#activity-body")).to_contain_text("Set the capacity of pool llm to 3 (was 2)", timeout=5_000)
    # the scheduler's next snapshot: room in llm now, so nothing waits for it
    redis_layer_publish()
    expect(two.locator('[data-pool-card="llm"] [data-pool-text]')).to_have_text("pool llm: 2 of 3 in use",
                                                                              timeout=10_000)

    # The pool default's dial is the budget's: it sets the budget.
    one.fill("#budget-input", "6")
    one.click("#budget-form button[type=submit]")
    wait_for(lambda: SchedulerSettings.get().budget == 6, what="the budget set to 6")


def test_a_refused_pool_dial_says_why(browser, browser_server, redis_layer_publish, pooled):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server)
    page.fill("#pool-capacity-gpu", "100001")  # over the most a pool may hold: the service refuses it
    page.locator('[data-pool-card="gpu"] button[type=submit]').click()
    expect(page.locator("#last-error")).to_contain_text("capacity", timeout=5_000)
    assert Pool.objects.get(name="gpu").capacity == 0
    expect(page.locator("#pool-capacity-gpu")).to_have_value("100001")  # kept to correct, as the budget's
    page.locator("#pool-capacity-gpu").press("Escape")                  # put back: nothing typed, nothing sent
    expect(page.locator("#pool-capacity-gpu")).to_have_value("0")
    page.locator('[data-pool-card="gpu"] button[type=submit]').click()
    expect(page.locator("#toasts")).to_contain_text("Type a new capacity for pool gpu first")


def test_a_members_page_says_why_each_chart_waits(browser, browser_server, redis_layer_publish, pooled):
    redis_layer_publish()
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    login(page, browser_server, "bob", then="/orgs/beta/")
    expect(page.locator("[data-live]")).to_have_attribute("data-state", "live", timeout=10_000)
    row = page.locator(f'tr[data-chart-id="{pooled["b1"].pk}"] td.waits')
    expect(row).to_have_text("waiting for pool llm (2 of 2 in use)")
    expect(page.locator(f'tr[data-chart-id="{pooled["b2"].pk}"] td.waits')).to_have_text(
        "pool gpu has no room for it: capacity 0")
    expect(page.locator("#org-pools")).to_have_text("Pools in use: llm 1")
    expect(page.locator("#clear-note")).to_contain_text("1 blocked: a pool has no room for them")
    assert axe.violations(page, tags=axe.ALL) == []
