"""How a what-if preview travels between the web and the scheduler, over Redis.

Only the scheduler holds the whole order, so the web asks it (``/dashboard/whatif.json``):

1. the web pushes ``{"id", "change", "at"}`` onto the list :data:`REQUESTS` (which expires
   :data:`REQUEST_TTL_S` after the last push: with no scheduler, nothing piles up);
2. the leading scheduler pops it (``BLPOP``, its own connection, off the dispatching loop:
   :mod:`fairsched.engine.previews`), computes the preview in two forked children, and
   pushes the answer onto ``answer:<id>`` (expiring too);
3. the web waits on that list for :data:`WAIT_S` (``BLPOP``) and else answers "preview
   unavailable" (503), taking its request back off the list.

A request older than :data:`WAIT_S` when the scheduler reaches it is dropped (nobody waits).
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any

REQUESTS = "fairsched:whatif:requests"
ANSWER = "fairsched:whatif:answer:"
REQUEST_TTL_S = 10
WAIT_S = 3.0


def answer_key(request_id: str) -> str:
    return ANSWER + request_id


def encode_request(change: dict[str, Any], *, request_id: str | None = None, at: float | None = None) -> tuple[str, str]:
    rid = request_id or uuid.uuid4().hex
    return rid, json.dumps({"id": rid, "change": change, "at": time.time() if at is None else at})


def ask(client, change: dict[str, Any], wait_s: float = WAIT_S) -> dict[str, Any] | None:
    """Ask the scheduler for a preview of ``change`` (a :class:`fairsched.engine.whatif.Change`'s
    JSON) through the synchronous Redis ``client``; its answer, or None after ``wait_s``."""
    rid, body = encode_request(change)
    pipe = client.pipeline()
    pipe.rpush(REQUESTS, body)
    pipe.expire(REQUESTS, REQUEST_TTL_S)
    pipe.execute()
    got = client.blpop([answer_key(rid)], timeout=wait_s)
    if got is None:
        client.lrem(REQUESTS, 1, body)  # nobody took it: no scheduler computes it later
        return None
    return json.loads(got[1])
