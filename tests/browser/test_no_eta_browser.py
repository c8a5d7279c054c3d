"""Chromium: the wording a held, paused or blocked org gets on the dashboard, its org
page and the admin, from what the scheduler really publishes (issue 10). Never "clear",
"done" or "nothing queued" for work that cannot run under the current settings."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login
from tests.factories import make_user
from tests.test_clear_times import publish, set_budget, world  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def scheduler_publish(redis_url):
    """Publish the scheduler's own snapshot (``build_snapshot``) and tell the pages."""
    from channels_redis.core import RedisChannelLayer

    from common import live_updates, snapshot

    layer = RedisChannelLayer(hosts=[redis_url])

    def go() -> None:
        publish()
        seq = snapshot.read_snapshot()["seq"]
        with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
            pool.submit(lambda: live_updates.send(live_updates.SnapshotStored(seq=seq), layer=layer)
                        ).result(timeout=10)
    return go


def page_for(browser, base: str, user: str, then: str):
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, base, user, then=then)
    return page


def org_cell(page, name: str):
    return page.locator("#orgs-body tr", has_text=name).locator("td").last


def test_dashboard_org_page_and_admin_name_held_paused_and_blocked_work(
        browser, browser_server, scheduler_publish, world):  # noqa: F811
    make_user("root", superuser=True)
    member = make_user("eve")
    world["evergreen"].members.add(member)
    scheduler_publish()

    dash = page_for(browser, browser_server, "root", "/dashboard/")
    expect(dash.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    expect(org_cell(dash, "Evergreen Medical")).to_have_text("held: no ETA")
    expect(org_cell(dash, "Cedar Labs")).to_have_text("3 paused: no ETA until resumed")
    expect(org_cell(dash, "Delta")).to_have_text("2 blocked: cost above the budget")
    head = world["head"]
    expect(dash.locator("#dispatch-waiting")).to_have_text(
        f"next: #{head.pk} (Acme, audit, cost 3) waits for 3 free; 1 free")
    expect(dash.locator("th", has_text="budget / weight")).to_have_attribute(
        "title", "Share of the budget in use / share of the weight among active orgs. Under share 'charts' "
        "fairness counts charts per round (weight w: w charts per round), not cost: an org running expensive "
        "workflows uses more of the budget at the same weight. Under share 'work' it counts cost x estimated "
        "duration, so over time the two figures meet.")
    expect(dash.locator("#share-legend")).to_contain_text("Fairness counts charts per round, not cost")

    org = page_for(browser, browser_server, "eve", f"/orgs/{world['evergreen'].slug}/")
    expect(org.locator("[data-live]")).to_have_attribute("data-state", "live", timeout=10_000)
    expect(org.locator("#clear-when")).to_have_text("no ETA")
    expect(org.locator("#clear-note")).to_have_text("held: no ETA")
    expect(org.locator("body")).not_to_contain_text("nothing queued")

    admin = page_for(browser, browser_server, "root", "/admin/orgs/org/")
    row = admin.locator("#result_list tr", has_text="Evergreen Medical")
    expect(row.locator("td.field-live_clear")).to_have_text("held: no ETA")

    # Budget 0: every queued chart is blocked; Acme keeps a clear-time for its running
    # audit only, and its queued charts are named beside it, never "clear".
    set_budget(0)
    scheduler_publish()
    expect(org_cell(dash, "Acme")).to_contain_text("2 blocked: cost above the budget")
    expect(org_cell(dash, "Delta")).to_have_text("2 blocked: cost above the budget")
    expect(dash.locator("#clear-note")).to_contain_text("blocked: cost above the budget")
    for name in ("Acme", "Delta", "Cedar Labs", "Evergreen Medical"):
        expect(org_cell(dash, name)).not_to_have_text("clear")
