"""Bulk import: every valid row imported in atomic batches, every invalid row reported."""
from __future__ import annotations

import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from charts.models import Chart
from jobs import importing, tasks
from jobs.importing import ImportFileError, parse_rows
from jobs.models import ImportJob, ImportStatus
from jobs.services import import_create, import_resume
from tests.factories import make_org, make_user, make_workflow


def _csv(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def acme(db):
    return make_org("Acme Health")


@pytest.fixture
def beacon(db):
    return make_org("Beacon Clinic")


@pytest.fixture
def code(db):
    return make_workflow("code")


# --- reading ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, fmt, message",
    [
        (b"", "csv", "the CSV file is empty"),
        (b"org,flavour\nacme,x\n", "csv", "unknown column(s) 'flavour'"),
        (b"org,payload\nacme,{}\n", "csv", "missing column(s) workflow"),
        (b"\xff\xfe\x00", "csv", "not UTF-8"),
        (b"{not json", "json", "not valid JSON"),
        (b'{"rows": []}', "json", "expected a JSON list of charts"),
    ],
    ids=["empty", "unknown-column", "missing-column", "not-utf8", "bad-json", "json-shape"],
)
def test_unreadable_files_are_refused_as_a_whole(data, fmt, message):
    with pytest.raises(ImportFileError) as exc:
        parse_rows(data, fmt)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    "line, error",
    [
        ("acme,code,e1,,", None),
        ("acme,code,e1,\"{\"\"seconds\"\": 5}\",yes", None),
        ("acme,code,e1,not-json,", "payload: not valid JSON"),
        ("acme,code,e1,,maybe", "priority: must be true or false, got 'maybe'."),
        ("acme,code,e1,,,extra", "more values than the 5 columns"),
    ],
    ids=["minimal", "payload-and-priority", "bad-payload", "bad-priority", "extra-value"],
)
def test_csv_rows_are_checked_one_by_one(line, error):
    [row] = parse_rows(_csv("org,workflow,external_id,payload,priority", line), "csv")
    assert row.number == 1
    if error is None:
        assert row.error is None
    else:
        assert error in row.error


def test_csv_header_is_case_insensitive_and_bom_tolerant():
    rows = parse_rows(b"\xef\xbb\xbfOrg,Workflow\nacme,code\n", "csv")
    assert [(r.item, r.error) for r in rows] == [({"org": "acme", "workflow": "code", "priority": False}, None)]


def test_json_accepts_a_list_or_an_object_with_charts():
    doc = [{"org": "acme", "workflow": "code"}, 7, {"org": "acme", "workflow": "code", "color": "red"}]
    rows = parse_rows(json.dumps({"charts": doc}).encode(), "json")
    assert [r.error for r in rows] == [
        None, "must be an object with org and workflow, got int.",
        "unknown field(s) color; the fields are org, workflow, external_id, payload, priority, due_at.",
    ]


# --- importing (the job's body, called directly) -----------------------------------


def test_valid_rows_are_imported_and_each_invalid_row_is_reported(acme, beacon, code):
    data = _csv(
        "org,workflow,external_id,payload,priority",
        "acme-health,code,a-1,\"{\"\"seconds\"\": 5}\",",
        "acme-health,nope,a-2,,",  # 2: unknown workflow
        "ghost,code,a-3,,",  # 3: unknown org
        f"{beacon.pk},code,b-1,,true",  # by pk
        "acme-health,code,a-1,,",  # 5: repeats row 1
        "acme-health,code,,[1],",  # 6: payload not an object (the service says so)
        "beacon-clinic,code,,,",
    )
    job = import_create(filename="charts.csv", data=data, batch_size=3)
    job = importing.import_run(job.pk)

    assert job.status == ImportStatus.PARTIAL
    assert (job.total_rows, job.next_row, job.created_count, job.existing_count, job.error_count) == (7, 7, 3, 0, 4)
    assert job.errors == [
        {"row": 2, "message": "workflow: unknown workflow 'nope'."},
        {"row": 3, "message": "org: org 'ghost' does not exist."},
        {"row": 5, "message": "external_id: 'a-1' repeats row 1."},
        {"row": 6, "message": "payload: must be a JSON object, got list."},
    ]
    charts = list(Chart.objects.order_by("id").values_list("org__slug", "external_id", "payload", "priority"))
    assert charts == [
        ("acme-health", "a-1", {"seconds": 5}, False),
        ("beacon-clinic", "b-1", {}, True),
        ("beacon-clinic", None, {}, False),
    ]
    assert "3 chart(s) created, 0 already there, 4 row(s) refused of 7 row(s)." in job.message


def test_reimporting_a_file_counts_rows_already_there(acme, code):
    data = json.dumps([{"org": "acme-health", "workflow": "code", "external_id": f"x{i}"} for i in range(5)]).encode()
    importing.import_run(import_create(filename="a.json", data=data).pk)
    again = importing.import_run(import_create(filename="a.json", data=data).pk)
    assert (again.status, again.created_count, again.existing_count) == (ImportStatus.SUCCEEDED, 0, 5)
    assert Chart.objects.count() == 5


def test_a_row_refused_by_the_service_is_reported_and_its_batch_still_imported(acme, code):
    Chart.objects.create(org=acme, workflow=code, external_id="taken", payload={"seconds": 1})
    data = json.dumps([
        {"org": "acme-health", "workflow": "code", "external_id": "new-1"},
        {"org": "acme-health", "workflow": "code", "external_id": "taken", "payload": {"seconds": 2}},
        {"org": "acme-health", "workflow": "code", "external_id": "new-2"},
        {"org": "acme-health", "workflow": "code", "priority": "maybe"},  # "yes" is a spelling of true
    ]).encode()
    job = importing.import_run(import_create(filename="a.json", data=data, batch_size=10).pk)
    assert [e["row"] for e in job.errors] == [2, 4]
    assert "already used by chart" in job.errors[0]["message"]
    assert job.errors[1]["message"] == "priority: must be true or false, got 'maybe'."
    assert sorted(Chart.objects.values_list("external_id", flat=True)) == ["new-1", "new-2", "taken"]


def test_a_crash_between_batches_is_reported_and_resume_imports_the_rest_exactly_once(acme, code, monkeypatch):
    data = _csv("org,workflow", *["acme-health,code"] * 10)  # no external ids: a rerun would duplicate
    job = import_create(filename="c.csv", data=data, batch_size=4)
    real = importing.submit_batch
    calls = {"n": 0}

    def flaky(rows):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("database went away")
        return real(rows)

    monkeypatch.setattr(importing, "submit_batch", flaky)
    with pytest.raises(RuntimeError):
        tasks.import_charts(job.pk)
    job.refresh_from_db()
    assert (job.status, job.next_row, job.created_count) == (ImportStatus.FAILED, 4, 4)
    assert Chart.objects.count() == 4  # the failed batch left nothing behind
    assert "Stopped after row 4 of 10: RuntimeError: database went away" in job.message
    assert "'Resume' continues at row 5" in job.message

    import_resume(import_job=job)
    job = importing.import_run(job.pk)
    assert (job.status, job.next_row, job.created_count, job.error_count) == (ImportStatus.SUCCEEDED, 10, 10, 0)
    assert Chart.objects.count() == 10


def test_two_runners_of_one_import_share_its_batches_and_never_repeat_one(acme, code):
    """A "Resume" while the first runner is still going: the second one takes the
    remaining batches, the first one stops, every row is imported once."""
    job = import_create(filename="c.csv", data=_csv("org,workflow", *["acme-health,code"] * 10), batch_size=3)
    second: list[ImportJob] = []

    def start_another_runner(progress: ImportJob) -> None:
        if not second:
            second.append(importing.import_run(job.pk))

    first = importing.import_run(job.pk, on_batch=start_another_runner)
    assert (second[0].status, second[0].created_count) == (ImportStatus.SUCCEEDED, 10)
    assert (first.status, first.next_row, first.created_count) == (ImportStatus.SUCCEEDED, 10, 10)
    assert Chart.objects.count() == 10


def test_an_unreadable_file_fails_with_nothing_imported(acme, code):
    job = importing.import_run(import_create(filename="x.json", data=b"[{").pk)
    assert job.status == ImportStatus.FAILED
    assert job.message.startswith("Nothing imported: not valid JSON")
    assert Chart.objects.count() == 0


# --- through the admin and rq, with a real Redis -------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_ten_thousand_rows_uploaded_in_the_admin_are_imported_by_an_rq_job(client, run_jobs, capsys):
    root = make_user("root", superuser=True)
    orgs = [make_org(f"Bulk {i}") for i in range(5)]
    make_workflow("code")
    make_workflow("review")
    lines = ["org,workflow,external_id,payload,priority"]
    bad_rows = {}
    for i in range(1, 10_001):
        org = orgs[i % 5].slug
        if i % 1000 == 0:
            lines.append(f"{org},no-such-workflow,r{i},,")
            bad_rows[i] = "workflow: unknown workflow 'no-such-workflow'."
        elif i % 1000 == 500:
            lines.append(f"{org},code,r{i},{{oops,")
            bad_rows[i] = "payload: not valid JSON"
        else:
            wf = "code" if i % 3 else "review"
            lines.append(f"{org},{wf},r{i},\"{{\"\"seconds\"\": {i % 60}}}\",{'true' if i % 997 == 0 else ''}")
    data = ("\n".join(lines) + "\n").encode()

    client.force_login(root)
    response = client.post(
        reverse("admin:jobs_importjob_add"),
        {"file": SimpleUploadedFile("bulk.csv", data, content_type="text/csv"), "batch_size": 500},
    )
    job = ImportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("admin:jobs_importjob_change",
                                                                            args=[job.pk])
    assert job.rq_job_id, job.message  # queued on commit

    started = time.monotonic()
    run_jobs()
    elapsed = time.monotonic() - started

    job.refresh_from_db()
    assert job.status == ImportStatus.PARTIAL, job.message
    assert (job.total_rows, job.next_row, job.error_count) == (10_000, 10_000, len(bad_rows))
    assert job.created_count == 10_000 - len(bad_rows) == Chart.objects.count()
    assert [e["row"] for e in job.errors] == sorted(bad_rows)
    for error in job.errors:
        assert error["message"].startswith(bad_rows[error["row"]])
    assert Chart.objects.filter(priority=True).count() == 10
    with capsys.disabled():
        print(f"\n[figure] 10,000-row CSV import (batches of 500, {job.error_count} bad rows): {elapsed:.1f} s")

    page = client.get(reverse("admin:jobs_importjob_change", args=[job.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert "100%" in body and "no-such-workflow" in body and job.rq_job_id in body


@pytest.mark.django_db
def test_the_upload_form_refuses_an_empty_file(client):
    client.force_login(make_user("root", superuser=True))
    response = client.post(reverse("admin:jobs_importjob_add"),
                           {"file": SimpleUploadedFile("e.csv", b""), "batch_size": 500})
    assert response.status_code == 200
    assert ImportJob.objects.count() == 0
    assert "empty" in response.content.decode()


def test_an_import_carries_due_times_and_a_bad_one_is_reported_naming_the_field(acme, code):
    data = _csv("org,workflow,external_id,due_at",
                "acme-health,code,d-1,2030-01-01T17:00:00Z",
                "acme-health,code,d-2,next week",
                "acme-health,code,d-3,")
    job = importing.import_run(import_create(filename="d.csv", data=data, batch_size=10).pk)
    assert [(e["row"], e["message"].split()[0]) for e in job.errors] == [(2, "due_at")]
    got = dict(Chart.objects.values_list("external_id", "due_explicit"))
    assert got == {"d-1": True, "d-3": False}
    assert Chart.objects.get(external_id="d-1").due_at.isoformat() == "2030-01-01T17:00:00+00:00"
