"""axe-core in Chromium on every page, under the demo workload: as staff (the dashboard, the org
pages, the history, search, failures, the chart pages, the producer form, the API's docs, and the
admin: its index, and the change list, add form and change form of every registered model) and as
an org member (their org's page, their chart's page, the producer form, the API's docs), the
login page too. Every rule axe-core runs by default (WCAG 2 A and AA, and its best practices:
one ``h1`` a page, no empty table header): any violation fails, listed by rule, element and what to fix."""
from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import F
from django.test import RequestFactory
from django.urls import reverse
from playwright.sync_api import expect

from charts.models import Chart, ChartState
from orgs.models import OrgToken, Scope
from jobs.models import ImportJob, ImportStatus, WebhookDelivery, WebhookEvent
from charts.services import chart_pause, chart_resume
from orgs.models import Org
from tests.browser import axe
from tests.browser.conftest import ARTIFACTS, SETTLE_JS, login, settle
from tests.browser.test_screenshot import demo_history, demo_workload
from control.services import pool_set
from orgs.services import org_pool_limit_set
from tests.factories import make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _demo() -> dict[str, object]:
    demo_workload()
    # the finished charts had predictions: the accuracy panel, its plot and the chart page's table fill in
    Chart.objects.filter(state=ChartState.SUCCEEDED).update(
        eta_first_at=F("finished_at") + timedelta(minutes=4), eta_dispatch_at=F("finished_at") - timedelta(minutes=1),
        eta_p90_at=F("finished_at") + timedelta(minutes=2))
    make_user("root", superuser=True)
    for chart in Chart.objects.filter(state=ChartState.QUEUED, paused=False).order_by("-pk")[:8]:  # the activity
        chart_pause(chart=chart.pk)                                                                  # feed scrolls
        chart_resume(chart=chart.pk)
    demo_history({o.name: o.pk for o in Org.objects.all()})
    acme = Org.objects.get(name="Acme Clinics")
    return {"org": acme, "finished": Chart.objects.filter(org=acme, state=ChartState.SUCCEEDED).first(),
            "queued": Chart.objects.filter(org=acme, state=ChartState.QUEUED, paused=False).first()}


class Pages:
    """Opens pages in ``page`` and keeps axe-core's violations on each (and a screenshot)."""

    def __init__(self, page, base: str, who: str) -> None:
        self.page, self.base, self.who = page, base, who
        self.found: dict[str, list[dict]] = {}

    def check(self, name: str, path: str, ready: str = "main", *, again: bool = False) -> None:
        page = self.page
        if page.url != self.base + path or not again:
            page.goto(self.base + path)
        expect(page.locator(ready).first).to_be_attached(timeout=10_000)
        settle(page)  # the snapshot shown, the panels fetched and drawn, the clocks ticked
        key = f"{name} ({self.who})"
        self.found[key] = axe.violations(page, tags=axe.ALL)
        if self.found[key]:  # what it looked like, for the report (a screenshot a page cost 15% of the test)
            page.screenshot(path=str(ARTIFACTS / f"axe-{re.sub(r'[^a-z0-9]+', '-', key.lower()).strip('-')}.png"),
                            full_page=True)


def admin_pages(user) -> list[tuple[str, str]]:
    """Every registered model's change list, add form (where the admin allows adding) and change
    form (of its first row): ``[(name, path)]``."""
    request = RequestFactory().get("/admin/")
    request.user = user
    out = []
    for model, model_admin in admin.site._registry.items():
        label = f"{model._meta.app_label}_{model._meta.model_name}"
        name = model._meta.verbose_name
        out.append((f"admin {name} list", reverse(f"admin:{label}_changelist")))
        if not model._meta.managed:  # django-rq's queues: a link to its own pages, no rows
            continue
        if model_admin.has_add_permission(request):
            out.append((f"admin {name} add", reverse(f"admin:{label}_add")))
        first = model_admin.get_queryset(request).order_by("pk").first()
        assert first is not None, f"the demo has no {name}: its change form would go unchecked"
        out.append((f"admin {name} change", reverse(f"admin:{label}_change", args=[first.pk])))
    return out


def _every_model_has_a_row(acme: Org) -> None:
    Group.objects.create(name="operators")
    OrgToken.issue(org=acme, name="producer", scope=Scope.SUBMIT)
    ImportJob.objects.create(filename="backlog.csv", format="csv", data=b"external_id\nx-1\n")
    WebhookDelivery.objects.create(org=acme, event=WebhookEvent.values[0], dedupe_key="k-1", payload={"ok": True},
                                   url="https://example.com/hook")
    pool_set(name="llm", capacity=8)  # a pool and a limit: their change forms are checked too
    org_pool_limit_set(org=acme, pool="llm", max=4)


def _staff_pages(pages: Pages, page, base: str, demo: dict) -> None:
    pages.check("login", "/accounts/login/", "#id_username")
    login(page, base, "root", then="/dashboard/")
    pages.check("dashboard", "/dashboard/", "#live[data-state=live]", again=True)
    expect(page.locator("#acc-body tr")).not_to_have_count(0)
    pages.found["dashboard (staff)"] = axe.violations(page, tags=axe.ALL)  # again, with the accuracy panel loaded
    page.set_viewport_size({"width": 1920, "height": 1080})  # the wide layout: two columns of cards
    settle(page)
    pages.found["dashboard, 1920 px wide (staff)"] = axe.violations(page, tags=axe.ALL)
    page.set_viewport_size({"width": 1280, "height": 800})


def _staff_org_pages(pages: Pages, page, base: str, demo: dict) -> None:
    """The org pages as staff: Acme's, a held org's, one with a chart blocked."""
    login(page, base, "root", then=f"/orgs/{demo['org'].slug}/")
    pages.check("org page", f"/orgs/{demo['org'].slug}/", "[data-live][data-state=live]", again=True)
    for name in ("Cedar Care", "Echo Imaging"):  # held; one chart blocked
        pages.check(f"org page {name}", f"/orgs/{Org.objects.get(name=name).slug}/", "[data-live][data-state=live]")


def _staff_other_pages(pages: Pages, page, base: str, demo: dict) -> None:
    """Staff's other pages: the history, search, failures, the chart pages, the producer form, the API's docs."""
    login(page, base, "root", then="/dashboard/history/")
    pages.check("history", "/dashboard/history/", "table", again=True)
    pages.check("search", f"/dashboard/search/?q={demo['queued'].external_id[:3]}")
    pages.check("failures", "/dashboard/failures/")
    pages.check("chart page finished", f"/charts/{demo['finished'].pk}/", "#chart-prediction")
    pages.check("chart page queued", f"/charts/{demo['queued'].pk}/", "#chart-facts")
    pages.check("producer form", "/charts/new/", "form")
    pages.check("API docs", "/api/v1/docs", ".opblock")


def _admin_forms(ending: str):
    """Every registered model's add forms (``ending``: " add") or change forms (" change")."""

    def check(pages: Pages, page, base: str, demo: dict) -> None:
        login(page, base, "root", then="/admin/")
        root = get_user_model().objects.get(username="root")
        for name, path in admin_pages(root):
            if name.endswith(ending):
                pages.check(name, path, "#content")

    return check


def _admin_lists(half: int):
    """The admin's index and the first half of the change lists (``half`` 0), or the second (1)."""

    def check(pages: Pages, page, base: str, demo: dict) -> None:
        login(page, base, "root", then="/admin/")
        if half == 0:
            pages.check("admin index", "/admin/", "#content-main", again=True)
        root = get_user_model().objects.get(username="root")
        lists = [(name, path) for name, path in admin_pages(root) if name.endswith(" list")]
        middle = (len(lists) + 1) // 2
        for name, path in (lists[:middle] if half == 0 else lists[middle:]):
            pages.check(name, path, "#content")

    return check


def _admin_other_pages(pages: Pages, page, base: str, demo: dict) -> None:
    """The admin's other pages: an app's index, history, delete, passwords, django-rq's."""
    login(page, base, "root", then="/admin/")
    root = get_user_model().objects.get(username="root")
    org = demo["org"]
    for name, path in (("admin orgs app", "/admin/orgs/"), ("admin org history", f"/admin/orgs/org/{org.pk}/history/"),
                       ("admin org delete", f"/admin/orgs/org/{org.pk}/delete/"),
                       ("admin password change", "/admin/password_change/"),
                       ("admin user password", f"/admin/auth/user/{root.pk}/password/"),
                       ("rq queues", "/admin/rq/"), ("rq workers", "/admin/rq/workers/0/"),
                       ("rq queue details", "/admin/rq/queues/0/details/"),
                       *((f"rq {kind} jobs", f"/admin/rq/queues/0/{kind}/")
                         for kind in ("finished", "failed", "scheduled", "started", "deferred")),
                       ("rq queued jobs", "/admin/rq/queues/0/")):
        pages.check(name, path, "#content")


def _member_pages(pages: Pages, page, base: str, demo: dict) -> None:
    """An org member: not staff, a member of Acme, who may submit charts."""
    member = make_user("ada", perms=("charts.add_chart",))
    demo["org"].members.add(member)
    login(page, base, "ada", then="/")
    pages.check("org page", f"/orgs/{demo['org'].slug}/", "[data-live][data-state=live]", again=True)
    pages.check("chart page finished", f"/charts/{demo['finished'].pk}/", "#chart-prediction")
    pages.check("chart page queued", f"/charts/{demo['queued'].pk}/", "#chart-facts")
    pages.check("producer form", "/charts/new/", "form")
    pages.check("API docs", "/api/v1/docs", ".opblock")


def _with_pools(demo: dict) -> None:
    """The demo with capacity pools (docs/scheduling.md, "Pools"): the running code charts draw
    on ``llm`` (3 units), which is full, so a review waits at its head; Acme Clinics' ceiling in
    llm is 2 (it holds 2); Echo Imaging's audits draw on ``gpu``, of capacity 0 (blocked)."""
    from control.services import pool_set
    from orgs.models import Workflow
    from orgs.services import org_pool_limit_set, workflow_cost_set

    pool_set(name="llm", capacity=6)
    pool_set(name="gpu", capacity=0)
    code, review, audit = (Workflow.objects.get(name=n) for n in ("code", "review", "audit"))
    for org in Org.objects.all():
        workflow_cost_set(org=org, workflow=code, cost=1, pools={"llm": 1})
        workflow_cost_set(org=org, workflow=review, cost=2, pools={"llm": 1, "default": 2})
    workflow_cost_set(org=Org.objects.get(name="Echo Imaging"), workflow=audit, cost=3, pools={"gpu": 1})
    org_pool_limit_set(org=demo["org"], pool="llm", max=2, min=1)


def _pools_pages(pages: Pages, page, base: str, demo: dict) -> None:
    """The pools state: the dashboard with its Pools panel (staff), the org pages with why each
    chart waits (staff, then a member)."""
    login(page, base, "root", then="/dashboard/")
    pages.check("dashboard with pools", "/dashboard/", "#live[data-state=live]", again=True)
    expect(page.locator("#pools-panel [data-pool-card]")).to_have_count(3)
    expect(page.locator("#pool-orgs")).to_contain_text("Acme Clinics: llm 2 of 2 (ceiling, min 1)")
    pages.found["dashboard with pools (staff)"] = axe.violations(page, tags=axe.ALL)
    pages.check("org page with pools", f"/orgs/{demo['org'].slug}/", "[data-live][data-state=live]")
    pages.check("org page with pools Echo Imaging", f"/orgs/{Org.objects.get(name='Echo Imaging').slug}/",
                "[data-live][data-state=live]")
    expect(page.locator("td.waits", has_text="pool gpu has no room for it: capacity 0")).not_to_have_count(0)
    page.context.clear_cookies()
    member = make_user("ada", perms=("charts.add_chart",))
    demo["org"].members.add(member)
    login(page, base, "ada", then="/")
    pages.who = "member"
    pages.check("org page with pools", f"/orgs/{demo['org'].slug}/", "[data-live][data-state=live]", again=True)
    expect(page.locator("#org-pools")).to_have_text("Pools in use: llm 2 of 2 (ceiling, min 1)")


# Ten tests, not one: on the suite's xdist workers each part runs beside the others (at most 3
# dashboards or 16 pages each; a part's own cost, the demo, the login and the control case, is
# about a second). The seconds are each part's under the suite's load, for ``@pytest.mark.slow``.
PARTS = {"staff": (_staff_pages, 18), "staff-orgs": (_staff_org_pages, 15), "staff-other": (_staff_other_pages, 10),
         "admin": (_admin_lists(0), 18), "admin-lists": (_admin_lists(1), 18),
         "admin-other": (_admin_other_pages, 18), "admin-add": (_admin_forms(" add"), 16),
         "admin-change": (_admin_forms(" change"), 16), "member": (_member_pages, 10), "pools": (_pools_pages, 18)}


@pytest.mark.parametrize("part", [pytest.param(part, marks=pytest.mark.slow(seconds))
                                  for part, (_, seconds) in PARTS.items()])
def test_the_pages_have_no_accessibility_violation(part, browser, browser_server, redis_layer_publish):
    demo = _demo()
    _every_model_has_a_row(demo["org"])
    if part == "pools":
        _with_pools(demo)
    redis_layer_publish()
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script(SETTLE_JS)
    # A running import's page reloads itself every 2 s (jobs/static/jobs/import_refresh.js): on a
    # loaded machine the reload came during axe's run or aborted the next page's load. Its
    # "Refresh this page" box is checked as the operator leaves it off (the same markup, unticked).
    context.add_init_script("try { sessionStorage.setItem('fairsched.importRefresh', 'off'); } catch (e) {}")
    page = context.new_page()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pages = Pages(page, browser_server, "member" if part == "member" else "staff")
    PARTS[part][0](pages, page, browser_server, demo)
    found = pages.found
    (ARTIFACTS / f"axe-violations-{part}.json").write_text(json.dumps(found, indent=1))
    # The control case: grey text on white is found, so a clean run above means something (on the
    # producer form, which every part's user may open: its main landmark holds the faint line).
    page.goto(f"{browser_server}/charts/new/")
    expect(page.locator("form").first).to_be_attached(timeout=10_000)
    page.evaluate("""() => { const p = document.createElement("p"); p.id = "axe-control"; p.textContent = "faint";
                             p.style.color = "#bbb"; p.style.background = "#fff";
                             (document.querySelector("main") || document.body).appendChild(p); }""")
    control = axe.violations(page, tags=axe.ALL)
    assert any(v["id"] == "color-contrast" and any("#axe-control" in n["target"] for n in v["nodes"])
               for v in control), control
    assert not any(found.values()), "axe-core found violations:\n" + axe.report(found)


def test_an_import_page_refreshes_itself_until_told_to_stop(browser, browser_server):
    """WCAG 2.2.1: a running import's page reloads itself every 2 s to show its progress, and
    unticking "Refresh this page" stops it (it had a <meta http-equiv="refresh">, which nothing
    stops: axe's meta-refresh); a finished import's page does not reload.

    The page's timers run on Playwright's clock, moved past the 2 s instead of waiting them out.
    A reload the page starts fires its ``beforeunload`` at once, inside ``location.reload()``
    (so inside ``fast_forward``): ``not_reloading`` is then false on the old document, or the
    document is a new one, or gone (the evaluate fails): each fails the test."""
    make_user("root", superuser=True)
    job = ImportJob.objects.create(filename="backlog.csv", format="csv", data=b"external_id\nx-1\n")
    context = browser.new_context()
    context.clock.install()  # time still flows as it does; fast_forward jumps it
    page = context.new_page()
    login(page, browser_server, "root", then=f"/admin/jobs/importjob/{job.pk}/change/")
    box = page.locator("#import-refresh")
    expect(box).to_be_checked()
    mark = """() => { window.notReloaded = true; window.reloading = false;
                      addEventListener("beforeunload", () => { window.reloading = true; }); }"""
    not_reloading = "window.notReloaded === true && window.reloading === false"
    page.evaluate(mark)
    page.clock.fast_forward(2_500)
    page.wait_for_function("() => window.notReloaded === undefined", timeout=8_000)  # reloaded by itself
    box.uncheck()
    page.evaluate(mark)
    page.clock.fast_forward(3_500)
    assert page.evaluate(not_reloading) is True
    page.reload()
    expect(page.locator("#import-refresh")).not_to_be_checked()  # the choice lasts the tab's session
    page.evaluate(mark)
    page.clock.fast_forward(2_500)
    assert page.evaluate(not_reloading) is True
    assert axe.violations(page, tags=axe.ALL) == []

    ImportJob.objects.filter(pk=job.pk).update(status=ImportStatus.SUCCEEDED)
    page.reload()
    expect(page.locator("#content-main")).to_be_attached()
    expect(page.locator("#import-refresh")).to_have_count(0)
    assert page.locator("meta[http-equiv=refresh]").count() == 0
