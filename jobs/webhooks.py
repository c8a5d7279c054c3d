"""Signed webhooks to an org's URL: when its charts finish and when its clear-time moves.

Each delivery is a row (:class:`WebhookDelivery`) created in the same transaction
that decides to send it, and an rq job enqueued on commit that POSTs it. The body
is the same bytes on every attempt, signed as the Standard Webhooks specification
says (https://www.standardwebhooks.com), keyed with the org's secret::

    webhook-id: msg_5f0c...          (the same on every attempt: receivers dedupe on it)
    webhook-timestamp: 1764620000    (this attempt's time, unix seconds)
    webhook-signature: v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">
    X-Fairsched-Event: chart.finished
    X-Fairsched-Delivery: 42
    X-Fairsched-Signature: sha256=<hex HMAC-SHA256 of the body>   (legacy, see below)

The signature covers the id and the time, so a receiver that refuses old timestamps
(the spec's libraries: 5 minutes) and ids it has seen cannot be replayed a captured
delivery. The legacy header, the body's HMAC alone, is still sent while
FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE is on (the default, for receivers not migrated yet;
docs/webhooks.md has the migration).

A failed attempt (connection error, timeout, a non-2xx answer; redirects are not
followed) is retried by rq with the backoff in ``FAIRSCHED_WEBHOOK_RETRY_S``;
every attempt's outcome and the next retry time are on the row, in the admin.

The connection checks the URL's host and the addresses it resolves to, and connects to
a checked one: cloud metadata services (by name and address), link-local, multicast and
reserved addresses are never reached, loopback and private ones only with
FAIRSCHED_WEBHOOK_ALLOW_PRIVATE.

Finished charts are found by a periodic sweep over ``Chart.updated_at`` rather
than a signal: charts finish through several paths (the lifecycle activity,
reconciliation against Temporal, an operator's cancel), all queryset updates that
send no ``post_save``; the sweep sees them all, and a unique ``dedupe_key`` per
chart makes seeing one twice harmless.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any
from urllib.parse import urlsplit

import django_rq
import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import CharField, Exists, OuterRef, Q, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone
from rq import Retry

from charts.models import FINAL_STATES, Chart
from common.snapshot import read_snapshot
from jobs.models import DeliveryStatus, OrgClearTime, SweepCursor, WebhookDelivery, WebhookEvent
from orgs.models import Org, webhook_signing_key

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Fairsched-Signature"
USER_AGENT = "Fairsched-Webhook/1"
SWEEP_OVERLAP = timedelta(seconds=60)  # re-read this far back: commits land after their updated_at
SWEEP_LIMIT = 5000
SNAPSHOT_MAX_AGE = timedelta(seconds=120)  # an older snapshot says nothing about the clear-time now
STUCK_AFTER = timedelta(minutes=5)  # a pending delivery this late for its attempt lost its rq job
CLAIM_S = 120  # one attempt at a time per delivery, even if two rq jobs carry it


class DeliveryFailed(RuntimeError):
    """An attempt failed; rq retries the job while retries remain."""


# --- signing -----------------------------------------------------------------------


def sign(body: bytes, secret: str) -> str:
    """The legacy ``X-Fairsched-Signature``: the body's HMAC alone, keyed with the secret's
    text as typed (see FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str) -> bool:
    """What a receiver of the legacy header does (constant-time compare)."""
    return hmac.compare_digest(sign(body, secret), header or "")


def sign_standard(msg_id: str, timestamp: int, body: bytes, secret: str) -> str:
    """The Standard Webhooks ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256 of
    ``<id>.<timestamp>.<body>``, keyed as :func:`orgs.models.webhook_signing_key` says."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(webhook_signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _timestamp() -> int:
    return int(time.time())


def signed_headers(delivery: WebhookDelivery, body: bytes, secret: str) -> dict[str, str]:
    """An attempt's headers. The id stays and the timestamp is this attempt's: a retry an
    hour later must not arrive with a time the receiver refuses as too old."""
    msg_id, timestamp = delivery.webhook_id, _timestamp()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign_standard(msg_id, timestamp, body, secret),
        "X-Fairsched-Event": delivery.event,
        "X-Fairsched-Delivery": str(delivery.pk),
    }
    if settings.FAIRSCHED_WEBHOOK_LEGACY_SIGNATURE:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    return headers


def delivery_body(delivery: WebhookDelivery) -> bytes:
    doc = {"id": delivery.pk, "event": delivery.event, "created_at": delivery.created_at.isoformat(),
           **delivery.payload}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


# --- creating and enqueueing ---------------------------------------------------------


def retry_policy() -> Retry | None:
    intervals = list(settings.FAIRSCHED_WEBHOOK_RETRY_S)
    return Retry(max=len(intervals), interval=intervals) if intervals else None


def enqueue_delivery(delivery_id: int, *, suffix: str = "") -> str | None:
    """Queue the rq job for a delivery. Never raises: a delivery left unqueued
    (Redis down) is picked up again by the sweep."""
    try:
        job = django_rq.get_queue("default", commit_mode="auto").enqueue(
            "jobs.tasks.deliver_webhook", delivery_id, job_id=f"webhook-{delivery_id}{suffix}",
            retry=retry_policy(), job_timeout=settings.FAIRSCHED_WEBHOOK_TIMEOUT_S * 3 + 30,
            result_ttl=3600, failure_ttl=7 * 86400,
        )
    except redis.RedisError as exc:
        log.warning("webhook delivery #%s not queued (%s); the sweep will retry", delivery_id, exc)
        return None
    return job.id


def webhook_delivery_create(
    *, org: Org, event: str, payload: dict[str, Any], dedupe_key: str | None = None
) -> WebhookDelivery | None:
    """Record a delivery and queue it on commit; None if ``dedupe_key`` was already used."""
    try:
        with transaction.atomic():
            delivery = WebhookDelivery.objects.create(
                org=org, event=event, payload=payload, dedupe_key=dedupe_key, url=org.webhook_url
            )
    except IntegrityError:
        return None
    transaction.on_commit(lambda: enqueue_delivery(delivery.pk))
    return delivery


def webhook_delivery_retry(*, delivery: WebhookDelivery | int) -> WebhookDelivery:
    """An operator's "retry now": a failed (or stuck) delivery gets a fresh series of attempts."""
    pk = delivery.pk if isinstance(delivery, WebhookDelivery) else delivery
    with transaction.atomic():
        row = WebhookDelivery.objects.select_for_update().get(pk=pk)
        row.status = DeliveryStatus.PENDING
        row.next_retry_at = timezone.now()
        row.claimed_until = None
        row.save(update_fields=["status", "next_retry_at", "claimed_until"])
        transaction.on_commit(lambda: enqueue_delivery(pk, suffix=f"-r{row.attempts}"))
    return row


# --- sending ---------------------------------------------------------------------------

from jobs.webhook_destinations import (  # noqa: E402,F401 - where a webhook may go; re-exported
    METADATA_HOSTS,
    METADATA_NETWORKS,
    DestinationRefused,
    check_destination,
    check_host,
    _guarded_connection,
    _opener,
)

ALLOWED_SCHEMES = ("http", "https")


@dataclass
class Attempt:
    status_code: int | None
    response: str
    error: str
    refused: bool = False  # the destination itself is not allowed: retrying cannot help

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def refusal(url: str, secret: str) -> str | None:
    """Why a delivery must not be attempted at all, or None: a scheme other than http(s),
    no secret (a body signed with the empty key is one anyone can forge), or a ``whsec_``
    secret that is not one (written around the model's check)."""
    scheme = urlsplit(url).scheme.lower() if url else ""
    if scheme not in ALLOWED_SCHEMES:
        return f"webhook URL scheme {scheme or '(none)'!r} is not http or https"
    if not (secret or "").strip():
        return "the org has no webhook secret; an unsigned (empty-key) delivery would be forgeable"
    try:
        webhook_signing_key(secret)
    except ValueError as exc:
        return f"webhook_secret: {exc}"
    return None


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Attempt:
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        return Attempt(None, "", f"refused: webhook URL scheme {scheme!r} is not http or https", refused=True)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _opener.open(request, timeout=timeout) as resp:
            return Attempt(resp.status, resp.read(2000).decode("utf-8", "replace"), "")
    except urllib.error.HTTPError as exc:
        text = exc.read(2000).decode("utf-8", "replace") if exc.fp else ""
        return Attempt(exc.code, text, f"HTTP {exc.code} {exc.reason}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, DestinationRefused):
            return Attempt(None, "", f"refused: {reason}", refused=True)
        return Attempt(None, "", f"{type(exc).__name__}: {reason}")


def webhook_deliver(*, delivery_id: int, retry_in_s: int | None) -> WebhookDelivery | None:
    """Make one attempt. ``retry_in_s`` is when rq will try again if this one fails
    (None: this is the last attempt). Raises :class:`DeliveryFailed` on failure;
    returns None if the delivery was deleted meanwhile."""
    now = timezone.now()
    claimed = WebhookDelivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING).filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    ).update(last_attempt_at=now, claimed_until=now + timedelta(seconds=CLAIM_S))
    delivery = WebhookDelivery.objects.select_related("org").filter(pk=delivery_id).first()
    if delivery is None or not claimed:
        return delivery  # already sent, given up, or another job is sending it right now
    org = delivery.org
    if not org.webhook_url:
        delivery.status = DeliveryStatus.SKIPPED
        delivery.last_error = "the org has no webhook URL any more"
        delivery.next_retry_at = None
        delivery.claimed_until = None
        delivery.save(update_fields=["status", "last_error", "next_retry_at", "claimed_until"])
        return delivery
    reason = refusal(org.webhook_url, org.webhook_secret)
    if reason is not None:
        delivery.status = DeliveryStatus.FAILED
        delivery.last_error = f"refused: {reason}"
        delivery.next_retry_at = None
        delivery.claimed_until = None
        delivery.save(update_fields=["status", "last_error", "next_retry_at", "claimed_until"])
        log.warning("webhook #%s not sent: %s", delivery.pk, reason)
        return delivery  # failed for good: no rq retry
    body = delivery_body(delivery)
    headers = signed_headers(delivery, body, org.webhook_secret)
    attempt = post(org.webhook_url, body, headers, settings.FAIRSCHED_WEBHOOK_TIMEOUT_S)
    delivery.url = org.webhook_url
    delivery.attempts += 1
    delivery.last_status_code = attempt.status_code
    delivery.last_response = attempt.response
    delivery.last_error = attempt.error
    delivery.claimed_until = None
    if attempt.ok:
        delivery.status = DeliveryStatus.SUCCEEDED
        delivery.delivered_at = timezone.now()
        delivery.next_retry_at = None
    elif retry_in_s is not None and not attempt.refused:
        delivery.next_retry_at = timezone.now() + timedelta(seconds=retry_in_s)
    else:
        delivery.status = DeliveryStatus.FAILED
        delivery.next_retry_at = None
    delivery.save(update_fields=["url", "attempts", "last_status_code", "last_response", "last_error",
                                 "claimed_until", "status", "delivered_at", "next_retry_at"])
    if attempt.refused:
        log.warning("webhook #%s to %s not sent: %s", delivery.pk, org.webhook_url, attempt.error)
        return delivery  # failed for good: no rq retry
    if not attempt.ok:
        log.info("webhook #%s to %s failed (attempt %s): %s", delivery.pk, org.webhook_url, delivery.attempts,
                 attempt.error)
        raise DeliveryFailed(f"delivery #{delivery.pk}: {attempt.error}")
    return delivery


# --- the sweep ---------------------------------------------------------------------------


@dataclass
class SweepResult:
    finished: int = 0
    clear_time: int = 0
    requeued: int = 0


def chart_payload(chart: Chart) -> dict[str, Any]:
    duration = None
    if chart.started_at and chart.finished_at:
        duration = round((chart.finished_at - chart.started_at).total_seconds(), 3)
    return {
        "org": {"id": chart.org_id, "slug": chart.org.slug, "name": chart.org.name},
        "chart": {
            "id": chart.pk, "external_id": chart.external_id, "workflow": chart.workflow.name,
            "state": chart.state, "error": chart.error, "priority": chart.priority,
            "created_at": _iso(chart.created_at), "started_at": _iso(chart.started_at),
            "finished_at": _iso(chart.finished_at), "duration_s": duration,
        },
    }


def _has_finished_delivery() -> Exists:
    """The chart (``OuterRef``) has its ``chart.finished`` delivery: one probe of the unique
    ``dedupe_key`` index per chart, in the database."""
    key = Concat(Value("chart.finished:"), Cast(OuterRef("pk"), output_field=CharField()))
    return Exists(WebhookDelivery.objects.filter(dedupe_key=key))


def sweep_finished_charts(now: datetime | None = None) -> int:
    """Create a ``chart.finished`` delivery for each chart of an org with a webhook that
    reached a final state since the last sweep. Returns how many were created.

    Two reads of at most ``SWEEP_LIMIT`` charts each, both from the cursor's position
    ``(at, after_id)`` on ``(updated_at, id)``:

    - **the page**: the charts after the position, in that order (keyset). A full page
      moves the position to its last chart, so the next sweep continues right after it,
      however many charts share one ``updated_at`` (a bulk cancel stamps them all with
      one). It used to move a time cursor only, and the next sweep, starting
      ``SWEEP_OVERLAP`` before it, read the same full page again, for ever. A short page
      has read everything committed: the position moves to its last chart too, never to
      this process's clock (it moved to ``now``: a writer whose clock lagged the sweeper's
      by more than the overlap stamped charts behind it, never sent). Only the stamps the
      writers gave are compared: their clocks must agree within ``SWEEP_OVERLAP``, the
      sweeper's plays no part. A new cursor starts at the latest stamp of any chart.
    - **the overlap**: the charts stamped in the ``SWEEP_OVERLAP`` before the position that
      still have no delivery. A write stamps ``updated_at`` before it commits, so a row can
      become visible after a page went past its time; these are found here. The database
      returns only those (an anti-join on the delivery's key), so a burst already
      delivered is not loaded again on every sweep for a minute.
    """
    now = now or timezone.now()
    cursor = SweepCursor.objects.filter(name="chart.finished").first()
    if cursor is None:  # from now on, in the writers' time: the latest stamp they gave
        latest = Chart.objects.order_by("-updated_at").values_list("updated_at", flat=True).first()
        cursor, _ = SweepCursor.objects.get_or_create(name="chart.finished", defaults={"at": latest or now})
    final = (Chart.objects.filter(state__in=FINAL_STATES).exclude(org__webhook_url="")
             .select_related("org", "workflow").order_by("updated_at", "id"))
    # (updated_at, id) after the position, or at most at it; each written with a range on
    # updated_at the database can search its index with.
    after = Q(updated_at__gte=cursor.at) & (Q(updated_at__gt=cursor.at) | Q(pk__gt=cursor.after_id))
    behind = (Q(updated_at__gte=cursor.at - SWEEP_OVERLAP, updated_at__lte=cursor.at)
              & (Q(updated_at__lt=cursor.at) | Q(pk__lte=cursor.after_id)))
    page = list(final.filter(after)[:SWEEP_LIMIT])
    late = list(final.filter(behind).filter(~_has_finished_delivery())[:SWEEP_LIMIT])
    keys = {f"chart.finished:{c.pk}": c for c in late + page}
    done = set(WebhookDelivery.objects.filter(dedupe_key__in=[f"chart.finished:{c.pk}" for c in page])
               .values_list("dedupe_key", flat=True))  # a final chart written again is seen again
    created = 0
    with transaction.atomic():
        for key, chart in keys.items():
            if key in done:
                continue
            if webhook_delivery_create(org=chart.org, event=WebhookEvent.CHART_FINISHED,
                                       payload=chart_payload(chart), dedupe_key=key):
                created += 1
        if page:  # full or short, the last chart read: the writers' stamp, not this clock
            cursor.at, cursor.after_id = page[-1].updated_at, page[-1].pk
            cursor.save(update_fields=["at", "after_id"])
    return created


def _clear_at(row: dict[str, Any] | None, snapshot: dict[str, Any]) -> tuple[bool, datetime | None, str]:
    """``(known, clear_at, no_eta)`` of an org in a snapshot: clear_at None means nothing
    pending, unless ``no_eta`` says why its work has no clear-time ("held: no ETA", "3
    paused: no ETA until resumed"); ``no_eta`` beside a clear_at names what it leaves out.
    known False when it has work but the snapshot gives no estimate and no reason."""
    if row is None or (not row.get("queued") and not row.get("running")):
        return True, None, ""
    note = row.get("no_eta") or ""
    if row.get("clear_at"):
        return True, datetime.fromisoformat(row["clear_at"]), note
    if row.get("clear_s") is not None and snapshot.get("now") is not None:
        return True, datetime.fromtimestamp(float(snapshot["now"]) + float(row["clear_s"]), tz=dt_timezone.utc), note
    return bool(note), None, note


def _fresh_snapshot(now: datetime, snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    """``snapshot`` (else the stored one) unless there is none or it is too old to act on."""
    snapshot = snapshot if snapshot is not None else read_snapshot()
    if not snapshot:
        return None
    generated = snapshot.get("generated_at")
    if generated and now - datetime.fromisoformat(generated) > SNAPSHOT_MAX_AGE:
        return None
    return snapshot


def _clear_time_payload(org: Org, row: dict[str, Any] | None, clear_at: datetime | None,
                        previous: datetime | None, moved: float, note: str, now: datetime) -> dict[str, Any]:
    """The ``clear_time.changed`` payload of an org."""
    return {
        "org": {"id": org.pk, "slug": org.slug, "name": org.name},
        "clear_at": _iso(clear_at), "previous_clear_at": _iso(previous), "moved_s": round(moved, 1),
        "clear_s": None if clear_at is None else round(max(0.0, (clear_at - now).total_seconds()), 1),
        "no_eta": note or None, "unplanned": (row or {}).get("unplanned") or {},
        "queued": (row or {}).get("queued", 0), "running": (row or {}).get("running", 0),
    }


def _notify_clear_time(org: Org, row: dict[str, Any] | None, snapshot: dict[str, Any], now: datetime) -> bool:
    """Notify ``org`` if its clear-time moved by more than its margin (or its work started or
    stopped having one) since the last notice; True when a notice was created."""
    known, clear_at, note = _clear_at(row, snapshot)
    if not known:
        return False
    no_eta = clear_at is None and bool(note)  # work pending, none of it can run
    with transaction.atomic():
        state = OrgClearTime.objects.select_for_update().filter(org=org).first()
        previous = state.clear_at if state else None
        was_no_eta = state is not None and state.clear_at is None and bool(state.no_eta)
        moved = 0.0 if no_eta else abs(((clear_at or now) - (previous or now)).total_seconds())
        if no_eta == was_no_eta and moved <= org.webhook_clear_margin_s:
            return False
        payload = _clear_time_payload(org, row, clear_at, previous, moved, note, now)
        webhook_delivery_create(org=org, event=WebhookEvent.CLEAR_TIME_CHANGED, payload=payload)
        OrgClearTime.objects.update_or_create(org=org, defaults={"clear_at": clear_at, "no_eta": note,
                                                                 "notified_at": now})
        return True


def sweep_clear_times(now: datetime | None = None, snapshot: dict[str, Any] | None = None) -> int:
    """Notify orgs whose clear-time moved by more than their margin since the last notice.

    A missing clear-time counts as "now" (an idle org that gets three hours of work
    has moved by three hours; one that drains an hour early has moved by an hour).
    An org whose queued work is all held, paused or blocked has no clear-time, and is
    never told it is clear: it is notified once when that starts (``clear_at`` null,
    ``no_eta`` saying why) and once when its work has a clear-time again.
    """
    now = now or timezone.now()
    snapshot = _fresh_snapshot(now, snapshot)
    if not snapshot:
        return 0
    rows = {r.get("id"): r for r in snapshot.get("orgs", [])}
    sent = 0
    for org in Org.objects.exclude(webhook_url=""):
        if _notify_clear_time(org, rows.get(org.pk), snapshot, now):
            sent += 1
    return sent


def requeue_stuck(now: datetime | None = None) -> int:
    """Re-queue pending deliveries whose rq job was lost (Redis down when queued, a flushed queue)."""
    now = now or timezone.now()
    stuck = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).filter(
        Q(next_retry_at__lt=now - STUCK_AFTER) | Q(next_retry_at__isnull=True, created_at__lt=now - STUCK_AFTER)
    ).filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))[:100]
    count = 0
    for delivery in stuck:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(next_retry_at=now)
        if enqueue_delivery(delivery.pk, suffix=f"-s{int(now.timestamp())}"):
            count += 1
    return count


def sweep(now: datetime | None = None) -> SweepResult:
    return SweepResult(
        finished=sweep_finished_charts(now), clear_time=sweep_clear_times(now), requeued=requeue_stuck(now)
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
