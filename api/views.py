"""The producer API, ``/api/v1/`` (docs/api.md), on django-ninja.

The org comes from the key; every write goes through the charts' services
(``chart_submit``, ``chart_submit_many``, ``chart_cancel``), so the API validates, notifies
and audits exactly as the other doors do. The one import of the scheduler's own package
(``control.audit``, for naming the key in the cancel's audit entry) is here.
"""
from __future__ import annotations

import json
import logging
import re
from contextlib import nullcontext
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import OperationalError, transaction
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Header, NinjaAPI, Path, Query, Swagger
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser

from api import charts as described
from api import jsonbody
from api.auth import KeyAuth, unauthorized
from api.idempotency import idempotent
from api.problems import CONTENT_TYPE, Problem, from_ninja, from_validation
from api.schemas import BatchIn, BatchOut, ChartIn, ChartList, ChartOut, ProblemOut, StatusOut
from charts import services as chart_services
from charts.models import Chart, ChartState
from common.validation import MAX_ID, check_text
from charts import selectors
from orgs.models import Org, Scope
from control import audit  # the API's one import of it

log = logging.getLogger(__name__)

PAGE_DEFAULT, PAGE_MAX = 100, 500
_CURSOR = re.compile(r"[0-9]{1,16}")


class BodyNotJson(ValueError):
    pass


class JsonParser(Parser):
    """The body as UTF-8 JSON. NaN and Infinity are read (as Python's json reads them) so
    that the services refuse them naming where they are, as they do at every door."""

    def parse_body(self, request: HttpRequest) -> Any:
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyNotJson(f"body: not UTF-8 ({exc.reason} at byte {exc.start}).") from None
        try:
            if request.path.rstrip("/").endswith("/charts/batch"):  # counted before it is built
                return jsonbody.loads_batch(text, settings.FAIRSCHED_API_BATCH_MAX)
            return json.loads(text)
        except jsonbody.BodyRefused:
            raise
        except RecursionError:
            raise BodyNotJson("body: nested too deeply.") from None
        except ValueError as exc:
            raise BodyNotJson(f"body: not valid JSON ({exc}).") from None


def _parameter_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """The parameters the views check themselves (their own messages), as the schema must say
    them: what it allows is answered, what it refuses is refused (schemathesis checks both)."""
    return {
        ("header", "Idempotency-Key"): {"type": "string", "pattern": IDEMPOTENCY_KEY_PATTERN},
        ("query", "state"): {"type": "string", "enum": list(ChartState.values)},
        ("query", "cursor"): {"type": "string", "pattern": f"^{_CURSOR.pattern}$"},
    }


class Api(NinjaAPI):
    def get_openapi_schema(self, *args, **kwargs):
        """Errors are ``application/problem+json`` (the generated schema says application/json);
        the parameters the views check themselves say what the views accept."""
        schema = super().get_openapi_schema(*args, **kwargs)
        exact = _parameter_schemas()
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                for parameter in operation.get("parameters") or []:
                    if (parameter.get("in"), parameter.get("name")) in exact:
                        parameter["schema"] = exact[(parameter["in"], parameter["name"])]
                for code, response in (operation.get("responses") or {}).items():
                    content = response.get("content") or {}
                    if str(code).startswith(("4", "5")) and "application/json" in content:
                        response["content"] = {CONTENT_TYPE: content.pop("application/json")}
        return schema


api = Api(
    title="Fairsched producer API", version="1", urls_namespace="api-v1", parser=JsonParser(),
    docs=Swagger(settings={"persistAuthorization": True}), docs_url="/docs", openapi_url="/openapi.json",
    description=("Submit charts, follow them, cancel them. Authenticate with `Authorization: Bearer <key>` "
                 "(`manage.py orgtoken <org slug> <name> --scope submit`). Errors are RFC 9457 problem details. "
                 "Send `Idempotency-Key` to retry a POST safely. The guide: docs/api.md."),
)
READ, SUBMIT = KeyAuth(Scope.READ), KeyAuth(Scope.SUBMIT)
ERRORS = {code: ProblemOut for code in (400, 401, 403, 404, 409, 413, 415, 422, 429)}
# What key_of (api/idempotency.py) accepts, said by the schema (schemathesis checks both ways):
# 1 to 255 printable ASCII characters, first and last not a space, or the same in double
# quotes (the draft's form, "" is no key); trailing blanks are HTTP's, not the key's.
IDEMPOTENCY_KEY_PATTERN = r'^(?!""[ \t]*$)(?:"[ -~]{1,255}"|[!-~](?:[ -~]{0,253}[!-~])?)[ \t]*$'
IDEMPOTENCY_KEY = Header(None, alias="Idempotency-Key", description=(
    "Any unique string (a UUID): a retry with the same key and body gets the first answer, and nothing runs "
    "twice; kept 24 h. The same key with another body: 422; while the first is in flight: 409."))


# --- errors: every one is problem+json ------------------------------------------------------


@api.exception_handler(Problem)
def _problem(request, exc: Problem):
    return exc.response(request)


@api.exception_handler(NinjaValidationError)
def _invalid(request, exc: NinjaValidationError):
    return from_ninja(exc.errors).response(request)


@api.exception_handler(AuthenticationError)
def _unauthorized(request, exc):
    return unauthorized(request).response(request)


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    cause = exc.__cause__
    if isinstance(cause, jsonbody.BodyRefused):  # refused while it was read (a batch too long)
        return cause.problem.response(request)
    if exc.status_code == 400 and cause is not None:  # the body could not be parsed
        message = str(cause) if isinstance(cause, BodyNotJson) else f"body: not valid JSON ({cause})."
        return Problem(400, message, kind="bad-request", errors={"body": [message]}).response(request)
    return Problem(exc.status_code, str(exc)).response(request)


@api.exception_handler(Http404)
def _not_found(request, exc):
    return Problem(404, "No such chart.", kind="not-found").response(request)


@api.exception_handler(ValidationError)
def _refused(request, exc: ValidationError):
    return from_validation(exc).response(request)


@api.exception_handler(Exception)
def _failed(request, exc: Exception):
    if isinstance(exc, OperationalError):  # a locked or unreachable database: say when to retry
        log.warning("API %s %s: database unavailable: %s", request.method, request.path, exc)
        return Problem(503, "The database is busy or unreachable; retry.", kind="unavailable",
                       headers={"Retry-After": "1"}).response(request)
    log.exception("API %s %s failed", request.method, request.path)
    return Problem(500, "Internal error; it is logged.").response(request)


# --- helpers -----------------------------------------------------------------------------


def _json(data: Any, status: int = 200, location: str | None = None) -> HttpResponse:
    response = HttpResponse(json.dumps(data, cls=DjangoJSONEncoder, separators=(",", ":")), status=status,
                            content_type="application/json")
    if location:
        response["Location"] = location
    response["Cache-Control"] = "no-store"
    return response


def _own_chart(request: HttpRequest, chart_id: int) -> Chart:
    chart = (Chart.objects.select_related("workflow").filter(pk=chart_id, org_id=request.auth.org_id).first())
    if chart is None:  # another org's chart is no chart at all
        raise Problem(404, f"No chart #{chart_id} in your org.", kind="not-found")
    return chart


def _bounded_workflow(value: Any, field: str) -> None:
    """A workflow given by id must be an id a database can compare (the service's own words)."""
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= MAX_ID:
        raise ValidationError({field: f"{field}: unknown workflow {value!r}."})


def _check_cap(org, adding: int, *, external_ids: list[str] | None = None) -> None:
    """``Org.max_queued``: refuse what would take the org's queued charts past its cap (429).
    Counted up to the cap only (bounded whatever the backlog), inside the caller's write
    transaction with the org's row locked (``FOR NO KEY UPDATE``: the charts' inserts still
    reference it) until that transaction ends: a capped org's submissions take turns from the
    count to the commit, so concurrent ones cannot pass the cap together (three batches of 1,000
    under a cap of queued + 1,000 all passed it). SQLite's IMMEDIATE transactions take turns
    already; an org without a cap locks nothing."""
    if org.max_queued is None or adding <= 0:
        return
    cap = Org.objects.select_for_update(no_key=True).filter(pk=org.pk).values_list("max_queued", flat=True).first()
    if cap is None:
        return
    if external_ids and Chart.objects.filter(org=org, external_id__in=external_ids).count() == len(external_ids):
        return  # resubmissions of charts already there add nothing
    queued = Chart.objects.filter(org=org, state=ChartState.QUEUED)[:cap + 1].count()
    if queued + adding > cap:
        shown = f"{cap:,}+" if queued > cap else f"{queued:,}"
        message = (f"max_queued: {org.name} has {shown} queued charts and a cap of {cap:,} (Org.max_queued); "
                   f"{'this chart' if adding == 1 else f'these {adding:,} charts'} would pass it. "
                   "Retry when charts have started.")
        raise Problem(429, message, kind="queue-cap", errors={"max_queued": [message]}, max_queued=cap,
                      queued=queued, headers={"Retry-After": "30"})


def _ext(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    return text or None


# --- endpoints ---------------------------------------------------------------------------


@api.post("/charts", auth=SUBMIT, response={200: ChartOut, 201: ChartOut, **ERRORS}, tags=["charts"],
          summary="Submit one chart")
def submit(request: HttpRequest, chart: ChartIn, idempotency_key: str | None = IDEMPOTENCY_KEY):
    """The org is the key's. 201 with the chart and its `Location`; 200 with the chart already
    submitted when `external_id` repeats with the same workflow and payload."""
    org = request.auth.org

    def work() -> HttpResponse:
        _bounded_workflow(chart.workflow, "workflow")
        ext = _ext(chart.external_id)
        try:
            # The cap is counted in the transaction that writes. An org without one needs none:
            # the chart is one INSERT (its own transaction, or a savepoint of the Idempotency-Key's).
            with transaction.atomic() if org.max_queued is not None else nullcontext():
                _check_cap(org, 1, external_ids=[ext] if ext else None)
                row, fresh = chart_services.chart_submit_created(
                    org=org, workflow=chart.workflow, payload=chart.payload, external_id=chart.external_id,
                    priority=chart.priority, due_at=chart.due_at, org_is_row=True)  # read with the key
        except ValidationError as exc:
            raise from_validation(exc) from None
        body = described.describe([row], placed=not fresh)[0]
        return _json(body, 201 if fresh else 200, location=described.url(row.pk))

    return idempotent(request, org.pk, work)


@api.post("/charts/batch", auth=SUBMIT, response={200: BatchOut, 201: BatchOut, **ERRORS}, tags=["charts"],
          summary="Submit many charts, all or nothing")
def submit_batch(request: HttpRequest, batch: BatchIn, idempotency_key: str | None = IDEMPOTENCY_KEY):
    """Up to `FAIRSCHED_API_BATCH_MAX` (1,000) charts. Every item is checked first; an error names the
    item (`charts[12].workflow`) and nothing is written. 201 when any chart was created."""
    org = request.auth.org
    items = batch.charts
    limit = settings.FAIRSCHED_API_BATCH_MAX
    if len(items) > limit:  # api/jsonbody.py refused it while reading: a limit changed meanwhile
        raise jsonbody.too_many(limit)

    def work() -> HttpResponse:
        rows = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValidationError({f"charts[{i}]": f"charts[{i}]: must be an object with workflow."})
            unknown = sorted(set(item) - {"workflow", "payload", "external_id", "priority", "due_at"})
            if unknown:
                field = f"charts[{i}].{unknown[0]}"
                words = "the org is the key's" if unknown[0] == "org" else "unknown field"
                raise ValidationError({field: f"{field}: {words}."})
            _bounded_workflow(item.get("workflow"), f"charts[{i}].workflow")
            rows.append({**item, "org": org})
        exts = [_ext(r.get("external_id")) for r in rows]
        try:
            with transaction.atomic():  # the cap is counted in the transaction that writes
                _check_cap(org, len(rows), external_ids=exts if all(exts) else None)
                result = chart_services.chart_submit_many(charts=rows)
        except ValidationError as exc:
            raise from_validation(exc) from None
        existing = (dict(Chart.objects.filter(pk__in=result.existing).values_list("external_id", "pk"))
                    if result.existing else {})
        created = iter(result.created)
        out = []
        for item in rows:
            ext = _ext(item.get("external_id"))
            if ext is not None and ext in existing:
                out.append({"id": existing[ext], "external_id": ext, "created": False})
            else:
                out.append({"id": next(created), "external_id": ext, "created": True})
        status = 201 if result.created else 200
        return _json({"created": len(result.created), "existing": len(result.existing), "charts": out}, status)

    return idempotent(request, org.pk, work)


@api.get("/charts/{chart_id}", auth=READ, response={200: ChartOut, **ERRORS}, tags=["charts"],
         summary="One chart: its state, place and ETA")
def chart_detail(request: HttpRequest, chart_id: int = Path(..., ge=1, le=MAX_ID)):
    """`position` and the ETAs come from the scheduler's latest snapshot; when none is known they are
    null and `no_eta` says why. Another org's chart is a 404."""
    return _json(described.describe([_own_chart(request, chart_id)])[0])


@api.get("/charts", auth=READ, response={200: ChartList, **ERRORS}, tags=["charts"],
         summary="The org's charts, newest first")
def chart_list(request: HttpRequest, external_id: str | None = Query(None, max_length=chart_services.EXTERNAL_ID_MAX),
               state: str | None = Query(None, description="queued, running, succeeded, failed or cancelled"),
               cursor: str | None = Query(None, description="`next` of the previous page"),
               limit: int = Query(PAGE_DEFAULT, ge=1, le=PAGE_MAX)):
    """Keyset pagination: pass the page's `next` as `cursor` for the next page (stable while charts
    arrive)."""
    qs = Chart.objects.filter(org_id=request.auth.org_id).select_related("workflow")
    if external_id is not None:
        try:
            check_text("external_id", external_id)
        except ValidationError as exc:
            raise from_validation(exc, status=400, kind="bad-request") from None
        qs = qs.filter(external_id=external_id.strip())
    if state is not None:
        if state not in ChartState.values:
            message = f"state: one of {', '.join(ChartState.values)}, got {state[:40]!r}."
            raise Problem(400, message, kind="bad-request", errors={"state": [message]})
        qs = qs.filter(state=state)
    if cursor is not None:
        if not _CURSOR.fullmatch(cursor):  # the schema's pattern: every cursor it allows is answered
            message = f"cursor: not a cursor this API gave (use the page's next), got {cursor[:40]!r}."
            raise Problem(400, message, kind="bad-request", errors={"cursor": [message]})
        qs = qs.filter(pk__lt=min(int(cursor), MAX_ID + 1))  # 0: an empty page
    rows = list(qs.order_by("-id")[:limit + 1])
    page, more = rows[:limit], len(rows) > limit
    return _json({"charts": described.describe(page), "next": str(page[-1].pk) if more else None})


@api.post("/charts/{chart_id}/cancel", auth=SUBMIT, response={200: ChartOut, 202: ChartOut, **ERRORS},
          tags=["charts"], summary="Cancel a chart")
def cancel(request: HttpRequest, chart_id: int = Path(..., ge=1, le=MAX_ID),
           idempotency_key: str | None = IDEMPOTENCY_KEY):
    """The cockpit's cancel (`chart_cancel`, the same audit entry, naming the key): a queued chart is
    cancelled at once (200); a running one is marked and its workflow cancelled by the scheduler (202,
    `cancel_requested`). A finished one is a 409."""
    key = request.auth
    chart = _own_chart(request, chart_id)

    def work() -> HttpResponse:
        try:
            # the actor is the key, not "system": the service writes its entry so
            row = chart_services.chart_cancel(chart=chart.pk, actor=audit.NamedActor(f"API key {key.prefix}… ({key.name})"))
        except ValidationError as exc:
            raise from_validation(exc, status=409, kind="conflict") from None
        row = Chart.objects.select_related("workflow").get(pk=row.pk)
        return _json(described.describe([row])[0], 200 if row.state == ChartState.CANCELLED else 202)

    return idempotent(request, key.org_id, work)


@api.get("/status", auth=READ, response={200: StatusOut, **ERRORS}, tags=["org"],
         summary="The org's counts and clear-time (as status.json)")
def status(request: HttpRequest, offset: int = Query(0, ge=0, le=10**9), limit: int = Query(100, ge=1, le=5000),
           external_id: str | None = Query(None, max_length=chart_services.EXTERNAL_ID_MAX)):
    """What `/orgs/<slug>/status.json` answers: the org's counts, clear-time (or why there is none) and a
    page of its charts with positions and ETAs."""
    if external_id is not None:
        try:
            check_text("external_id", external_id)
        except ValidationError as exc:
            raise from_validation(exc, status=400, kind="bad-request") from None
    return _json(selectors.org_status(request.auth.org, offset=offset, limit=limit,
                                      external_id=external_id.strip() if external_id else None))
