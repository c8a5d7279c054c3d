"""How a what-if preview or a capacity plan travels between the web and the scheduler, over Redis.

Only the scheduler holds the whole order, so the web asks it (``/dashboard/whatif.json``):

1. the web pushes ``{"id", "change", "at", "wait"}`` onto the list :data:`REQUESTS` (which
   expires :data:`REQUEST_TTL_S` after the longest wait from the last push: with no
   scheduler, nothing piles up); ``wait`` is how long the web waits for this answer;
2. the leading scheduler pops it (``BLPOP``, its own connection, off the dispatching loop:
   :mod:`fairsched.engine.previews`), computes it in forked children, and pushes the answer
   onto ``answer:<id>`` (expiring too);
3. the web waits on that list (``BLPOP``) for :data:`WAIT_S` (a preview: one ETA pass) or
   :data:`PLAN_WAIT_S` (the planner, which searches over several passes: the setting
   ``FAIRSCHED_PLAN_WAIT_S``), and else answers "preview unavailable" (503), taking its
   request back off the list.

The scheduler drops a request whose ``at + wait`` has passed when it reaches it, and kills a
computation still running then: nobody waits for it any more.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any

REQUESTS = "fairsched:whatif:requests"
ANSWER = "fairsched:whatif:answer:"
WAIT_S = 3.0        # a preview's wait
PLAN_WAIT_S = 20.0  # a planner request's wait (config.settings.FAIRSCHED_PLAN_WAIT_S: this by default)
REQUEST_TTL_S = 10  # an answer nobody read expires after this; the requests list this long after the longest wait


def answer_key(request_id: str) -> str:
    return ANSWER + request_id


def is_plan(change: dict[str, Any]) -> bool:
    return change.get("kind") == "plan"


def encode_request(change: dict[str, Any], *, request_id: str | None = None, at: float | None = None,
                   wait_s: float = WAIT_S) -> tuple[str, str]:
    rid = request_id or uuid.uuid4().hex
    return rid, json.dumps({"id": rid, "change": change, "at": time.time() if at is None else at, "wait": wait_s})


def ask(client, change: dict[str, Any], wait_s: float = WAIT_S, *, longest_wait_s: float = PLAN_WAIT_S
        ) -> dict[str, Any] | None:
    """Ask the scheduler for a preview (or a plan) of ``change`` (a
    :class:`fairsched.engine.whatif.Change`'s JSON, or ``{"kind": "plan", ...}``) through the
    synchronous Redis ``client``; its answer, or None after ``wait_s``. ``longest_wait_s``: the
    longest any request of this web waits (the list outlives it, whichever request pushed last)."""
    rid, body = encode_request(change, wait_s=wait_s)
    pipe = client.pipeline()
    pipe.rpush(REQUESTS, body)
    pipe.expire(REQUESTS, math.ceil(max(wait_s, longest_wait_s)) + REQUEST_TTL_S)
    pipe.execute()
    got = client.blpop([answer_key(rid)], timeout=wait_s)
    if got is None:
        client.lrem(REQUESTS, 1, body)  # nobody took it: no scheduler computes it later
        return None
    return json.loads(got[1])
