"""The scheduler's published state: what the web app reads, written only by the scheduler.

After every ETA pass the scheduler stores the snapshot in Redis and then tells
every open dashboard (``common.live_updates.SnapshotStored``):

``fairsched:snapshot`` -- a JSON object, small whatever the backlog::

    {"version": 1, "seq": 41, "generated_at": "2026-11-29T12:00:00+00:00",
     "now": 1796040000.0,                 # epoch seconds the ETAs count from
     "budget": 4, "used": 3,
     # the policies in force (docs/scheduling.md, "The live scheduler and the policies")
     "policies": {"share": "charts", "quantum_s": 600.0, "dispatch": "strict"},
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
                  "workflow_id": "chart-prod-7", "run_id": "..."}],
     "pages": {"key": "fairsched:pages:41", "rows": 500, "order": 1210, "by_external_id": true}}

The order and the orgs' slices are published in **pages** (``PAGE_ROWS`` rows each),
as fields of one Redis hash per snapshot (``pages.key``), so a reader fetches and
parses only the page it shows, never the whole order (16 MB of JSON at 100k queued):

- ``o:<n>`` -- page ``n`` of the order: a JSON list of rows, first the fair order
  (``pos`` 0..n-1, with ETAs), then the charts set aside (``pos`` null)::

    {"id": 12, "pos": 0, "org": 1, "workflow": "code", "cost": 1, "round": 3,
     "priority": false, "state": "ordered"|"held"|"paused"|"blocked",
     "external_id": "mrn-12", "start_s": 0.0, "finish_s": 600.0}

- ``c:<chart id>`` -- ``[pos, state, finish_s, start_s, p90_s]`` of one queued chart: what a
  page about one chart shows (the chart's page, the admin's columns, the API's chart), one
  field read whatever the backlog. (A snapshot stored before ``start_s`` was added has three,
  before ``p90_s`` four.)
- ``g:<org id>`` -- ``{"org": <the orgs[] row>, "total": <charts>}`` and
  ``g:<org id>:<n>`` page ``n`` of that org's charts (its order rows in order, then
  its running rows with ``"state": "running"``): the org's status page.
- ``due:<org id>`` -- ``{"total": <charts>}`` and ``due:<org id>:<n>`` page ``n`` of the
  org's charts at risk or late, least slack first: ``{"id", "org", "state", "due_s",
  "slack_s", "reason", "workflow", "external_id"}`` each (the org page's Due list reads the
  first 50, "Prioritise at risk" the first 10,000). A snapshot stored by an older scheduler
  has the whole list in ``d:<org id>`` instead (read as well; and an older reader finds no
  ``d:`` field in a newer snapshot, so it shows no list rather than failing). Rows of the order carry ``due_s``, ``due_state`` and
  ``slack_s`` (None without a due time), ``c:<id>`` three more items ``[.., due_s,
  due_state, slack_s]`` when the chart has a due time; the snapshot's ``due`` has the counts
  (``counts``, per org ``orgs``) and the Due panel's ``charts``; each org row ``due``
  (its counts) and ``turnaround_s``.
- ``x:<org id>:<external id>`` -- ``[i, ...]``: where the org's chart with that external
  id is in the org's charts (row ``i``, on page ``g:<org id>:<i // rows>``), so
  ``status.json?external_id=`` reads one page, not all of the org's. A snapshot with
  this index says ``"by_external_id": true`` in ``pages``.

A new snapshot's hash is written completely before the snapshot that names it;
the hash of the one before lives ``OLD_PAGES_TTL_S`` more (a reader that fetched
the previous snapshot still finds its pages), older ones expire.

Times ``*_s`` are seconds from ``now``. Readers never fail when the scheduler has
not published yet: they get ``None`` / empty lists.
"""
from __future__ import annotations

import json
import logging
from typing import Any

import redis

from common.notify import redis_client

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "fairsched:snapshot"
PAGES_KEY = "fairsched:pages:{}"
SEQ_KEY = "fairsched:snapshot:seq"
CURRENT_KEY = "fairsched:snapshot:current"  # {"seq", "at"}: seq is the live scheduler's latest at "at"
TTL_S = 3600  # a snapshot of a scheduler that died an hour ago is gone, not shown as live
PAGE_ROWS = 500
OLD_PAGES_TTL_S = 10  # readers fetch a snapshot and its pages within milliseconds
_FIELDS_PER_WRITE = 1000  # HSET fields per round trip, and
_BYTES_PER_WRITE = 4 * 2**20  # bytes: bounded Redis work and memory per command (a page of the order is ~120 KB)


_dumps = json.JSONEncoder(separators=(",", ":")).encode
"""Compact JSON. One encoder for every call: ``json.dumps`` with any argument of its own makes
a new encoder per call, and a pass at a million charts makes two million small fields
(each chart's place, each external id's): 2.8 -> 2.0 us a field."""


def pages_of(rows: list[dict[str, Any]], size: int = PAGE_ROWS):
    """``(n, json text)`` of each page of ``rows``; each page is encoded on its own, so a
    caller in a thread holds the GIL a few milliseconds at a time, never for the whole order.
    Rows that can write their own page (``fairsched.engine.order_rows.Rows``: from its
    columns, no dict per row) write it."""
    page = getattr(rows, "json_page", None)
    for n, start in enumerate(range(0, len(rows), size)):
        yield n, page(start, start + size) if page is not None else _dumps(rows[start:start + size])


def _encoded(value: Any) -> bytes:
    return _dumps(value).encode()  # (JSON is ASCII: a copy, no transcoding)


def page_fields(order_rows: list[dict[str, Any]], per_org: dict[int, dict[str, Any]]):
    """Every field of a snapshot's page hash, lazily, as ``(name, JSON bytes)``."""
    for n, text in pages_of(order_rows):
        yield f"o:{n}", text.encode()
    # one chart's place: pages about one chart (the API's eta_p90 reads p90; its due fields
    # only when it has a due time). A Rows writes them from its columns, no dict per row.
    json_places = getattr(order_rows, "json_places", None)
    if json_places is not None:
        for cid, text in json_places():
            yield f"c:{cid}", text.encode()
    else:
        for r in order_rows:
            due_state = r.get("due_state")
            yield f"c:{r['id']}", _encoded([r.get("pos"), r.get("state"), r.get("finish_s"), r.get("start_s"),
                                            r.get("p90_s")]
                                           + ([r.get("due_s"), due_state, r.get("slack_s")] if due_state else []))
    for org_id, data in per_org.items():
        # the org's at-risk and late charts (a sequence of dicts made as read), in pages: at a
        # million charts half of them late, one org's were 37 MB in one field, and making it
        # took 110 MB (bench/child_memory.py --redis); a reader wants the first 50
        flagged = data.get("flagged", [])
        yield f"due:{org_id}", _encoded({"total": len(flagged)})
        for n, text in pages_of(flagged):
            yield f"due:{org_id}:{n}", text.encode()
        charts = data.get("charts", [])
        yield f"g:{org_id}", _encoded({"org": data.get("org"), "total": len(charts)})
        for n, text in pages_of(charts):
            yield f"g:{org_id}:{n}", text.encode()
        ext_ids = getattr(charts, "external_ids", None)
        # each external id's places in the org's rows: an int while it has one (nearly every
        # id), a list from its second (a list each was 32 MB more for 220k ids)
        where: dict[str, int | list[int]] = {}
        for i, ext in enumerate(ext_ids() if ext_ids else (r.get("external_id") for r in charts)):
            if ext:
                got = where.setdefault(ext, i)
                if got != i:
                    if type(got) is int:
                        where[ext] = [got, i]
                    else:
                        got.append(i)
        for ext, rows in where.items():
            yield f"x:{org_id}:{ext}", _encoded(rows) if type(rows) is list else b"[%d]" % rows


def store(snapshot: dict[str, Any], order_rows: list[dict[str, Any]], per_org: dict[int, dict[str, Any]],
          client: redis.Redis | None = None) -> int:
    """Store a complete snapshot: its pages first, then the snapshot naming them
    (readers never see a snapshot whose pages are missing); returns its ``seq``.
    ``client``: the Redis client to store with (the shared one if None; a forked child
    must bring its own: see ``LivePublisher``)."""
    client = client if client is not None else redis_client()
    seq = int(client.incr(SEQ_KEY))
    key = PAGES_KEY.format(seq)
    # The fields come encoded, and the client sends bytes as they are. A batch of 1,000
    # texts was 1,000 pages of the order, 120 MB at a million charts, held twice while it
    # was sent (the texts and the client's encoded copy): bench/child_memory.py --redis.
    batch: dict[str, bytes] = {}
    size = 0
    for field, data in page_fields(order_rows, per_org):
        batch[field] = data
        size += len(data)
        if len(batch) >= _FIELDS_PER_WRITE or size >= _BYTES_PER_WRITE:
            client.hset(key, mapping=batch)
            batch, size = {}, 0
    if batch:
        client.hset(key, mapping=batch)
    client.expire(key, TTL_S)
    snapshot = {**snapshot, "seq": seq, "pages": {"key": key, "rows": PAGE_ROWS, "order": len(order_rows),
                                                  "by_external_id": True}}
    previous = _get_json(SNAPSHOT_KEY, client)
    pipe = client.pipeline(transaction=True)
    pipe.set(SNAPSHOT_KEY, _dumps(snapshot), ex=TTL_S)
    old = (previous or {}).get("pages", {}).get("key") if isinstance(previous, dict) else None
    if old and old != key:
        pipe.expire(old, OLD_PAGES_TTL_S)
    pipe.execute()
    return seq


def current_value(seq: int, at: float) -> str:
    """The value of ``CURRENT_KEY`` saying snapshot ``seq`` is still the live scheduler's
    latest at ``at``: the scheduler writes it every second, so a static backlog needs no
    new ETA pass to stay live (its ETAs are absolute times) and a long pass on a large
    backlog does not make the pages fall back to the database meanwhile."""
    return _dumps({"seq": seq, "at": at})


def read_current() -> dict[str, Any] | None:
    """The live scheduler's last confirmation, ``{"seq", "at"}`` (:func:`current_value`),
    or None (never written, expired, or Redis unreachable)."""
    return _get_json(CURRENT_KEY)


def confirmed_at(snapshot: dict[str, Any]) -> float | None:
    """Epoch seconds the scheduler last confirmed ``snapshot`` still current (its ``now``
    if never)."""
    got = read_current()
    base = snapshot.get("now")
    if isinstance(got, dict) and got.get("seq") == snapshot.get("seq") and isinstance(got.get("at"), (int, float)):
        return max(float(base or 0.0), float(got["at"]))
    return base


def _get_json(key: str, client: redis.Redis | None = None) -> Any:
    try:
        raw = (client if client is not None else redis_client()).get(key)
    except redis.RedisError as exc:
        log.warning("cannot read %s from Redis: %s", key, exc)
        return None
    return json.loads(raw) if raw else None


def read_snapshot() -> dict[str, Any] | None:
    return _get_json(SNAPSHOT_KEY)


def _fields(snapshot: dict[str, Any] | None, names: list[str]) -> list[Any] | None:
    """The named fields of ``snapshot``'s page hash, parsed (None each where absent);
    None when the snapshot has no pages or they expired (a newer snapshot replaced it)."""
    pages = (snapshot or {}).get("pages") or {}
    key = pages.get("key")
    if not key:
        return None
    if not names:
        return []
    try:
        raw = redis_client().hmget(key, names)
    except redis.RedisError as exc:
        log.warning("cannot read %s from Redis: %s", key, exc)
        return None
    if all(r is None for r in raw):
        return None
    return [json.loads(r) if r else None for r in raw]


def _page_range(offset: int, limit: int, total: int, size: int) -> range:
    if limit <= 0 or offset >= total:
        return range(0)
    return range(offset // size, (min(total, offset + limit) - 1) // size + 1)


def _slice(snapshot: dict[str, Any] | None, prefix: str, total: int, offset: int, limit: int
           ) -> list[dict[str, Any]] | None:
    size = ((snapshot or {}).get("pages") or {}).get("rows") or PAGE_ROWS
    span = _page_range(offset, limit, total, size)
    got = _fields(snapshot, [f"{prefix}:{n}" for n in span])
    if got is None:
        return None
    rows = [r for page in got for r in (page or [])]
    start = offset - span.start * size if span else 0
    return rows[start:start + limit]


def _with_latest(snapshot: dict[str, Any] | None, read):
    """``read(snapshot)``; if that snapshot's pages are gone (replaced meanwhile), once more
    with the latest snapshot."""
    out = read(snapshot)
    if out is None and snapshot is not None:
        latest = read_snapshot()
        if latest is not None and latest.get("seq") != snapshot.get("seq"):
            out = read(latest)
    return out


def read_order(offset: int = 0, limit: int = 100, snapshot: dict[str, Any] | None = None
               ) -> tuple[int, list[dict[str, Any]]]:
    """``(total, rows)``: a page of the queued charts (the order, then those set aside),
    reading only the pages it spans."""
    snapshot = snapshot if snapshot is not None else read_snapshot()

    def read(s):
        total = ((s or {}).get("pages") or {}).get("order", 0)
        rows = _slice(s, "o", total, max(0, offset), limit)
        return None if rows is None else (total, rows)

    return _with_latest(snapshot, read) or (0, [])


def read_order_all(snapshot: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every row of the stored order (O(backlog): for tools and tests, not for pages)."""
    snapshot = snapshot if snapshot is not None else read_snapshot()
    total = ((snapshot or {}).get("pages") or {}).get("order", 0)
    return read_order(0, total, snapshot)[1] if total else []


def read_org(org_id: int, offset: int = 0, limit: int | None = None,
             snapshot: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``{"org": <orgs[] row>, "total": n, "charts": [...]}``: ``limit`` of the org's
    charts from ``offset`` (all with ``limit`` None), reading only those pages; None
    when nothing is published for the org."""
    snapshot = snapshot if snapshot is not None else read_snapshot()

    def read(s):
        head = _fields(s, [f"g:{org_id}"])
        if not head or head[0] is None:
            return None
        total = head[0].get("total", 0)
        rows = _slice(s, f"g:{org_id}", total, max(0, offset), total if limit is None else limit)
        return None if rows is None else {**head[0], "charts": rows}

    return _with_latest(snapshot, read)


def read_charts(ids: list[int], snapshot: dict[str, Any] | None = None) -> dict[int, dict[str, Any]]:
    """``{id: {"pos", "state", "finish_s", "start_s"}}`` of the named queued charts (absent: not
    in the published order), one round trip whatever the backlog."""
    snapshot = snapshot if snapshot is not None else read_snapshot()
    ids = list(ids)
    got = _with_latest(snapshot, lambda s: _fields(s, [f"c:{i}" for i in ids]) if ids else []) or []
    return {i: {"pos": v[0], "state": v[1], "finish_s": v[2], "start_s": v[3] if len(v) > 3 else None,
                "p90_s": v[4] if len(v) > 4 else None,
                "due_s": v[5] if len(v) > 7 else None, "due_state": v[6] if len(v) > 7 else None,
                "slack_s": v[7] if len(v) > 7 else None}
            for i, v in zip(ids, got) if v is not None}


def read_due(org_id: int, snapshot: dict[str, Any] | None = None, *, limit: int | None = None,
             offset: int = 0) -> list[dict[str, Any]]:
    """The org's ``limit`` charts at risk or late in the snapshot from the ``offset``-th (all
    with None), least slack first, reading only the pages they span (``due:<org>`` holds their count,
    ``due:<org>:<n>`` the pages; an older scheduler stored the whole list in ``d:<org>``):
    ``[{"id", "org", "state", "due_s", "slack_s", "reason", "workflow", "external_id"}]``."""
    snapshot = snapshot if snapshot is not None else read_snapshot()

    def read(s):
        got = _fields(s, [f"due:{org_id}", f"d:{org_id}"])
        if got is None:
            return None
        head, whole = got
        start = max(0, offset)
        if head is None:  # none flagged, or an older scheduler's snapshot
            return (whole or [])[start:None if limit is None else start + limit]
        total = head.get("total", 0)
        return _slice(s, f"due:{org_id}", total, start, total if limit is None else limit)

    return _with_latest(snapshot, read) or []


def read_org_external_id(org_id: int, external_id: str, snapshot: dict[str, Any] | None = None
                         ) -> dict[str, Any] | None:
    """``{"org": <orgs[] row>, "total": n, "charts": [...]}`` with only the org's charts whose
    external id is ``external_id`` (none or one): the org's row, the index field and the one
    page holding the chart, whatever the org's backlog. None when nothing is published for
    the org. A snapshot without the index (stored by an older scheduler) is read whole."""
    snapshot = snapshot if snapshot is not None else read_snapshot()

    def read(s):
        pages = (s or {}).get("pages") or {}
        if not pages.get("by_external_id"):
            data = read_org(org_id, snapshot=s)
            return None if data is None else {
                **data, "charts": [r for r in data["charts"] if r.get("external_id") == external_id]}
        got = _fields(s, [f"g:{org_id}", f"x:{org_id}:{external_id}"])
        if not got or got[0] is None:
            return None
        head, where = got[0], got[1] or []
        size = pages.get("rows") or PAGE_ROWS
        span = sorted({i // size for i in where})
        fetched = _fields(s, [f"g:{org_id}:{n}" for n in span])
        if fetched is None:
            return None
        page = dict(zip(span, fetched))
        rows = [page[i // size][i % size] for i in where
                if page.get(i // size) is not None and i % size < len(page[i // size])]
        return {**head, "charts": [r for r in rows if r.get("external_id") == external_id]}

    return _with_latest(snapshot, read)
