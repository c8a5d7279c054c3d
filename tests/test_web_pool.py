"""daphne's web takes its PostgreSQL connections from a pool (``common.connections.pool_connections``,
called by ``config/asgi.py`` in daphne's own process): a request borrows one and gives it
back, where the settings' ``CONN_MAX_AGE = 0`` opened and closed one a request. A real
daphne against the test database; the pool's bounds from ``pg_stat_activity``."""
from __future__ import annotations

import http.client
import json
import threading

import pytest
from django.db import connection, connections

from charts.models import Chart
from common.connections import pool_connections
from tests.api.conftest import client_sessions, producer
from tests.browser.conftest import Daphne
from tests.factories import make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def _post(port: int, key: str, n: int) -> list[int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    statuses = []
    for _ in range(n):
        conn.request("POST", "/api/v1/charts", json.dumps({"workflow": "code"}),
                     {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
    conn.close()
    return statuses


def test_on_postgresql_daphne_lends_its_requests_pooled_connections(test_db_url, redis_url, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's backend keeps its connections already (common/pooled_sqlite3)")
    monkeypatch.setenv("FAIRSCHED_DB_POOL_SIZE", "3")  # daphne's environment is this one's
    monkeypatch.setenv("FAIRSCHED_API_RATE", "0")  # the rate limit has its own tests
    make_workflow("code")
    acme = producer(make_org("Acme"))
    web = Daphne(test_db_url, redis_url, log_name="daphne-pool.log").start()
    try:
        before = client_sessions()
        assert _post(web.port, acme.raw, 20) == [201] * 20
        # given back, not closed: the pool still holds what the requests borrowed
        kept = client_sessions() - before
        assert 1 <= len(kept) <= 3, kept
        # 8 producers at once borrow at most the pool's size (a ninth request waits for one)
        results: list[list[int]] = []
        threads = [threading.Thread(target=lambda: results.append(_post(web.port, acme.raw, 10))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [s for r in results for s in r] == [201] * 80
        assert len(client_sessions() - before) <= 3
        assert Chart.objects.count() == 100
    finally:
        web.stop()


def test_the_pool_is_postgresql_s_and_an_operator_may_turn_it_off(settings):
    """No pool on SQLite, none with ``FAIRSCHED_DB_POOL=0``; on PostgreSQL the pool's options
    (and ``CONN_MAX_AGE`` 0, which Django requires of a pool). Settings put back after."""
    saved = {alias: dict(connections.settings[alias]) for alias in connections}
    try:
        settings.FAIRSCHED_DB_POOL = False
        assert pool_connections() is False
        assert all("pool" not in connections.settings[a].get("OPTIONS", {}) for a in connections)
        settings.FAIRSCHED_DB_POOL, settings.FAIRSCHED_DB_POOL_SIZE = True, 7
        if connection.vendor == "postgresql":
            assert pool_connections() is True
            assert connections.settings["default"]["OPTIONS"]["pool"]["max_size"] == 7
            assert connections.settings["default"]["CONN_MAX_AGE"] == 0
        else:
            assert pool_connections() is False
            assert "pool" not in connections.settings["default"].get("OPTIONS", {})
    finally:
        for alias, values in saved.items():
            connections.settings[alias].clear()
            connections.settings[alias].update(values)


@pytest.mark.parametrize("env", [{"FAIRSCHED_DB_POOL_SIZE": "0"}, {"FAIRSCHED_DB_POOL_SIZE": "lots"},
                                 {"FAIRSCHED_DB_POOL": "maybe"}])
def test_a_bad_pool_setting_names_the_variable(env):
    from tests.test_settings import run_manage

    result = run_manage("check", **env)
    assert result.returncode != 0 and next(iter(env)) in result.stderr


def test_importing_the_asgi_app_in_a_process_already_set_up_leaves_its_connections_alone():
    """A test process imports ``config.asgi`` (the consumers' tests): its open connection was
    not lent by a pool, and Django would hand it back to one at its close."""
    import config.asgi  # noqa: F401

    assert "pool" not in connections.settings["default"].get("OPTIONS", {})
    connection.close()  # closes as it was opened
    assert Chart.objects.count() == 0
