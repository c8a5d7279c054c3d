"""Which workflow-start errors a retry can cure, and how long one chart may keep trying.

Pure (no I/O, no clock): the live loop (:mod:`fairsched.engine.scheduler`) asks
:meth:`StartFailures.verdict` after each failed start and carries out the answer.

The rule, in the order it applies:

1. **Refused for good** (:data:`PERMANENT`): Temporal says the request itself is
   wrong, so the same request fails the same way for ever. ``INVALID_ARGUMENT``
   (a payload over Temporal's blob limit, "Blob data size exceeds limit"; a
   malformed task queue or timeout), ``RESOURCE_EXHAUSTED`` about the *message
   size* ("received message larger than max"), and an input the data converter
   cannot serialise (``TypeError``/``ValueError``/...). The chart is failed at
   once with the reason in its ``error``; the order moves on.
2. **Temporal unavailable** (:data:`TRANSIENT`): every status but those of 1. and 3.
   (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``CANCELLED``, ``INTERNAL``, ``UNKNOWN``,
   ``ABORTED``, ``DATA_LOSS``, ``UNIMPLEMENTED``, a rate limit: ``RESOURCE_EXHAUSTED``
   about anything else, ``FAILED_PRECONDITION``: a namespace not active in this
   cluster), the scheduler's own configuration (``NOT_FOUND``: no such namespace,
   ``PERMISSION_DENIED``, ``UNAUTHENTICATED``) and transport errors (``OSError``, a
   timeout). ``INTERNAL`` and ``UNKNOWN`` are what gRPC makes of a proxy in front of
   Temporal answering HTTP 500 or 502: Temporal may never have seen the request, and
   nothing says the chart is at fault. Every chart would fail the same way, so none is
   blamed and none is counted: dispatch backs off (0.5 s doubling to 10 s) and the chart
   keeps its place, for as long as it lasts.
3. **Anything else** (:data:`UNKNOWN`): a status about the request that does not prove
   it bad for ever (``OUT_OF_RANGE``, an ``ALREADY_EXISTS`` that is not the
   already-started error) and any other exception (the SDK or this code tripping on
   this chart's input). Retried with the same backoff, but at most
   :data:`MAX_UNKNOWN_ATTEMPTS` times per chart; then the chart is failed with the
   last error. So no such chart holds the head of the order for more than 5 attempts
   (about 8 s of backoff).

The counts live in the scheduler's memory: a restarted scheduler starts them
afresh (a bound per process, never an unbounded loop).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.service import RPCError, RPCStatusCode

PERMANENT, TRANSIENT, UNKNOWN = "permanent", "transient", "unknown"
MAX_UNKNOWN_ATTEMPTS = 5

# About the request, without proving it bad for ever: counted against the chart.
# INVALID_ARGUMENT (and RESOURCE_EXHAUSTED about the size) prove it: refused at once.
# Every other status is Temporal's (or what stands in front of it): never the chart's.
_REQUEST_STATUS = frozenset({RPCStatusCode.OUT_OF_RANGE, RPCStatusCode.ALREADY_EXISTS})
_SIZE_WORDS = ("larger than max", "message size", "message too large")
# What the data converter raises for an input it cannot encode (json.dumps and friends).
_SERIALISE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError, UnicodeError)


def classify(exc: BaseException) -> str:
    """:data:`PERMANENT`, :data:`TRANSIENT` or :data:`UNKNOWN` for a failed start."""
    if isinstance(exc, RPCError):
        if exc.status == RPCStatusCode.INVALID_ARGUMENT:
            return PERMANENT
        if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
            text = (exc.message or str(exc)).lower()
            return PERMANENT if any(w in text for w in _SIZE_WORDS) else TRANSIENT
        return UNKNOWN if exc.status in _REQUEST_STATUS else TRANSIENT
    if isinstance(exc, _SERIALISE_ERRORS):
        return PERMANENT
    if isinstance(exc, (asyncio.TimeoutError, OSError)):  # transport: ConnectionError, a timeout, ...
        return TRANSIENT
    return UNKNOWN


def describe(exc: BaseException) -> str:
    """One line for a chart's ``error``: what refused it and why."""
    if isinstance(exc, RPCError):
        return f"Temporal refused to start the workflow ({exc.status.name if exc.status else 'error'}): " \
               f"{exc.message or exc}"
    if isinstance(exc, _SERIALISE_ERRORS):
        return f"the workflow input cannot be serialised ({type(exc).__name__}): {exc}"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class Verdict:
    fail: bool        # fail the chart now (else it stays queued and is tried again)
    kind: str         # PERMANENT / TRANSIENT / UNKNOWN
    reason: str       # the chart's error if failed; the log line's cause otherwise
    attempts: int = 0  # failed attempts of the UNKNOWN kind so far


class StartFailures:
    """Failed start attempts per chart; :meth:`verdict` applies the module's rule."""

    def __init__(self, max_unknown: int = MAX_UNKNOWN_ATTEMPTS) -> None:
        self.max_unknown = max_unknown
        self.attempts: dict[int, int] = {}

    def verdict(self, chart_id: int, exc: BaseException) -> Verdict:
        kind = classify(exc)
        reason = describe(exc)
        if kind == PERMANENT:
            self.attempts.pop(chart_id, None)
            return Verdict(True, kind, f"cannot start: {reason}")
        if kind == TRANSIENT:
            return Verdict(False, kind, reason, self.attempts.get(chart_id, 0))
        n = self.attempts[chart_id] = self.attempts.get(chart_id, 0) + 1
        if n >= self.max_unknown:
            return Verdict(True, kind, f"cannot start: {n} attempts failed; the last: {reason}", n)
        return Verdict(False, kind, reason, n)

    def forget(self, chart_id: int) -> None:
        """The chart started, or left the queue: its count no longer matters."""
        self.attempts.pop(chart_id, None)
