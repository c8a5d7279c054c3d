"""The producer API against what issue 41 (section 4) found: bad input named, never a 500;
bounded memory and tables; the answers the docs promise."""
from __future__ import annotations

import pytest

from charts.models import Chart

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def _problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM
    return response.json()


# --- 4.4: a workflow that is not valid Unicode ------------------------------------------------


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/charts", '{"workflow": "\\ud800"}', "workflow"),
    ("/charts", '{"workflow": "co\\udfffde", "payload": {}}', "workflow"),
    ("/charts/batch", '{"charts": [{"workflow": "code"}, {"workflow": "\\ud800"}]}', "charts[1].workflow"),
    ("/charts/batch", '{"charts": [{"workflow": ["code"]}]}', "charts[0].workflow"),
    ("/charts/batch", '{"charts": [{"workflow": {"name": "code"}}]}', "charts[0].workflow"),
])
def test_a_workflow_that_cannot_be_a_name_is_a_422_naming_it(api_world, path, body, field):
    """A lone surrogate reached the database's encoder (a 500); a list as a batch item's
    workflow was a dict key (a 500): both are refused naming the field, nothing written."""
    problem = _problem(api_world["acme"].post(path, body), 422)
    assert list(problem["errors"]) == [field], problem
    assert Chart.objects.count() == 0
