"""Writes to charts: the producer's submissions, the operator's controls and re-runs (the
scheduler's and the worker's writes as a chart runs are :mod:`charts.lifecycle`).

Every state change is a compare-and-set (``filter(pk=..., state=...).update(...)``)
so two writers racing on one chart (an operator pausing while the scheduler
dispatches) cannot both win. Each write notifies the scheduler on commit itself
(:func:`common.notify.notify`); a chart saved outside the services (a plain
``Chart.objects.create``, the admin) notifies through its ``post_save`` receiver
(``charts/signals.py``), once a transaction.
"""
from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from charts.lifecycle import count_finish
from charts.models import FINAL_STATES, Chart, ChartState
from common.bulk import insert_rows
from common.compiled import PkWhere
from common.insert_one import insert_one
from control import audit
from common.notify import ChartNote, ChartsNote, notify
from common.validation import check_json_document, check_text, parse_bool, parse_due_at
from orgs.models import Org, Workflow

EXTERNAL_ID_MAX = 200
BULK_BATCH = 1000
SUBMIT_ATTEMPTS = 3  # chart_submit_many's inserts, each after another's insert of its external ids


# --- helpers ----------------------------------------------------------------------


def _org(value: Org | int | str, field_name: str = "org") -> Org:
    """Resolve an org by instance, pk or slug, re-reading it (it may have been deleted)."""
    pk = value.pk if isinstance(value, Org) else None
    try:
        if pk is not None:
            return Org.objects.get(pk=pk)
        if isinstance(value, int) and not isinstance(value, bool):
            return Org.objects.get(pk=value)
        if isinstance(value, str) and value.strip() and "\x00" not in value:
            text = check_text(field_name, value).strip()  # a lone surrogate: refused, not a 500
            return Org.objects.get(pk=int(text)) if text.isdigit() else Org.objects.get(slug=text)
    except Org.DoesNotExist:
        pass
    raise ValidationError({field_name: f"{field_name}: org {value!r} does not exist (was it deleted?)."})


def _workflow(value: Workflow | int | str, field_name: str = "workflow") -> Workflow:
    try:
        if isinstance(value, Workflow):
            return Workflow.objects.get(pk=value.pk)
        if isinstance(value, int) and not isinstance(value, bool):
            return Workflow.objects.get(pk=value)
        if isinstance(value, str) and value.strip() and "\x00" not in value:  # PostgreSQL cannot compare a NUL
            # nor any database a lone surrogate ("\ud800" in JSON): refused naming the field, not a 500
            return Workflow.objects.get(name=check_text(field_name, value).strip())
    except Workflow.DoesNotExist:
        pass
    raise ValidationError({field_name: f"{field_name}: unknown workflow {value!r}."})


def _payload(value: Any, field_name: str = "payload") -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise ValidationError({field_name: f"{field_name}: not valid JSON ({exc})."}) from None
    if not isinstance(value, Mapping):
        raise ValidationError({field_name: f"{field_name}: must be a JSON object, got {type(value).__name__}."})
    check_json_document(field_name, value)  # size, NUL, NaN/Infinity: refused on every database
    return dict(value)


def _external_id(value: Any, field_name: str = "external_id") -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValidationError({field_name: f"{field_name}: must be text or a whole number, got {value!r}."})
    text = check_text(field_name, str(value)).strip()
    if not text:
        return None
    if len(text) > EXTERNAL_ID_MAX:
        raise ValidationError({field_name: f"{field_name}: longer than {EXTERNAL_ID_MAX} characters."})
    return text


def _get_chart(chart: Chart | int) -> Chart:
    pk = chart.pk if isinstance(chart, Chart) else chart
    try:
        return Chart.objects.get(pk=pk)
    except Chart.DoesNotExist:
        raise ValidationError({"chart": f"chart #{pk} does not exist."}) from None


def _cas(chart: Chart | int, *, expect: Mapping[str, Any], action: str, actor: Any = None,
         verb: str | None = None, **changes: Any) -> Chart:
    """Compare-and-set: apply ``changes`` only if the row still matches ``expect``.

    With ``verb`` ("Paused {}", filled with the chart's label) the change is recorded in the audit trail in the same
    transaction: the changed fields' values before and after.
    """
    pk = chart.pk if isinstance(chart, Chart) else chart
    with transaction.atomic():
        before = Chart.objects.filter(pk=pk, **expect).values(*changes).first() if verb else None
        updated = Chart.objects.filter(pk=pk, **expect).update(**changes, updated_at=timezone.now())
        if not updated:
            current = _get_chart(pk)
            wanted = ", ".join(f"{k.replace('__in', '')}={v}" for k, v in expect.items())
            raise ValidationError(
                {"state": f"cannot {action} chart #{pk}: it is {current.state}"
                          f"{' and paused' if current.paused else ''} (needs {wanted})."}
            )
        result = Chart.objects.select_related("org").get(pk=pk)
        if changes.get("state") in FINAL_STATES:
            count_finish(result.org_id, changes["state"])
        if verb:
            audit.record(actor=actor, action=action.replace(" ", "_"), chart=result,
                         summary=verb.format(audit.chart_label(result)),
                         before=before, after={k: getattr(result, k) for k in changes})
        notify(ChartNote(id=result.pk))
    return result


# --- producer ------------------------------------------------------------------


def chart_submit(**fields: Any) -> Chart:
    """Submit one chart: :func:`chart_submit_created`'s arguments and chart."""
    return chart_submit_created(**fields)[0]


def chart_submit_created(
    *,
    org: Org | int | str,
    workflow: Workflow | int | str,
    payload: Any = None,
    external_id: str | None = None,
    priority: bool | str = False,
    due_at: Any = None,
    org_is_row: bool = False,
) -> tuple[Chart, bool]:
    """Submit one chart; and whether this call created it. The same ``external_id``, workflow and
    payload again: the existing chart (False, the API's 200); other content: refused. Only the
    insert the database took says True (of concurrent identical submissions, one). ``priority``:
    :func:`common.validation.parse_bool`; ``due_at`` (datetime or ISO text), else creation + turnaround.

    ``org_is_row``: ``org`` is the org's row, read by the caller in this request (the API reads
    it with the key), so it is not read again; otherwise it is, for its current turnaround.

    The chart is one statement, ``INSERT ... ON CONFLICT DO NOTHING RETURNING id`` (with an
    ``external_id``; a plain ``INSERT`` without): the unique (org, external_id) decides between
    concurrent identical submissions, and the existing chart is read only when the insert found
    it. A workflow given by name is looked up by the insert itself (a subquery for
    ``workflow_id``); an unknown name leaves it NULL, which the database refuses, and only then is
    it looked up, to refuse it naming the field as before. Outside a transaction that statement is its own; inside one, under a savepoint, so that
    a refusal leaves the caller's transaction usable (docs/api.md, "Round trips")."""
    org_obj = org if org_is_row and isinstance(org, Org) else _org(org)
    name = _workflow_name(workflow)
    wf = None if name is not None else _workflow(workflow)  # by name: looked up in the insert
    data = _payload(payload)
    ext = _external_id(external_id)
    priority = parse_bool("priority", priority)
    due = parse_due_at("due_at", due_at)
    for _ in range(SUBMIT_ATTEMPTS):
        now = timezone.now()
        due_at_, explicit = Chart.derive_due(org_obj, now, due)  # org_obj is the org's row
        chart = Chart(
            org=org_obj, payload=data, external_id=ext, created_at=now,
            priority=priority, prioritized_at=now if priority else None, due_at=due_at_, due_explicit=explicit,
        )
        if wf is not None:
            chart.workflow = wf
        else:  # NULL for an unknown name: the NOT NULL refuses the row
            chart.workflow_id = PkWhere(Workflow, name=name)
        try:
            # its one CHECK (dispatched_cost >= 0) holds: NULL
            inserted = insert_one(chart, ignore_conflicts=ext is not None, returning=("workflow",))
        except IntegrityError as exc:
            if wf is None:  # the name unknown (refused as before), or added since: insert again
                wf = _workflow(workflow)
                continue
            # not the external id (a foreign key, say): never blame a field that is fine
            raise ValidationError({"__all__": f"the database refused the chart: {exc}"}) from None
        if inserted:
            if wf is None:  # the row the insert read, by its name: the caller's describe needs no read
                wf = Workflow.from_db(chart._state.db, ["id", "name"], [chart.workflow_id, name])
            chart.workflow = wf
            notify(ChartNote(id=chart.pk))
            return chart, True
        existing = Chart.objects.select_related("workflow").filter(org=org_obj, external_id=ext).first()
        if wf is None and (existing is None or existing.workflow.name != name):
            # an unknown name is refused here (SQLite's INSERT OR IGNORE skips a NULL workflow too)
            wf = _workflow(workflow)
        if existing is None:  # the chart that held the external id was deleted meanwhile: insert again
            continue
        if (wf is None or existing.workflow_id == wf.pk) and existing.payload == data:
            return existing, False
        raise ValidationError(
            {"external_id": f"external_id: {ext!r} is already used by chart #{existing.pk} of {org_obj.name} "
                            f"with a different workflow or payload."}
        )
    raise ValidationError({"external_id": f"external_id: {ext!r} is contended; retry."})


def _workflow_name(value: Any, field_name: str = "workflow") -> str | None:
    """A workflow given by name: the name :func:`_workflow` would look up; None for anything else."""
    if isinstance(value, str) and value.strip() and "\x00" not in value:
        return check_text(field_name, value).strip()
    return None


@dataclass
class BulkResult:
    created: list[int] = field(default_factory=list)
    existing: list[int] = field(default_factory=list)


def chart_submit_many(*, charts: Iterable[Mapping[str, Any]]) -> BulkResult:
    """Submit many charts at once, all or nothing.

    Each item is a mapping with ``org`` (instance, pk or slug), ``workflow``
    (instance, pk or name), and optional ``payload``, ``external_id``,
    ``priority``, ``due_at``. Every item is validated first; an error names the item
    (``charts[12].workflow: unknown workflow 'x'``) and nothing is written.
    Items whose (org, external_id) already exists with the same content are
    reported as ``existing``; a conflicting one is an error.
    """
    items = list(charts)
    org_cache: dict[Any, Org] = {}
    wf_cache: dict[Any, Workflow] = {}
    rows: list[dict[str, Any]] = []  # the new charts' column values (common/bulk.insert_rows)
    seen_ext: dict[tuple[int, str], int] = {}
    now = timezone.now()

    def cached(cache: dict[Any, Any], key: Any, resolve) -> Any:
        k = key.pk if hasattr(key, "pk") else key
        if not isinstance(k, Hashable):  # a list where a name belongs: resolve() names the field
            return resolve()
        if k not in cache:
            cache[k] = resolve()
        return cache[k]

    for i, item in enumerate(items):
        where = f"charts[{i}]"
        if not isinstance(item, Mapping):
            raise ValidationError({where: f"{where}: must be an object with org and workflow."})
        for required in ("org", "workflow"):
            if item.get(required) in (None, ""):
                raise ValidationError({f"{where}.{required}": f"{where}.{required}: is required."})
        org_obj = cached(org_cache, item["org"], lambda: _org(item["org"], f"{where}.org"))
        wf = cached(wf_cache, item["workflow"], lambda: _workflow(item["workflow"], f"{where}.workflow"))
        data = _payload(item.get("payload"), f"{where}.payload")
        ext = _external_id(item.get("external_id"), f"{where}.external_id")
        priority = parse_bool(f"{where}.priority", item.get("priority", False))
        if ext is not None:
            key = (org_obj.pk, ext)
            if key in seen_ext:
                raise ValidationError(
                    {f"{where}.external_id": f"{where}.external_id: {ext!r} repeats charts[{seen_ext[key]}]."}
                )
            seen_ext[key] = i
        due, explicit = Chart.derive_due(org_obj, now, parse_due_at(f"{where}.due_at", item.get("due_at")))
        rows.append({
            "org_id": org_obj.pk, "workflow_id": wf.pk, "payload": data, "external_id": ext, "created_at": now,
            "priority": priority, "prioritized_at": now if priority else None, "due_at": due, "due_explicit": explicit,
        })

    fresh, result = _split_existing(rows, set(seen_ext))
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                for start in range(0, len(fresh), BULK_BATCH):
                    # what bulk_create would write, without a model instance a row (common/bulk.py); no save()
                    result.created.extend(insert_rows(Chart, fresh[start:start + BULK_BATCH]))
                if fresh:
                    notify(ChartsNote.of(result.created))  # one note for them all
            return result
        except IntegrityError:
            # Another batch inserted some of these external ids since they were looked up: nothing
            # of this one was written; they are existing now. Nothing new (a CHECK constraint): raised.
            tried, (fresh, result) = len(fresh), _split_existing(rows, set(seen_ext))
            if len(fresh) == tried or attempt == SUBMIT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _split_existing(rows: list[dict[str, Any]], keys: set[tuple[int, str]]) -> tuple[list[dict[str, Any]], BulkResult]:
    """The rows to insert, and the charts already there (the same content; other content: refused)."""
    by_ext: dict[tuple[int, str], Chart] = {}
    for org_pk in {k[0] for k in keys}:
        exts = [k[1] for k in keys if k[0] == org_pk]
        for start in range(0, len(exts), BULK_BATCH):
            for chart in Chart.objects.filter(org_id=org_pk, external_id__in=exts[start:start + BULK_BATCH]):
                by_ext[(org_pk, chart.external_id)] = chart
    fresh, result = [], BulkResult()
    for i, row in enumerate(rows):
        found = by_ext.get((row["org_id"], row["external_id"])) if row["external_id"] else None
        if found is None:
            fresh.append(row)
        elif found.workflow_id == row["workflow_id"] and found.payload == row["payload"]:
            result.existing.append(found.pk)
        else:
            raise ValidationError({f"charts[{i}].external_id": (
                f"charts[{i}].external_id: {row['external_id']!r} is already used by chart #{found.pk} "
                f"with a different workflow or payload.")})
    return fresh, result


# --- operator controls ----------------------------------------------------------------


def chart_pause(*, chart: Chart | int, actor: Any = None) -> Chart:
    """Pause a queued chart: it leaves the order until resumed. Running work is never touched."""
    return _cas(chart, expect={"state": ChartState.QUEUED, "paused": False}, action="pause", paused=True,
                actor=actor, verb="Paused {}")


def chart_resume(*, chart: Chart | int, actor: Any = None) -> Chart:
    """Resume a paused chart: its org is re-ranked and it rejoins the order."""
    return _cas(chart, expect={"state": ChartState.QUEUED, "paused": True}, action="resume", paused=False,
                actor=actor, verb="Resumed {}")


def chart_prioritize(*, chart: Chart | int, actor: Any = None) -> Chart:
    """Move a queued chart into the priority tier (FIFO by when it was prioritised)."""
    return _cas(
        chart, expect={"state": ChartState.QUEUED, "priority": False}, action="prioritize",
        priority=True, prioritized_at=timezone.now(), actor=actor, verb="Prioritized {}",
    )


def chart_unprioritize(*, chart: Chart | int, actor: Any = None) -> Chart:
    return _cas(
        chart, expect={"state": ChartState.QUEUED, "priority": True}, action="unprioritize",
        priority=False, prioritized_at=None, actor=actor, verb="Unprioritized {}",
    )


def chart_move_to_front(*, chart: Chart | int, actor: Any = None) -> Chart:
    """Move a queued chart to the front of its own org's queue: it takes the org's next
    turn; no other org's turn moves."""
    return _cas(
        chart, expect={"state": ChartState.QUEUED}, action="move to front", moved_to_front_at=timezone.now(),
        actor=actor, verb="Moved {} to the front of its org's queue",
    )


def chart_cancel(*, chart: Chart | int, actor: Any = None) -> Chart:
    """Cancel a chart. A queued one is cancelled at once; a running one is marked
    ``cancel_requested`` and the scheduler cancels its Temporal workflow (the row
    becomes cancelled when Temporal confirms)."""
    current = _get_chart(chart)
    if current.state == ChartState.QUEUED:
        try:
            return _cas(
                current, expect={"state": ChartState.QUEUED}, action="cancel",
                state=ChartState.CANCELLED, finished_at=timezone.now(), actor=actor, verb="Cancelled {}",
            )
        except ValidationError:
            current = _get_chart(chart)  # dispatched meanwhile: cancel the running one
    if current.state == ChartState.RUNNING:
        return _cas(current, expect={"state": ChartState.RUNNING}, action="cancel", cancel_requested=True,
                    actor=actor, verb="Cancelling running {} (Temporal confirms)")
    raise ValidationError({"state": f"cannot cancel chart #{current.pk}: it is already {current.state}."})


RERUNNABLE = (ChartState.FAILED, ChartState.CANCELLED)
RERUN_MARK = "~rerun-"
LIVE_STATES = (ChartState.QUEUED, ChartState.RUNNING)
RERUN_ID_BATCH = 50  # candidate re-run ids checked per query


class RerunInFlight(ValidationError):
    """A re-run refused because another run of the same content is queued or running;
    ``live`` is that run, so a page can show it instead."""

    def __init__(self, message: dict, live: Chart) -> None:
        super().__init__(message)
        self.live = live


def _run_root(chart: Chart) -> Chart:
    """The first run of this chart's content: ``rerun_of`` followed up (a re-run of a
    re-run points at the run it re-ran, not at the first). A link cut by a deletion
    (``SET_NULL``) ends the walk there."""
    root, seen = chart, {chart.pk}
    while root.rerun_of_id is not None and root.rerun_of_id not in seen:
        parent = Chart.objects.filter(pk=root.rerun_of_id).first()
        if parent is None:
            break
        seen.add(parent.pk)
        root = parent
    return root


def run_lineage(*root_pks: int, limit: int | None = None) -> set[int]:
    """These charts and every re-run made from them, through ``rerun_of`` (a re-run of a
    re-run included): one query per generation, at most ``limit`` ids."""
    found = set(root_pks)
    frontier = list(found)
    while frontier and (limit is None or len(found) < limit):
        children = [pk for pk in Chart.objects.filter(rerun_of_id__in=frontier).values_list("pk", flat=True)
                    if pk not in found]
        found.update(children)
        frontier = children
    return found


def rerun_id(root: str, n: int) -> str:
    """The n-th run's external id: ``<root>~rerun-<n>``, the root cut to fit
    :data:`EXTERNAL_ID_MAX` (from 193 characters the root is shortened, never the number)."""
    suffix = f"{RERUN_MARK}{n}"
    return root[:EXTERNAL_ID_MAX - len(suffix)] + suffix


def _rerun_external_id(root: Chart) -> str | None:
    """``<root id>~rerun-<n>``: n counts the runs of that content, the original being run 1.

    ``root`` is the first run (:func:`_run_root`): a re-run of a re-run keeps the root's id
    (``mrn-12~rerun-3``, not ``mrn-12~rerun-2~rerun-2``), and a root long enough to be cut
    in its re-runs' ids is still read whole. The lowest free n is found by asking for the
    exact candidate ids (a prefix search would miss the cut ones), a batch at a time.
    """
    if not root.external_id:
        return None
    base = root.external_id.split(RERUN_MARK, 1)[0]
    n = 2
    while True:
        candidates = [rerun_id(base, k) for k in range(n, n + RERUN_ID_BATCH)]
        taken = set(Chart.objects.filter(org_id=root.org_id, external_id__in=candidates)
                    .values_list("external_id", flat=True))
        for candidate in candidates:
            if candidate not in taken:
                return candidate
        n += RERUN_ID_BATCH


def _live_run(root: Chart) -> Chart | None:
    """A queued or running run of the root's content (the root or any re-run made from it)."""
    return (Chart.objects.filter(pk__in=run_lineage(root.pk), state__in=LIVE_STATES)
            .order_by("-id").first())


def chart_rerun(*, chart: Chart | int, actor: Any = None) -> Chart:
    """Re-run a failed or cancelled chart as a new chart: same org, workflow and payload,
    ``rerun_of`` pointing at the original, which stays as it was.

    The new chart's external id is the original's with ``~rerun-<n>`` (see
    :func:`_rerun_external_id`), so the producer's id stays unique per org and a
    search for it finds every run. Needs the "add chart" permission when an actor is given.

    One run of a content at a time: while a run of it (this chart, the chart it re-ran,
    any re-run of either) is queued or running, the re-run is refused
    (:class:`RerunInFlight`, naming that run), so a double click, two tabs or two
    operators never run it twice. Race-safe: the check and the insert happen under a
    lock on the first run's row (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's
    ``BEGIN IMMEDIATE`` serialises every writer), so a second re-run waits for the
    first to commit and then sees it.
    """
    if actor is not None and not actor.has_perm("charts.add_chart"):
        raise ValidationError({"permission": "You do not have permission to re-run charts (needs charts.add_chart)."})
    original = _get_chart(chart)
    if original.state not in RERUNNABLE:
        raise ValidationError({"state": f"cannot re-run chart #{original.pk}: it is {original.state} "
                                        f"(only failed or cancelled charts can be re-run)."})
    root = _run_root(original)
    for _ in range(3):  # a producer submitting the candidate id at that moment: take the next number
        try:
            with transaction.atomic():
                list(Chart.objects.select_for_update().filter(pk=root.pk).values_list("pk", flat=True))
                live = _live_run(root)
                if live is not None:
                    ext = f" ({live.external_id})" if live.external_id else ""
                    raise RerunInFlight({"rerun": (
                        f"rerun: chart #{original.pk} is already being re-run as chart #{live.pk}{ext}, which is "
                        f"{live.state}; re-run it again once that run has finished.")}, live)
                new = Chart.objects.create(
                    org_id=original.org_id, workflow_id=original.workflow_id, payload=original.payload,
                    external_id=_rerun_external_id(root), created_at=timezone.now(), rerun_of=original,
                )
                audit.record(actor=actor, action="rerun", chart=original,
                             summary=f"Re-ran {audit.chart_label(original)} as chart #{new.pk}",
                             before={"state": original.state}, after={"rerun": new.pk, "external_id": new.external_id})
                notify(ChartNote(id=new.pk))
            return new
        except IntegrityError:
            continue
    raise ValidationError({"external_id": f"external_id: could not find a free re-run id for chart #{original.pk}."})
