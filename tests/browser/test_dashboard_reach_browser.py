"""Chromium: the dashboard's controls can be reached, by the mouse at common widths (nothing
lies over "Set policies", no field is pushed off its card) and by the keyboard (a skip link,
the focus kept on the order after Pause and Resume)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from control.models import SchedulerSettings
from tests.browser.conftest import login
from tests.factories import make_chart, make_org, make_user, make_workflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(db):
    wf = make_workflow("code")
    acme = make_org("Acme", weight=2)
    charts = [make_chart(acme, wf, external_id=f"acme-{i}") for i in range(3)]
    make_user("root", superuser=True)
    return {"wf": wf, "acme": acme, "charts": charts}


def open_dashboard(browser, base: str, width: int = 1440):
    page = browser.new_context(viewport={"width": width, "height": 1000}).new_page()
    login(page, base, "root", then="/dashboard/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    return page


@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_set_policies_is_clicked_with_the_mouse_and_stays_on_its_card(browser, browser_server, redis_layer_publish,
                                                                       world, width):
    redis_layer_publish()
    page = open_dashboard(browser, browser_server, width)
    card = page.locator(".card.dial").bounding_box()
    for sel in ("#share-select", "#quantum-input", "#dispatch-select", "#policies-form button[type=submit]",
                "#budget-input", "#plan-clear-by", "#plan-meet-due"):
        box = page.locator(sel).bounding_box()
        assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"], (sel, box, card)
    page.select_option("#share-select", "work")
    # a real click: Playwright refuses one that another element (the Charts card) would take
    page.locator("#policies-form button[type=submit]").click(timeout=3_000)
    for _ in range(50):
        if SchedulerSettings.get().share == "work":
            break
        page.wait_for_timeout(100)
    assert SchedulerSettings.get().share == "work"
