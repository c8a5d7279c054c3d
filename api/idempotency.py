"""``Idempotency-Key`` (IETF draft-ietf-httpapi-idempotency-key-header, as Stripe does it).

The first response to an (org, Idempotency-Key) pair is stored for
``FAIRSCHED_API_IDEMPOTENCY_TTL_S`` (24 h) in :class:`api.models.IdempotencyKey`:

1. A row is inserted, *in flight*, and committed at once: a second request with the same
   key sees it (the unique constraint on (org, key) decides which request is first, on
   every database, across web processes).
2. The work and the stored response are written in **one transaction**: a chart exists
   if and only if its response is stored. A process that dies in between leaves the row
   in flight with nothing else; after ``IN_FLIGHT_STALE_S`` a retry takes it over, if no
   request holds it: the request working on it holds the row locked until it is answered.
3. A retry with the same key:
   - same method, path and body (their SHA-256, the *fingerprint*): the stored status,
     body and ``Location``, with ``Idempotent-Replayed: true``; nothing runs again;
   - a different fingerprint: 422;
   - while the first is still in flight: 409 with ``Retry-After: 1``.

Answers that say "try again later" are not stored (409, 429, 5xx): the row is deleted, so
the retry after ``Retry-After`` runs for real. Everything else (201, 200, 4xx refusals)
is the stored answer. Expired rows are deleted by a periodic job, all of them each minute
(``jobs.tasks.purge_idempotency_keys``, registered in ``jobs/cron.py``): a request never
waits on it, and the table holds at most the TTL's keys and a minute's more.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from api.models import IdempotencyKey
from api.problems import Problem, from_validation
from common.insert_one import insert_one

HEADER = "Idempotency-Key"
MAX_LENGTH = 255
IN_FLIGHT_STALE_S = 120  # no request runs this long: a row in flight longer was left by a dead process
NOT_STORED = (409, 429)


def key_of(request: HttpRequest) -> str | None:
    """The header's value: a token (as Stripe) or a quoted string (the draft's Structured
    Field), 1 to 255 printable ASCII characters; anything else is a 400 naming the header."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    value = raw.strip(" \t")  # HTTP's optional whitespace only: str.strip() also takes U+00A0 and its kin
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not value or len(value) > MAX_LENGTH or any(not 32 <= ord(c) <= 126 for c in value):
        message = (f"{HEADER}: 1 to {MAX_LENGTH} printable ASCII characters (a UUID is a good choice), "
                   f"got {len(value)} characters{'' if value.isprintable() else ' with control characters'}.")
        raise Problem(400, message, kind="bad-idempotency-key", errors={HEADER: [message]})
    return value


def fingerprint(request: HttpRequest) -> str:
    h = hashlib.sha256(f"{request.method} {request.path}\n".encode())
    h.update(request.body)
    return h.hexdigest()


def _replay(row: IdempotencyKey) -> HttpResponse:
    response = HttpResponse(row.body, status=row.status, content_type=row.content_type or "application/json")
    if row.location:
        response["Location"] = row.location
    response["Idempotent-Replayed"] = "true"
    response["Cache-Control"] = "no-store"
    return response


def _take_over(row: IdempotencyKey, now) -> bool:
    """Take over an in-flight row older than ``IN_FLIGHT_STALE_S`` if its request is gone: the
    request working on it holds the row locked until its transaction ends (:func:`idempotent`),
    so a row nobody holds was left by a process that died, and nothing of it was committed but
    the row. A request still running past the limit is left alone (its retry used to run the
    work a second time: two charts without an external_id). PostgreSQL: the lock, skipped if
    held; SQLite: the one writer's lock, which the working request holds, is waited for."""
    with transaction.atomic():
        free = (IdempotencyKey.objects.select_for_update(skip_locked=True)
                .filter(pk=row.pk, status__isnull=True, created_at=row.created_at).first())
        if free is None:
            return False
        IdempotencyKey.objects.filter(pk=row.pk).update(created_at=now)
    row.created_at = now
    return True


def _new_row(org_id: int, key: str, fp: str, now) -> IdempotencyKey:
    return IdempotencyKey(org_id=org_id, key=key, fingerprint=fp, created_at=now,
                          expires_at=now + timedelta(seconds=settings.FAIRSCHED_API_IDEMPOTENCY_TTL_S))


def _claim(org_id: int, key: str, fp: str) -> IdempotencyKey | HttpResponse:
    """Insert the in-flight row, or answer from the row already there."""
    now = timezone.now()
    # PostgreSQL: insert first, one statement (ON CONFLICT DO NOTHING), the row read only if the
    # key was there: a new key is one round trip, not four (read, BEGIN, INSERT, COMMIT). SQLite:
    # read first, since an insert waits for the database's one writer, which the first request
    # holds while it works; the committed in-flight row is readable meanwhile.
    insert_first = transaction.get_connection().vendor != "sqlite"
    for _ in range(3):
        if insert_first:
            claimed = _new_row(org_id, key, fp, now)
            if insert_one(claimed, ignore_conflicts=True):
                return claimed
        row = IdempotencyKey.objects.filter(org_id=org_id, key=key).first()
        if row is None:
            if insert_first:  # deleted between the insert and the read (expired, or not stored)
                continue
            try:
                with transaction.atomic():
                    claimed = _new_row(org_id, key, fp, now)
                    claimed.save(force_insert=True)
                    return claimed
            except IntegrityError:  # another request inserted it meanwhile: read it
                continue
        if row.expires_at <= now:
            IdempotencyKey.objects.filter(pk=row.pk, expires_at=row.expires_at).delete()
            continue
        if row.fingerprint != fp:
            message = (f"{HEADER}: {key!r} was used in the last {settings.FAIRSCHED_API_IDEMPOTENCY_TTL_S // 3600} h "
                       "with a different request (method, path or body); use a new key for a new request.")
            raise Problem(422, message, kind="idempotency-key-reused", errors={HEADER: [message]})
        if row.status is None:
            if (now - row.created_at).total_seconds() > IN_FLIGHT_STALE_S and _take_over(row, now):
                return row
            done = IdempotencyKey.objects.filter(pk=row.pk, status__isnull=False).first()
            if done is not None:  # answered while this one waited to take it over
                return _replay(done)
            message = (f"{HEADER}: a request with {key!r} is still in flight; retry after it has been answered "
                       "(the retry gets its answer).")
            raise Problem(409, message, kind="idempotency-key-in-flight", errors={HEADER: [message]},
                          headers={"Retry-After": "1"})
        return _replay(row)
    raise Problem(409, f"{HEADER}: {key!r} is contended; retry.", kind="idempotency-key-in-flight",
                  errors={HEADER: [f"{HEADER}: {key!r} is contended; retry."]}, headers={"Retry-After": "1"})


def idempotent(request: HttpRequest, org_id: int, work: Callable[[], HttpResponse]) -> HttpResponse:
    """Run ``work`` once per (org, Idempotency-Key); without the header, just run it.
    ``work`` answers with a response or raises :class:`Problem` (answered, and stored)."""
    key = key_of(request)
    if key is None:
        return work()
    claimed = _claim(org_id, key, fingerprint(request))
    if isinstance(claimed, HttpResponse):
        return claimed
    row = claimed
    try:
        with transaction.atomic():
            # Held until the answer is stored: a retry that finds the row in flight and locked
            # knows this request is alive, however long it takes (_take_over).
            list(IdempotencyKey.objects.select_for_update().filter(pk=row.pk).values_list("pk", flat=True))
            try:
                response = work()
            except Problem as problem:
                response = problem.response(request)
            except ValidationError as exc:  # a service's refusal: stored like any answer
                response = from_validation(exc).response(request)
            if response.status_code in NOT_STORED or response.status_code >= 500:
                raise _NotStored(response)
            IdempotencyKey.objects.filter(pk=row.pk).update(
                status=response.status_code, content_type=response.get("Content-Type", "")[:100],
                body=response.content.decode(), location=response.get("Location", "")[:300])
            return response
    except _NotStored as not_stored:
        IdempotencyKey.objects.filter(pk=row.pk).delete()
        return not_stored.response
    except BaseException:
        IdempotencyKey.objects.filter(pk=row.pk).delete()
        raise


class _NotStored(Exception):
    """Rolls back ``work``'s transaction: its answer says "try again" (nothing is kept)."""

    def __init__(self, response: HttpResponse) -> None:
        super().__init__(response.status_code)
        self.response = response
