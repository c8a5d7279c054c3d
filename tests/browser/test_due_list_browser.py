"""Chromium: the Due list says how many of the charts at risk or late it shows ("1–100 of
123"), and is filtered by org and by state and paged, where it showed the first 100 of one
org's late charts and nothing else, without saying so."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser import axe
from tests.browser.conftest import login
from tests.factories import make_flagged_backlog, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_due_list_says_how_many_and_filters_and_pages(browser, browser_server, redis_layer_publish):
    acme, beta, cedar = make_flagged_backlog()
    make_user("root", superuser=True)
    redis_layer_publish()
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    login(page, browser_server, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    rows = page.locator("#due-charts-body tr")
    expect(page.locator("#due-range")).to_have_text("1–100 of 123 at risk or late")
    expect(rows).to_have_count(100)

    page.select_option("#due-state", "at_risk")
    expect(page.locator("#due-range")).to_have_text("1–7 of 7 at risk", timeout=5_000)
    expect(rows).to_have_count(7)
    expect(rows.locator("td:nth-child(2)")).to_have_text(["Cedar"] * 7)

    page.select_option("#due-state", "")
    page.select_option("#due-org", str(beta.pk))
    expect(page.locator("#due-range")).to_have_text("1–6 of 6 at risk or late, Beta", timeout=5_000)
    expect(rows.locator("td:nth-child(2)")).to_have_text(["Beta"] * 6)

    page.select_option("#due-org", "")
    expect(page.locator("#due-range")).to_have_text("1–100 of 123 at risk or late", timeout=5_000)
    page.click("#due-next")
    expect(page.locator("#due-range")).to_have_text("101–123 of 123 at risk or late", timeout=5_000)
    expect(rows).to_have_count(23)
    expect(page.locator("#due-next")).to_be_disabled()
    expect(rows.filter(has_text="at risk")).to_have_count(7)
    found = axe.violations(page, within="#due-panel")
    assert not found, "axe-core found violations in the Due panel:\n" + axe.report({"Due panel": found})
    page.click("#due-prev")
    expect(page.locator("#due-range")).to_have_text("1–100 of 123 at risk or late", timeout=5_000)
