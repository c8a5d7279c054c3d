"""Which workflow-start errors a retry can cure, and how long one chart may keep trying.

Pure (no I/O, no clock): the dispatcher (:mod:`fairsched.engine.dispatcher`) asks
:meth:`StartFailures.verdict` after each failed start and carries out the answer. The
Temporal port judges the error itself (:func:`fairsched.engine.ports.temporal.classify`,
re-exported here): a failed start reaches the dispatcher as a ``StartFailed``.

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

from dataclasses import dataclass

# The classification is the Temporal port's (it knows Temporal's errors); re-exported here.
from fairsched.engine.ports.temporal import PERMANENT, TRANSIENT, UNKNOWN, classify, describe

__all__ = ["MAX_UNKNOWN_ATTEMPTS", "PERMANENT", "TRANSIENT", "UNKNOWN", "StartFailures", "Verdict", "classify",
           "describe"]

MAX_UNKNOWN_ATTEMPTS = 5


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
