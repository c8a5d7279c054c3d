"""The producer API against what issue 41 (section 4) found: bad input named, never a 500;
bounded memory and tables; the answers the docs promise."""
from __future__ import annotations

import re
import time

import pytest
from django.test import RequestFactory
from hypothesis import example, given, settings, strategies as st

from api import idempotency
from api.problems import Problem
from api.views import IDEMPOTENCY_KEY_PATTERN
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


# --- 4.3: a batch's item count, before its items are built -------------------------------------


def test_a_batch_of_millions_of_items_is_refused_before_they_are_built(api_world):
    """1.5 million ``{}`` (4.5 MiB): json.loads built every one (900 MB for 11 million) before
    the 413. Read item by item and refused at the 1,001st, the peak stays near the body's own size."""
    import tracemalloc

    body = '{"charts": [' + ",".join(["{}"] * 1_500_000) + "]}"
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        response = api_world["acme"].post("/charts/batch", body)
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    problem = _problem(response, 413)
    assert "FAIRSCHED_API_BATCH_MAX (1,000)" in problem["errors"]["charts"][0]
    assert peak < 8 * len(body), f"peak {peak / 2**20:.1f} MiB for a {len(body) / 2**20:.1f} MiB body"
    assert seconds < 5, seconds
    assert Chart.objects.count() == 0


@pytest.mark.parametrize(("body", "status", "field"), [
    ('[' + ",".join(["{}"] * 5000) + "]", 422, "body"),          # a list is no batch: not read
    ('{"extra": [' + ",".join(["{}"] * 5000) + '], "charts": []}', 422, "extra"),  # nor a field it forbids
    ('{"charts": [{}, {},]}', 400, "body"),
    ('{"charts": [{"workflow": "code"}] ', 400, "body"),
    ('{"charts": []} []', 400, "body"),
    ('"charts"', 422, "body"),
])
def test_a_batch_body_is_read_as_json_reads_it(api_world, body, status, field):
    problem = _problem(api_world["acme"].post("/charts/batch", body), status)
    assert field in problem["errors"], problem


def test_a_batch_at_the_limit_is_read_whole(api_world, settings):
    settings.FAIRSCHED_API_BATCH_MAX = 3
    acme = api_world["acme"]
    body = ' { "charts" : [ {"workflow": "code", "payload": {"a": [1, {"b": NaN}]}} , {"workflow":"code"},\n'
    assert "charts[0].payload.a[1].b" in _problem(acme.post("/charts/batch", body + '{"workflow": "code"} ] } '), 422)["errors"]
    response = acme.post("/charts/batch", '{"charts": [{"workflow": "code"}, {"workflow": "review"}, '
                                          '{"workflow": "code", "external_id": "x"}]}')
    assert response.status_code == 201 and response.json()["created"] == 3
    assert acme.post("/charts/batch", '{"charts": []}').json() == {"created": 0, "existing": 0, "charts": []}
    _problem(acme.post("/charts/batch", {"charts": [{"workflow": "code"}] * 4}), 413)


# --- 4.2: expired Idempotency-Key answers, purged by a periodic job -----------------------------


def test_the_periodic_job_purges_every_expired_answer_and_keeps_the_rest(api_world, redis_url):
    """The requests purged at most 1,000 rows every 10 minutes per process (4.2): 12,001 expired
    rows, more than two of the job's batches, all go in one run; the live ones stay, and rqcron
    runs the job every minute (jobs/cron.py)."""
    import redis
    from datetime import timedelta

    from django.utils import timezone
    from rq.cron import CronScheduler

    from api.models import IdempotencyKey
    from jobs import tasks

    acme = api_world["acme"]
    now = timezone.now()
    IdempotencyKey.objects.bulk_create([
        IdempotencyKey(org=acme.org, key=f"old-{i}", fingerprint="f", status=201, body="{}", created_at=now,
                       expires_at=now - timedelta(seconds=1 + i % 100)) for i in range(12_001)], batch_size=2000)
    assert acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "live"}).status_code == 201
    assert tasks.purge_idempotency_keys() == {"deleted": 12_001}
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["live"]
    assert tasks.purge_idempotency_keys() == {"deleted": 0}
    replay = acme.post("/charts", {"workflow": "code"}, **{"Idempotency-Key": "live"})
    assert replay["Idempotent-Replayed"] == "true"

    scheduler = CronScheduler(connection=redis.Redis.from_url(redis_url))
    scheduler.load_config_from_file("jobs.cron")
    jobs = {job.name: job for job in scheduler.get_jobs()}
    assert jobs["idempotency-purge"].func is tasks.purge_idempotency_keys
    assert jobs["idempotency-purge"].interval == 60


# --- 4.10: the schema says what the server accepts ---------------------------------------------

# What a client can send in a header value (RFC 9110: VCHAR, SP, HTAB, obs-text), without the
# leading blanks every server strips before the application sees the value.
# The schema's pattern is ECMA-262's (JSON Schema), where ``$`` is the end of the input;
# Python's ``$`` also matches before a final newline ('0\n'), which no header can carry.
_SCHEMA_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN.replace("$", r"\Z"))
_HEADER_CHARS = st.characters(codec="latin-1", exclude_categories=("Cc",), include_characters="\t")


@given(value=st.text(_HEADER_CHARS, max_size=300).filter(lambda v: not v[:1].isspace())
       | st.from_regex(IDEMPOTENCY_KEY_PATTERN, fullmatch=False).filter(lambda v: not v[:1].isspace()))
@example(value="")
@example(value='""')
@example(value='"" ')
@example(value='"')
@example(value='" "')
@example(value='"' + "k" * 255 + '"')
@example(value='"' + "k" * 256 + '"')
@example(value="k" * 255 + " \t")
@example(value="k" * 256)
@example(value="a\tb")
@example(value="caf\u00e9")
@example(value="0\xa0")
@settings(max_examples=400, deadline=None)
def test_the_idempotency_key_s_schema_pattern_is_exactly_what_the_server_accepts(value):
    """schemathesis found an empty Idempotency-Key allowed by the schema and refused by the
    server (4.10): the schema's pattern matches a value if and only if key_of accepts it."""
    request = RequestFactory().post("/api/v1/charts", HTTP_IDEMPOTENCY_KEY=value)
    try:
        accepted = idempotency.key_of(request) is not None
    except Problem as refused:
        assert refused.status == 400 and "Idempotency-Key" in refused.errors
        accepted = False
    assert accepted == bool(_SCHEMA_KEY.search(value)), repr(value)


def test_the_schema_gives_state_and_cursor_the_values_the_server_answers(api_world):
    """state=TRUE and an empty cursor were allowed by the schema and refused (4.10)."""
    acme = api_world["acme"]
    parameters = {p["name"]: p["schema"] for p in acme.get("/openapi.json").json()["paths"]["/api/v1/charts"]["get"]
                  ["parameters"]}
    assert parameters["state"]["enum"] == ["queued", "running", "succeeded", "failed", "cancelled"]
    for state in parameters["state"]["enum"]:
        assert acme.get("/charts", state=state).status_code == 200
    cursor = parameters["cursor"]["pattern"]
    for value in ("1", "0", "9" * 16, "0000"):
        assert re.search(cursor, value) and acme.get("/charts", cursor=value).status_code == 200, value
    for value in ("", "TRUE", "-1", "1" * 17, " 1"):
        assert not re.search(cursor, value)
        assert "cursor" in _problem(acme.get("/charts", cursor=value), 400)["errors"], value
