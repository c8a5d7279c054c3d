"""The scheduler's published state: what the web app reads, written only by the scheduler.

After every ETA pass the scheduler stores three things in Redis and then tells
every open dashboard (``dashboard.broadcast.broadcast_snapshot``):

``fairsched:snapshot`` -- a JSON object, small whatever the backlog::

    {"version": 1, "seq": 41, "generated_at": "2026-11-29T12:00:00+00:00",
     "now": 1796040000.0,                 # epoch seconds the ETAs count from
     "budget": 4, "used": 3,
     "counters": {"queued": 1210, "ordered": 1100, "running": 3,
                  "held": 100, "paused": 5, "blocked": 2},
     "clear_s": 5400.0, "clear_at": "2026-11-29T13:30:00+00:00",
     "orgs": [{"id": 1, "name": "Acme", "slug": "acme", "weight": 2, "held": false,
               "queued": 900, "running": 2, "used_cost": 2,
               "share_budget": 0.67, "share_weight": 0.5,
               "clear_s": 5400.0, "clear_at": "...",
               # its held, paused and blocked charts, and what to say about them;
               # clear_s/clear_at are null when none of its work is planned
               "unplanned": {"held": 0, "paused": 3, "blocked": 0},
               "no_eta": "3 paused: no ETA until resumed"}],
     "no_eta": "100 held: no ETA; 5 paused: ...",   # the same for the whole queue
     "waiting": {"chart": 1043, "cost": 4, "free": 2,  # why nothing starts (or null)
                 "text": "next: #1043 (Cedar Labs, audit, cost 4) waits for 4 free; 2 free"},
     "running": [{"id": 7, "org": 1, "workflow": "code", "cost": 1,
                  "external_id": "mrn-7", "started_at": "...", "elapsed_s": 30.0,
                  "expected_s": 600.0, "finish_s": 570.0,
                  "workflow_id": "chart-7", "run_id": "..."}]}

``fairsched:order`` -- a JSON list, one row per queued chart: first the fair order
(``pos`` 0..n-1, with ETAs), then the charts set aside (``pos`` null)::

    {"id": 12, "pos": 0, "org": 1, "workflow": "code", "cost": 1, "round": 3,
     "priority": false, "state": "ordered"|"held"|"paused"|"blocked",
     "external_id": "mrn-12", "start_s": 0.0, "finish_s": 600.0}

``fairsched:org:<org id>`` -- a JSON object per org (its status page):
``{"org": <the orgs[] row>, "charts": [<order rows and running rows of that org>]}``
where running rows have ``"state": "running"``.

Times ``*_s`` are seconds from ``now``. Readers never fail when the scheduler has
not published yet: they get ``None`` / empty lists.
"""
from __future__ import annotations

import json
import logging
from typing import Any

import redis

from fairsched.notify import redis_client

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "fairsched:snapshot"
ORDER_KEY = "fairsched:order"
ORG_KEY = "fairsched:org:{}"
SEQ_KEY = "fairsched:snapshot:seq"
TTL_S = 3600  # a snapshot of a scheduler that died an hour ago is gone, not shown as live


def store(snapshot: dict[str, Any], order_rows: list[dict[str, Any]], per_org: dict[int, dict[str, Any]]) -> int:
    """Store a complete snapshot atomically (one MULTI); returns its ``seq``."""
    client = redis_client()
    seq = int(client.incr(SEQ_KEY))
    snapshot = {**snapshot, "seq": seq}
    pipe = client.pipeline(transaction=True)
    pipe.set(SNAPSHOT_KEY, json.dumps(snapshot), ex=TTL_S)
    pipe.set(ORDER_KEY, json.dumps(order_rows, separators=(",", ":")), ex=TTL_S)
    for org_id, data in per_org.items():
        pipe.set(ORG_KEY.format(org_id), json.dumps(data, separators=(",", ":")), ex=TTL_S)
    pipe.execute()
    return seq


def _get_json(key: str) -> Any:
    try:
        raw = redis_client().get(key)
    except redis.RedisError as exc:
        log.warning("cannot read %s from Redis: %s", key, exc)
        return None
    return json.loads(raw) if raw else None


def read_snapshot() -> dict[str, Any] | None:
    return _get_json(SNAPSHOT_KEY)


def read_order(offset: int = 0, limit: int = 100, org: int | None = None) -> tuple[int, list[dict[str, Any]]]:
    """``(total, rows)``: a page of the queued charts (the order, then those set aside)."""
    rows = _get_json(ORDER_KEY) or []
    if org is not None:
        rows = [r for r in rows if r.get("org") == org]
    return len(rows), rows[offset:offset + limit]


def read_org(org_id: int) -> dict[str, Any] | None:
    return _get_json(ORG_KEY.format(org_id))
