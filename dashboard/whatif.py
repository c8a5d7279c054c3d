"""``/dashboard/whatif.json``: a what-if preview (docs/operating.md, "What-if previews").

The web validates the change as the controls do (the same :func:`common.validation.require_int`
bounds and messages, a 400 naming the parameter), resolves it to the scheduler's terms (a
hold is weight 0, a release the weight before the hold, a workflow by name) and asks the
leading scheduler for it (:func:`common.previews.ask`): nothing is written or audited here.
No answer within :data:`common.previews.WAIT_S` (a preview) or ``FAIRSCHED_PLAN_WAIT_S`` (a
plan, :data:`common.previews.PLAN_WAIT_S` by default: the planner runs several ETA passes):
503, "preview unavailable".
"""
from __future__ import annotations

from typing import Any

from datetime import datetime

import redis
from django.core.exceptions import ValidationError
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from common import previews
from django.conf import settings
from common.validation import MAX_BUDGET, MAX_COST, MAX_ID, MAX_WEIGHT, require_int
from dashboard.views import _json, staff_required
from orgs.models import Org, Workflow, known_pools

_client: tuple[str, redis.Redis] | None = None


def redis_client() -> redis.Redis:
    """A client whose socket waits longer than the longest BLPOP (the shared one gives up at 2 s)."""
    global _client
    key = (settings.REDIS_URL, plan_wait_s())
    if _client is None or _client[0] != key:
        _client = (key, redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1,
                                             socket_timeout=max(WAIT_S, key[1]) + 2))
    return _client[1]


WAIT_S = previews.WAIT_S  # (tests shorten it)


def plan_wait_s() -> float:
    """How long a planner request waits for its answer (``FAIRSCHED_PLAN_WAIT_S``)."""
    return float(getattr(settings, "FAIRSCHED_PLAN_WAIT_S", previews.PLAN_WAIT_S))
PARAMS = ("budget", "org", "weight", "workflow", "cost", "hold", "clear_by", "meet_due", "pool", "capacity",
          "max", "min")


class Bad(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _int(request: HttpRequest, key: str, *, minimum: int, maximum: int) -> int:
    raw = request.GET.get(key, "")
    try:
        return require_int(key, raw.strip(), minimum=minimum, maximum=maximum)
    except ValidationError as exc:
        raise Bad(key, " ".join(exc.messages)) from None


def _time(request: HttpRequest, key: str) -> float:
    raw = request.GET.get(key, "").strip()
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise Bad(key, f"{key}: an ISO 8601 time (2030-01-01T09:00:00Z), got {raw[:40]!r}.") from None
    if when.tzinfo is None:
        when = timezone.make_aware(when)
    return when.timestamp()


def change_of(request: HttpRequest) -> dict[str, Any]:
    """The change the query asks for, in the scheduler's terms (:class:`fairsched.engine.whatif.Change`)."""
    given = [k for k in PARAMS if k in request.GET]
    unknown = sorted(set(request.GET) - set(PARAMS))
    if unknown:
        raise Bad(unknown[0], f"{unknown[0]}: unknown parameter; one of {', '.join(PARAMS)}.")
    if "clear_by" in given or "meet_due" in given:
        return _plan_change(request, given)
    if "pool" in given:
        return _pool_change(request, given)
    if "budget" in given:
        if len(given) > 1:
            raise Bad(given[1], f"{given[1]}: a budget preview takes budget alone.")
        return {"kind": "budget", "value": _int(request, "budget", minimum=0, maximum=MAX_BUDGET)}
    return _org_change(request, given)


def _pool_name(request: HttpRequest) -> str:
    name = request.GET.get("pool", "").strip()
    if name not in known_pools():
        raise Bad("pool", f"pool: no pool {name[:40]!r}.")
    return name


def _pool_change(request: HttpRequest, given: list[str]) -> dict[str, Any]:
    """A capacity pool's capacity (docs/scheduling.md, "Pools"): ``pool=<name>&capacity=N``
    (``default`` is the budget); or an org's limit there: ``org=<id>&pool=<name>&max=N`` (its
    ceiling) or ``&min=N`` (its guaranteed minimum)."""
    if "org" in given:
        return _limit_change(request, given)
    extra = [k for k in given if k not in ("pool", "capacity")]
    if extra:
        raise Bad(extra[0], f"{extra[0]}: a pool preview takes pool and capacity alone.")
    if "capacity" not in given:
        raise Bad("capacity", "capacity: missing (a pool preview takes pool=<name>&capacity=N).")
    return {"kind": "pool", "pool": _pool_name(request),
            "value": _int(request, "capacity", minimum=0, maximum=MAX_BUDGET)}


def _limit_change(request: HttpRequest, given: list[str]) -> dict[str, Any]:
    levers = [k for k in ("max", "min") if k in given]
    extra = [k for k in given if k not in ("org", "pool", "max", "min")]
    if extra or len(levers) != 1:
        key = extra[0] if extra else "max"
        raise Bad(key, f"{key}: a limit preview takes org, pool and one of max=N or min=N.")
    org_id = _int(request, "org", minimum=1, maximum=MAX_ID)
    if not Org.objects.filter(pk=org_id).exists():
        raise Bad("org", f"org: no org {org_id}.")
    kind = "ceiling" if levers[0] == "max" else "minimum"
    return {"kind": kind, "org": org_id, "pool": _pool_name(request),
            "value": _int(request, levers[0], minimum=0, maximum=MAX_COST * 1000)}


def _plan_change(request: HttpRequest, given: list[str]) -> dict[str, Any]:
    """The capacity planner's question: ``clear_by=<ISO time>`` or ``meet_due=1``, alone, or with
    ``pool=<name>``: the smallest capacity of that pool instead of the budget."""
    pool = {"pool": _pool_name(request)} if "pool" in given else {}
    given = [k for k in given if k != "pool"]
    if len(given) > 1:
        extra = [k for k in given if k not in ("clear_by", "meet_due")] or given[1:]
        raise Bad(extra[0], f"{extra[0]}: the planner takes clear_by=<ISO time> or meet_due=1 alone.")
    if "meet_due" in given:
        if request.GET["meet_due"] != "1":
            raise Bad("meet_due", f"meet_due: 1, got {request.GET['meet_due'][:40]!r}.")
        return {"kind": "plan", "clear_by": None, "meet_due": True, **pool}
    return {"kind": "plan", "clear_by": _time(request, "clear_by"), "meet_due": False, **pool}


def _org_change(request: HttpRequest, given: list[str]) -> dict[str, Any]:
    """One org's lever: ``weight=W``, ``hold=1/0`` (a release restores the org's weight by
    the services' own rule, :attr:`orgs.models.Org.weight_on_release`) or
    ``workflow=<id>&cost=C``."""
    if "org" not in given:
        raise Bad("org", "org: missing (or give budget=N).")
    org_id = _int(request, "org", minimum=1, maximum=MAX_ID)
    org = Org.objects.filter(pk=org_id).first()
    if org is None:
        raise Bad("org", f"org: no org {org_id}.")
    levers = [k for k in ("weight", "cost", "hold") if k in given]
    if len(levers) != 1:
        raise Bad("weight", "weight: give one of weight=W, workflow=<id>&cost=C or hold=1/0 with org.")
    if levers[0] == "weight":
        return {"kind": "weight", "org": org.pk, "value": _int(request, "weight", minimum=0, maximum=MAX_WEIGHT)}
    if levers[0] == "hold":
        hold = request.GET.get("hold", "")
        if hold not in ("0", "1"):
            raise Bad("hold", f"hold: 1 (hold) or 0 (release), got {hold[:40]!r}.")
        weight = 0 if hold == "1" else org.weight_on_release if org.is_held else org.weight
        return {"kind": "weight", "org": org.pk, "value": weight}
    if "workflow" not in given:
        raise Bad("workflow", "workflow: missing (a workflow id, with cost).")
    wf_id = _int(request, "workflow", minimum=1, maximum=MAX_ID)
    wf = Workflow.objects.filter(pk=wf_id).first()
    if wf is None:
        raise Bad("workflow", f"workflow: no workflow {wf_id}.")
    return {"kind": "cost", "org": org.pk, "workflow": wf.name,
            "value": _int(request, "cost", minimum=1, maximum=MAX_COST)}


def unavailable(detail: str) -> JsonResponse:
    response = JsonResponse({"type": "about:blank", "title": "preview unavailable", "status": 503,
                             "detail": detail, "error": f"Preview unavailable: {detail}"}, status=503,
                            content_type="application/problem+json")
    response["Cache-Control"] = "no-store"
    response["Retry-After"] = "5"
    return response


@never_cache
@staff_required
@require_GET
def whatif_json(request: HttpRequest) -> JsonResponse:
    """Each org's clear-time and at-risk count before and after one change; changes nothing."""
    try:
        change = change_of(request)
    except Bad as exc:
        return _json({"error": str(exc), "errors": {exc.key: [str(exc)]}}, 400)
    wait_s = plan_wait_s() if previews.is_plan(change) else WAIT_S
    if not connection.in_atomic_block:
        # Nothing of the database is needed while the scheduler computes (up to wait_s, 20 s for a
        # plan): the connection goes back to daphne's pool (PostgreSQL, common/connections.py)
        # instead of being held, or ten staff waiting held ten and stalled every other request.
        connection.close()
    try:
        got = previews.ask(redis_client(), change, wait_s, longest_wait_s=max(WAIT_S, plan_wait_s()))
    except (redis.RedisError, OSError) as exc:
        return unavailable(f"Redis is unreachable ({type(exc).__name__}).")
    if got is None:
        return unavailable(f"no scheduler answered within {wait_s:g} s (is one running and leading?).")
    if "error" in got:
        if got.get("param"):
            return _json({"error": got["error"], "errors": {got["param"]: [got["error"]]}}, 400)
        return unavailable(got["error"])
    if isinstance(got.get("orgs"), dict):  # each org by name too: the admin's pages have no org rows to read it from
        names = dict(Org.objects.filter(pk__in=[int(k) for k in got["orgs"] if str(k).isdigit()])
                     .values_list("pk", "name"))
        for key, row in got["orgs"].items():
            row["name"] = names.get(int(key)) if str(key).isdigit() else None
    return _json(got)
