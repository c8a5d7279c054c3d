"""Bulk chart import: read a CSV or JSON file, validate every row, import in atomic batches.

The rule, for a file of N rows:

1. The file as a whole must be readable (encoding, CSV header, JSON shape). If it
   is not, the import fails and nothing is imported.
2. Every row is checked before anything is written: required fields, payload JSON,
   priority, unknown org or workflow (one query each for the whole file), an
   ``external_id`` repeated within the file (per org).
3. The valid rows are imported through ``chart_submit_many`` in batches of
   ``batch_size``; each batch is one transaction together with the import's
   progress (``next_row``, counts, the batch's row errors). A row the service
   refuses at that point (an ``external_id`` that now conflicts with an existing
   chart, say) is reported against its row and the rest of its batch is retried
   without it. A batch the database itself refuses (a value that got past the
   checks) is retried row by row, each row in its own savepoint, so only the
   refused row is lost and reported.

So every valid row is imported, every invalid row has an error naming it, and
a crash between batches leaves a job whose counts describe exactly what is in
the database; resuming it continues at ``next_row``. A row whose
``(org, external_id)`` already exists with the same content counts as
``existing`` (re-importing a file is harmless).
"""
from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from charts.services import chart_submit_many
from common.validation import parse_bool
from jobs.models import ImportJob, ImportStatus
from orgs.models import Org, Workflow

log = logging.getLogger(__name__)

COLUMNS = ("org", "workflow", "external_id", "payload", "priority", "due_at")
REQUIRED = ("org", "workflow")
_ITEM_KEY = re.compile(r"^charts\[(\d+)\]\.?")


class ImportFileError(ValueError):
    """The file as a whole cannot be read; the message says what to fix."""


@dataclass
class Row:
    """One data row: ``number`` counts from 1 (a CSV's header line is not a row)."""

    number: int
    item: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


# --- reading ------------------------------------------------------------------------


def detect_format(filename: str, data: bytes) -> str:
    name = filename.lower()
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".json"):
        return "json"
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    return "json" if head[:1] in (b"[", b"{") else "csv"


def parse_rows(data: bytes, fmt: str) -> list[Row]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFileError(f"the file is not UTF-8 text ({exc}).") from None
    if fmt == "csv":
        return _parse_csv(text)
    if fmt == "json":
        return _parse_json(text)
    raise ImportFileError(f"unknown format {fmt!r}: use csv or json.")


def _parse_csv(text: str) -> list[Row]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    if not header:
        raise ImportFileError("the CSV file is empty: its first line must name the columns "
                              f"({', '.join(COLUMNS)}).")
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise ImportFileError(f"unknown column(s) {', '.join(map(repr, unknown))}; the columns are "
                              f"{', '.join(COLUMNS)} (org and workflow required).")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ImportFileError(f"missing column(s) {', '.join(missing)}; the columns are {', '.join(COLUMNS)}.")
    reader.fieldnames = header
    rows: list[Row] = []
    try:
        for number, raw in enumerate(reader, start=1):
            rows.append(_csv_row(number, raw))
    except csv.Error as exc:
        raise ImportFileError(f"CSV error after row {len(rows)}: {exc}.") from None
    return rows


def _csv_row(number: int, raw: Mapping[str | None, Any]) -> Row:
    if raw.get(None):
        return Row(number, error=f"more values than the {len(raw) - 1} columns of the header.")
    values = {k: (v or "").strip() for k, v in raw.items() if k is not None}
    item: dict[str, Any] = {"org": values.get("org", ""), "workflow": values.get("workflow", "")}
    if values.get("external_id"):
        item["external_id"] = values["external_id"]
    if values.get("due_at"):
        item["due_at"] = values["due_at"]  # checked by chart_submit_many (charts[i].due_at)
    payload = values.get("payload", "")
    if payload:
        try:
            item["payload"] = json.loads(payload)
        except ValueError as exc:
            return Row(number, item, f"payload: not valid JSON ({exc}).")
    try:  # the same spellings as chart_submit and chart_submit_many
        item["priority"] = parse_bool("priority", values.get("priority", ""))
    except ValidationError as exc:
        return Row(number, item, " ".join(exc.messages))
    return Row(number, item)


def _parse_json(text: str) -> list[Row]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ImportFileError(f"not valid JSON ({exc}).") from None
    if isinstance(doc, Mapping) and isinstance(doc.get("charts"), list):
        doc = doc["charts"]
    if not isinstance(doc, list):
        raise ImportFileError('expected a JSON list of charts, or an object {"charts": [...]}.')
    rows: list[Row] = []
    for number, raw in enumerate(doc, start=1):
        if not isinstance(raw, Mapping):
            rows.append(Row(number, error=f"must be an object with org and workflow, got {type(raw).__name__}."))
            continue
        unknown = sorted(str(k) for k in raw if k not in COLUMNS)
        if unknown:
            rows.append(Row(number, dict(raw), f"unknown field(s) {', '.join(unknown)}; "
                                               f"the fields are {', '.join(COLUMNS)}."))
            continue
        rows.append(Row(number, {k: raw[k] for k in COLUMNS if k in raw}))
    return rows


# --- checking (before anything is written) ---------------------------------------------


def _ref_key(value: Any) -> tuple[str, Any] | None:
    """How a reference is looked up, as the services do: int / digit string -> pk, else name/slug."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("pk", value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        return ("pk", int(text)) if text.isdigit() else ("name", text)
    return None


def check_rows(rows: list[Row]) -> None:
    """Mark rows with an unknown org or workflow, a missing field or a repeated external_id."""
    refs: dict[str, set[tuple[str, Any]]] = {"org": set(), "workflow": set()}
    for row in rows:
        if row.error:
            continue
        for name in REQUIRED:
            if row.item.get(name) in (None, ""):
                row.error = f"{name}: is required."
                break
            key = _ref_key(row.item[name])
            if key is None:
                row.error = f"{name}: expected a name or an id, got {row.item[name]!r}."
                break
            refs[name].add(key)
    orgs = _resolve(Org, "slug", refs["org"])
    workflows = _resolve(Workflow, "name", refs["workflow"])
    seen: dict[tuple[int, str], int] = {}
    for row in rows:
        if row.error:
            continue
        org_pk = orgs.get(_ref_key(row.item["org"]))
        if org_pk is None:
            row.error = f"org: org {row.item['org']!r} does not exist."
            continue
        wf_pk = workflows.get(_ref_key(row.item["workflow"]))
        if wf_pk is None:
            row.error = f"workflow: unknown workflow {row.item['workflow']!r}."
            continue
        row.item["org"], row.item["workflow"] = org_pk, wf_pk
        ext = row.item.get("external_id")
        if ext is not None and str(ext).strip():
            key = (org_pk, str(ext).strip())
            if key in seen:
                row.error = f"external_id: {key[1]!r} repeats row {seen[key]}."
                continue
            seen[key] = row.number


def _resolve(model, name_field: str, keys: set[tuple[str, Any]]) -> dict[tuple[str, Any], int]:
    found: dict[tuple[str, Any], int] = {}
    pks = [v for kind, v in keys if kind == "pk"]
    names = [v for kind, v in keys if kind == "name"]
    for start in range(0, len(pks), 500):
        for pk in model.objects.filter(pk__in=pks[start:start + 500]).values_list("pk", flat=True):
            found[("pk", pk)] = pk
    for start in range(0, len(names), 500):
        chunk = names[start:start + 500]
        for pk, name in model.objects.filter(**{f"{name_field}__in": chunk}).values_list("pk", name_field):
            found[("name", name)] = pk
    return found


# --- importing ----------------------------------------------------------------------


@dataclass
class BatchOutcome:
    created: int = 0
    existing: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)


def submit_batch(rows: list[Row]) -> BatchOutcome:
    """Submit valid rows through ``chart_submit_many``; a refused row is reported and
    the others resubmitted without it. Runs inside the caller's transaction."""
    outcome = BatchOutcome()
    pending = [r for r in rows if not r.error]
    attempts = 0
    while pending:
        attempts += 1
        try:
            with transaction.atomic():
                result = chart_submit_many(charts=[r.item for r in pending])
        except ValidationError as exc:
            index, message = _refused_item(exc)
            if index is None or index >= len(pending) or attempts > len(rows) + 2:
                return _submit_one_by_one(pending, outcome)
            outcome.errors.append((pending[index].number, message))
            del pending[index]
            continue
        except IntegrityError:
            # A concurrent writer took an external_id between the check and the insert:
            # the next attempt sees it and reports or counts it.
            if attempts > 2:
                return _submit_one_by_one(pending, outcome)
            continue
        except DatabaseError as exc:
            # A row the database refuses (a value no validation foresaw): find it row by row,
            # each in its own savepoint, so it is reported and the rest of the batch goes in.
            log.warning("an import batch was refused by the database (%s); retrying it row by row", exc)
            return _submit_one_by_one(pending, outcome)
        outcome.created += len(result.created)
        outcome.existing += len(result.existing)
        break
    return outcome


def _submit_one_by_one(rows: list[Row], outcome: BatchOutcome) -> BatchOutcome:
    for row in rows:
        try:
            with transaction.atomic():
                result = chart_submit_many(charts=[row.item])
        except ValidationError as exc:
            outcome.errors.append((row.number, _refused_item(exc)[1]))
        except DatabaseError as exc:
            outcome.errors.append((row.number, f"refused by the database: {str(exc).strip()[:500]}"))
        else:
            outcome.created += len(result.created)
            outcome.existing += len(result.existing)
    return outcome


def _refused_item(exc: ValidationError) -> tuple[int | None, str]:
    """``(index, message)`` from the service's ``charts[i].field: ...`` error."""
    if hasattr(exc, "error_dict"):
        for key, messages in exc.message_dict.items():
            m = _ITEM_KEY.match(key)
            text = messages[0] if messages else key
            text = re.sub(r"^charts\[\d+\]\.?", "", text).lstrip(": ")
            if m:
                return int(m.group(1)), text
            return None, text
    return None, "; ".join(exc.messages)


def import_run(import_id: int, *, on_batch: Callable[[ImportJob], None] | None = None) -> ImportJob:
    """Run (or resume) an import to the end. Safe to call twice: a finished job is left alone."""
    job = ImportJob.objects.get(pk=import_id)
    if job.is_final:
        return job
    now = timezone.now()
    ImportJob.objects.filter(pk=job.pk).update(status=ImportStatus.RUNNING, started_at=job.started_at or now,
                                               heartbeat_at=now)
    try:
        rows = parse_rows(bytes(job.data), job.format)
    except ImportFileError as exc:
        ImportJob.objects.filter(pk=job.pk).update(
            status=ImportStatus.FAILED, message=f"Nothing imported: {exc}", finished_at=timezone.now()
        )
        log.info("import #%s failed: %s", job.pk, exc)
        return ImportJob.objects.get(pk=job.pk)
    check_rows(rows)
    ImportJob.objects.filter(pk=job.pk).update(total_rows=len(rows), heartbeat_at=timezone.now())
    batch = max(1, job.batch_size)
    while True:
        # The job row is locked for the batch: two runners of one import (a "Resume"
        # while the first is still going) share the batches instead of repeating them.
        with transaction.atomic():
            locked = ImportJob.objects.select_for_update().get(pk=job.pk)
            start = locked.next_row
            if start >= len(rows) or locked.is_final:
                break
            chunk = rows[start:start + batch]
            outcome = submit_batch(chunk)
            errors = sorted([(r.number, r.error) for r in chunk if r.error] + outcome.errors)
            _record_batch(locked, next_row=start + len(chunk), outcome=outcome, errors=errors)
        if on_batch is not None:
            on_batch(ImportJob.objects.get(pk=job.pk))
    job = ImportJob.objects.get(pk=job.pk)
    if job.is_final:
        return job
    job.status = ImportStatus.PARTIAL if job.error_count else ImportStatus.SUCCEEDED
    job.finished_at = timezone.now()
    job.message = _summary(job)
    job.save(update_fields=["status", "finished_at", "message"])
    log.info("import #%s %s: %s", job.pk, job.status, job.message)
    return job


def _record_batch(job: ImportJob, *, next_row: int, outcome: BatchOutcome, errors: list[tuple[int, str]]) -> None:
    room = max(0, ImportJob.MAX_STORED_ERRORS - len(job.errors))
    job.errors = job.errors + [{"row": n, "message": m} for n, m in errors[:room]]
    job.next_row = next_row
    job.created_count += outcome.created
    job.existing_count += outcome.existing
    job.error_count += len(errors)
    job.heartbeat_at = timezone.now()
    job.save(update_fields=["errors", "next_row", "created_count", "existing_count", "error_count", "heartbeat_at"])


def _summary(job: ImportJob) -> str:
    parts = [f"{job.created_count} chart(s) created", f"{job.existing_count} already there",
             f"{job.error_count} row(s) refused"]
    text = ", ".join(parts) + f" of {job.total_rows} row(s)."
    if job.error_count > len(job.errors):
        text += f" The first {len(job.errors)} errors are listed."
    return text


def import_mark_failed(import_id: int, reason: str) -> None:
    """The job stopped on an unexpected error: say how far it got (the batches before are in)."""
    job = ImportJob.objects.filter(pk=import_id).first()
    if job is None or job.is_final:
        return
    ImportJob.objects.filter(pk=import_id).update(
        status=ImportStatus.FAILED, finished_at=timezone.now(),
        message=(f"Stopped after row {job.next_row} of {job.total_rows if job.total_rows is not None else '?'}: "
                 f"{reason}. The {job.created_count} chart(s) created before that are in; "
                 f"'Resume' continues at row {job.next_row + 1}."),
    )
