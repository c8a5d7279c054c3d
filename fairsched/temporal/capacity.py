"""Do the live workers have an activity slot for every running chart?

A running chart holds budget from its start, and its workflow's activity holds a worker's
activity slot while it runs (DemoChart's activity lasts the whole chart). When more charts
run on a task queue than its live workers have slots, the excess charts count as running
and hold budget while their activity waits for a slot. This module finds that out:

- the workers are the advertised ones whose advertisement is live
  (:mod:`fairsched.temporal.advertise`: refreshed every 10 s while the worker runs, listed
  in the task queue's index), with their advertised slots, **whether or not they poll
  at that moment**: a worker whose slots are all busy stops polling for activities, and
  after a few minutes Temporal drops it from the task queue's pollers, yet every slot of
  it is running a chart. Counting it only while it polled made a fully busy worker count
  as no slots (a false "no live worker polls" at full load with long charts);
- the live pollers come from Temporal (DescribeTaskQueue, activity pollers seen within
  :data:`POLLER_FRESH_S`, either poll kind counting, see :func:`merge_pollers`); they add
  the workers that advertise nothing: such a poller counts as temporalio's default of
  :data:`DEFAULT_SLOTS` and the warning says so, except a Fairsched worker (identity
  ``...:fairsched``), whose missing advertisement means it stopped;
- the running charts are the Chart rows in state running, per task queue
  (``Workflow.temporal_type``: ``Type`` on the default queue, ``Type@queue`` on its own).

:func:`refresh` runs it (the rq cron job ``jobs.tasks.check_capacity``, every
:data:`CHECK_INTERVAL_S`) and stores the result in Redis under :data:`RESULT_KEY`;
the dashboard only reads that key (:func:`read`), so neither a page nor dispatch ever
waits on Temporal. Temporal unreachable: no warning, ``known: false`` and a quiet note.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from charts.models import Chart, ChartState
from common.notify import redis_client
from fairsched.temporal.advertise import ADVERT_TTL_S, advert_index, advert_key, is_fairsched_identity
from fairsched.temporal.shared import split_temporal_type

log = logging.getLogger(__name__)

DEFAULT_SLOTS = 100  # temporalio's max_concurrent_activities when a worker does not set it
POLLER_FRESH_S = 90.0  # an idle worker's activity long poll lasts up to a minute before it polls again
CHECK_INTERVAL_S = 15
RESULT_KEY = "fairsched:capacity"
RESULT_TTL_S = 60  # no check for this long (rqcron or rqworker down): "capacity unknown"
TEMPORAL_TIMEOUT_S = 5.0
MAX_QUEUES = 20
ADVICE = "Start more workers or raise FAIRSCHED_WORKER_CONCURRENCY (see README, Sizing workers)."


@dataclass(frozen=True)
class Poller:
    identity: str
    last_access: float | None  # epoch seconds of its latest poll


@dataclass(frozen=True)
class Advert:
    identity: str
    slots: int
    at: float  # epoch seconds of its latest refresh


def merge_pollers(activity: list[Poller], workflow: list[Poller]) -> list[Poller]:
    """The activity pollers, each with its latest poll of either kind: a worker whose activity
    slots are all taken stops polling for activities but still polls for workflow tasks."""
    wf = {p.identity: p.last_access for p in workflow if p.last_access is not None}
    out = []
    for p in activity:
        times = [t for t in (p.last_access, wf.get(p.identity)) if t is not None]
        out.append(Poller(p.identity, max(times) if times else None))
    return out


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def queue_capacity(task_queue: str, pollers: list[Poller], adverts: dict[str, Advert], running: int, *,
                   now: float, default_queue: str | None = None, fresh_s: float = POLLER_FRESH_S,
                   advert_ttl_s: float = ADVERT_TTL_S) -> dict[str, Any]:
    """One task queue's figures and its warning (None when every running chart has a slot). Pure.

    A worker is a live advertisement (polling or not: a busy worker stops polling for
    activities) or a live poller without one. ``seen_s`` is the age of its latest poll,
    None when Temporal does not list it as a live poller."""
    workers: list[dict[str, Any]] = []
    stopped: list[str] = []
    live = {p.identity: p for p in pollers if p.last_access is not None and now - p.last_access <= fresh_s}
    for identity in sorted(set(live) | set(adverts)):
        p = live.get(identity)
        seen_s = round(max(0.0, now - p.last_access), 1) if p is not None else None
        ad = adverts.get(identity)
        if ad is not None and now - ad.at > advert_ttl_s:
            ad = None  # stale: the worker stopped refreshing it
        if ad is not None:
            workers.append({"identity": identity, "slots": int(ad.slots), "advertised": True, "seen_s": seen_s})
        elif p is None:
            continue  # neither advertised nor polling
        elif is_fairsched_identity(identity):
            stopped.append(identity)  # a runworker whose advertisement is gone: it stopped
        else:
            workers.append({"identity": identity, "slots": DEFAULT_SLOTS, "advertised": False, "seen_s": seen_s})
    slots = sum(w["slots"] for w in workers)
    unadvertised = sum(not w["advertised"] for w in workers)
    short = max(0, running - slots)
    warning = None
    if short:
        where = "" if task_queue == default_queue else f"Task queue {task_queue!r}: "
        if workers:
            have = (f"the {_n(len(workers), 'live worker has', 'live workers have')} "
                    f"{_n(slots, 'activity slot', 'activity slots')}")
        else:
            have = f"no live worker polls task queue {task_queue!r}"
        guessed = ""
        if unadvertised:
            guessed = (f" ({_n(unadvertised, 'worker does', 'workers do')} not advertise its slots: "
                       f"counted as temporalio's default of {DEFAULT_SLOTS} each)")
        warning = (f"{where}Running {_n(running, 'chart', 'charts')} but {have}{guessed}: "
                   f"{_n(short, 'chart waits', 'charts wait')} for a slot while holding budget. {ADVICE}")
    return {"task_queue": task_queue, "running": running, "workers": workers, "slots": slots,
            "unadvertised": unadvertised, "stopped": stopped, "short": short, "warning": warning}


def summarise(queues: list[dict[str, Any]], *, now: float) -> dict[str, Any]:
    """The figures of every queue checked, and the warnings together."""
    warnings = [q["warning"] for q in queues if q["warning"]]
    return {
        "known": True, "checked_at": now, "note": None,
        "running": sum(q["running"] for q in queues),
        "workers": sum(len(q["workers"]) for q in queues),
        "slots": sum(q["slots"] for q in queues),
        "short": sum(q["short"] for q in queues),
        "warning": " ".join(warnings) or None, "warnings": warnings, "queues": queues,
    }


def unknown(note: str, *, now: float | None = None) -> dict[str, Any]:
    return {"known": False, "checked_at": now, "note": note, "running": None, "workers": None, "slots": None,
            "short": None, "warning": None, "warnings": [], "queues": []}


# --- reading the world ------------------------------------------------------------------


def running_by_queue(default_queue: str) -> dict[str, int]:
    """Running charts per task queue, from the database."""


    out: dict[str, int] = {}
    rows = (Chart.objects.filter(state=ChartState.RUNNING).values("workflow__temporal_type", "workflow__name")
            .annotate(n=Count("pk")))
    for row in rows:
        _, queue = split_temporal_type(row["workflow__temporal_type"] or row["workflow__name"], default_queue)
        out[queue] = out.get(queue, 0) + row["n"]
    return out


async def describe_pollers(client, namespace: str, task_queue: str) -> list[Poller]:
    """The activity pollers of ``task_queue`` (merged with its workflow pollers, see :func:`merge_pollers`)."""
    async def kind(tq_type) -> list[Poller]:
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(namespace=namespace, task_queue=TaskQueue(name=task_queue),
                                     task_queue_type=tq_type),
            timeout=timedelta(seconds=TEMPORAL_TIMEOUT_S))
        return [Poller(p.identity, p.last_access_time.ToSeconds() + p.last_access_time.nanos / 1e9
                       if p.HasField("last_access_time") else None) for p in resp.pollers]

    activity = await kind(TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
    workflow = await kind(TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW) if activity else []
    return merge_pollers(activity, workflow)


def advertised_identities(r, task_queue: str) -> list[str]:
    """The identities in the task queue's index of advertised workers (one ZRANGE)."""
    return [i.decode() if isinstance(i, bytes) else i for i in r.zrange(advert_index(task_queue), 0, -1)]


def read_adverts(r, task_queue: str, identities: list[str]) -> dict[str, Advert]:
    """The advertisements of these identities (one MGET); unreadable ones are left out, and
    an identity whose advertisement has expired (a killed worker) leaves the queue's index."""
    if not identities:
        return {}
    out: dict[str, Advert] = {}
    gone = []
    for identity, raw in zip(identities, r.mget([advert_key(task_queue, i) for i in identities])):
        if raw is None:
            gone.append(identity)
            continue
        try:
            data = json.loads(raw)
            out[identity] = Advert(identity, int(data["slots"]), float(data["at"]))
        except (ValueError, KeyError, TypeError):
            continue
    if gone:
        r.zrem(advert_index(task_queue), *gone)
    return out


async def _connect(address: str, namespace: str):

    return await asyncio.wait_for(Client.connect(address, namespace=namespace), TEMPORAL_TIMEOUT_S)


def check(*, address: str, namespace: str, default_queue: str, r, now: float | None = None) -> dict[str, Any]:
    """The whole check (Temporal, Redis, the database): never raises."""
    now = time.time() if now is None else now
    try:
        running = running_by_queue(default_queue)
    except Exception as exc:  # noqa: BLE001
        log.warning("capacity check: could not count the running charts (%s)", exc)
        return unknown("Worker capacity unknown: the running charts could not be counted.", now=now)
    running.setdefault(default_queue, 0)
    queues = sorted(running, key=lambda q: (q != default_queue, -running[q], q))[:MAX_QUEUES]

    async def pollers() -> dict[str, list[Poller]]:
        client = await _connect(address, namespace)
        return {q: await describe_pollers(client, namespace, q) for q in queues}

    try:
        found = asyncio.run(pollers())
    except Exception as exc:  # noqa: BLE001 - Temporal down: no warning, a quiet note
        log.info("capacity check: Temporal at %s did not answer (%s)", address, exc)
        return unknown("Worker capacity unknown: Temporal did not answer.", now=now)
    results = []
    for q in queues:
        live = {p.identity for p in found[q] if p.last_access is not None and now - p.last_access <= POLLER_FRESH_S}
        try:
            adverts = read_adverts(r, q, sorted(live | set(advertised_identities(r, q))))
        except Exception as exc:  # noqa: BLE001
            log.info("capacity check: Redis did not answer (%s)", exc)
            return unknown("Worker capacity unknown: Redis did not answer.", now=now)
        results.append(queue_capacity(q, found[q], adverts, running[q], now=now, default_queue=default_queue))
    return summarise(results, now=now)


def refresh() -> dict[str, Any]:
    """Check now and store the result for the dashboard (:data:`RESULT_KEY`, TTL :data:`RESULT_TTL_S`)."""


    r = redis_client()
    result = check(address=settings.TEMPORAL_ADDRESS, namespace=settings.TEMPORAL_NAMESPACE,
                   default_queue=settings.FAIRSCHED_TASK_QUEUE, r=r)
    try:
        r.set(RESULT_KEY, json.dumps(result), ex=RESULT_TTL_S)
    except Exception as exc:  # noqa: BLE001
        log.info("capacity check: could not store the result (%s)", exc)
    if result["warning"]:
        log.warning("%s", result["warning"])
    return result


def read() -> dict[str, Any]:
    """The latest stored check, for the dashboard: one Redis read, never raises."""
    try:
        raw = redis_client().get(RESULT_KEY)
    except Exception:  # noqa: BLE001
        return unknown("Worker capacity unknown: Redis did not answer.")
    if raw is None:
        return unknown("Worker capacity unknown: not checked in the last minute (the check runs every "
                       f"{CHECK_INTERVAL_S} s from rqcron).")
    try:
        data = json.loads(raw)
    except ValueError:
        return unknown("Worker capacity unknown.")
    data["age_s"] = round(max(0.0, time.time() - float(data.get("checked_at") or time.time())), 1)
    return data
