from __future__ import annotations

import pytest

from dashboard import admin_live, selectors
from tests.factories import make_chart, make_org, make_user, make_workflow


@pytest.fixture(autouse=True)
def _fresh_caches():
    selectors.clear_caches()
    admin_live.forget_snapshot()
    yield
    selectors.clear_caches()
    admin_live.forget_snapshot()


@pytest.fixture
def two_orgs(db):
    """Org A (two members' charts) and org B, one member each."""
    wf = make_workflow("code")
    a, b = make_org("Acme"), make_org("Beta")
    alice, bob = make_user("alice"), make_user("bob")
    a.members.add(alice)
    b.members.add(bob)
    charts_a = [make_chart(a, wf, external_id=f"a-{i}") for i in range(3)]
    charts_b = [make_chart(b, wf, external_id=f"b-{i}") for i in range(2)]
    return {"a": a, "b": b, "alice": alice, "bob": bob, "wf": wf, "charts_a": charts_a, "charts_b": charts_b}


@pytest.fixture
def viewer(db):
    """Staff who may look but not act."""
    return make_user("viewer", staff=True, perms=("charts.view_chart",))


@pytest.fixture
def operator(db):
    """Staff with every control's permission."""
    return make_user("operator", staff=True, perms=(
        "charts.view_chart", "charts.change_chart", "orgs.change_org", "orgs.change_workflowcost",
        "fairsched.change_schedulersettings"))
