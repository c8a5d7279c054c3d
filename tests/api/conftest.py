"""The producer API's fixtures: an org with a submit key, another org with its own; the
web servers' sessions on the test database."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.db import connection
from django.test import Client

from orgs.models import Org, OrgToken
from tests.factories import make_org, make_workflow


def client_sessions() -> set[int]:
    """The PostgreSQL test database's other client sessions (a web server's, in the tests
    that count its connections)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        return {pid for (pid,) in cursor.fetchall()}


@dataclass
class Producer:
    org: Org
    raw: str
    client: Client

    def post(self, path: str, data=None, **headers):
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        body = data if isinstance(data, (str, bytes)) else ({} if data is None else data)
        return self.client.post(f"/api/v1{path}", body, content_type="application/json", **extra)

    def get(self, path: str, **params):
        return self.client.get(f"/api/v1{path}", params)


def producer(org: Org, scope: str = "submit") -> Producer:
    _, raw = OrgToken.issue(org=org, name=f"{org.slug} {scope}", scope=scope)
    return Producer(org, raw, Client(HTTP_AUTHORIZATION=f"Bearer {raw}"))


@pytest.fixture
def api_world(db, settings):
    settings.FAIRSCHED_API_RATE = 0.0  # the rate limit has its own tests
    acme, beta = make_org("Acme"), make_org("Beta")
    make_workflow("code")
    make_workflow("review")
    return {"acme": producer(acme), "beta": producer(beta), "acme_read": producer(acme, "read")}


@pytest.fixture
def acme(settings) -> Producer:
    """Acme with a submit key and the workflow ``code``, no rate limit (the races' and the
    round trips' tests)."""
    settings.FAIRSCHED_API_RATE = 0.0
    make_workflow("code")
    return producer(make_org("Acme"))
