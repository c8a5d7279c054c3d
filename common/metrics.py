"""What the processes record for the Prometheus metrics: histograms and counters in Redis.

The web serves ``/metrics`` (``monitoring/``), but several processes see what the
histograms count: the scheduler (a chart's wait, its dispatch delay, an ETA pass),
whoever records an outcome (the worker's activity or the scheduler: the ETA error), the
web's API (its requests). So each observation is added to a **Redis hash**, one per
metric, and every web process renders the same hashes: the numbers do not depend on
which web process a scrape reaches, nor on which scheduler was leading. (prometheus-
client's multiprocess mode keeps one file per process on one machine's disk: it cannot
add up a scheduler on another machine, nor survive a web process's restart without its
own directory's bookkeeping; see docs/metrics.md.)

Layout (``fairsched:metrics:h:<name>``): field ``<label>|<i>`` counts the observations
in bucket ``i`` (the first bound ``>=`` the value; ``i == len(bounds)`` is +Inf), not
cumulative; ``<label>|sum`` their sum (HINCRBYFLOAT). ``<label>`` is the org's id for
the per-org histograms (the web maps it to the slug and caps the cardinality), empty
otherwise. The API's requests: ``fairsched:metrics:api``, field ``<endpoint>|<code>``.

A write never fails its caller: a Redis error is logged (at most once a minute) and the
observation is lost (the histograms are statistics, not the truth: the database is).
Neither the scheduler's loop nor a web request waits on Redis for them: the hooks hand the
write to a thread of their own (:func:`_in_background`); a scrape first waits for its own
process's (:func:`flush`).

The API engineer's hook: :func:`api_request_done` (``endpoint``, ``code``).
"""
from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import redis
from django.conf import settings

from common.lingering import LingeringSender

log = logging.getLogger(__name__)

PREFIX = "fairsched:metrics:"
HIST_KEY = PREFIX + "h:{}"
API_KEY = PREFIX + "api"


@dataclass(frozen=True)
class Histogram:
    name: str           # without the fairsched_ prefix
    help: str
    bounds: tuple[float, ...]
    per_org: bool = False

    @property
    def key(self) -> str:
        return HIST_KEY.format(self.name)


CHART_WAIT = Histogram(
    "chart_wait_seconds", "Seconds from a chart's creation to its start (dispatch), per org.",
    (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 259200), per_org=True)
DISPATCH_DELAY = Histogram(
    "dispatch_delay_seconds",
    "Seconds from a chart's turn (the later of its creation and the last release of budget "
    "before its start) to its start.",
    (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
ETA_ERROR = Histogram(
    "eta_error_seconds", "Absolute seconds between a succeeded chart's first published ETA and its finish.",
    (10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400))
ETA_PASS = Histogram(
    "eta_pass_seconds", "Seconds one successful ETA pass took (compute, snapshot, store).",
    (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
HISTOGRAMS = (CHART_WAIT, DISPATCH_DELAY, ETA_ERROR, ETA_PASS)


# --------------------------------------------------------------------- Redis writes
_client_lock = threading.Lock()
_client: tuple[int, str, redis.Redis] | None = None
_last_warning = [0.0]


def _redis() -> redis.Redis:
    """This process's client (a forked child makes its own), with short timeouts."""
    global _client
    with _client_lock:
        pid, url = os.getpid(), settings.REDIS_URL
        if _client is None or _client[:2] != (pid, url):
            _client = (pid, url, redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5))
        return _client[2]


Op = tuple[str, str, float]  # (key, field, amount)


def _write(ops: list[Op]) -> None:
    if not ops:
        return
    try:
        pipe = _redis().pipeline(transaction=False)
        for key, field, amount in ops:
            if isinstance(amount, int):
                pipe.hincrby(key, field, amount)
            else:
                pipe.hincrbyfloat(key, field, amount)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        now = time.monotonic()
        if now - _last_warning[0] > 60:
            _last_warning[0] = now
            log.warning("metrics not recorded (Redis: %s); the histograms miss these observations", exc)


_BACKLOG_MAX = 10_000  # batches waiting for Redis; past it (Redis down for long) new ones are dropped
LINGER_S = 0.05  # after a write, what comes within it goes in the next one, waking no one
# Items are lists of ops; a write sums the same field (:func:`_summed`).
_writer = LingeringSender("metrics-writer", lambda batches: _write(_summed([op for ops in batches for op in ops])),
                          linger_s=LINGER_S, batch=1000, size=len, backlog_max=_BACKLOG_MAX)


def _in_background(ops: list[Op]) -> None:
    """Hand ``ops`` to this process's writer thread: the scheduler's loop never waits on Redis."""
    if ops:
        _writer.put(ops)


def _summed(ops: list[Op]) -> list[Op]:
    """The same writes, one per (key, field): 300 API requests a second are a few increments."""
    total: dict[tuple[str, str], float] = {}
    for key, field, amount in ops:
        total[(key, field)] = total.get((key, field), 0) + amount
    return [(key, field, amount) for (key, field), amount in total.items()]


def flush(timeout: float = 5.0) -> bool:
    """Wait until the background writes handed over so far are written (tests, a warm stop)."""
    return _writer.flush(timeout)


def observations(h: Histogram, values: Iterable[tuple[str, float]]) -> list[Op]:
    """The writes that add each ``(label, value)`` to ``h``."""
    counts: dict[str, int] = {}
    sums: dict[str, float] = {}
    for label, value in values:
        value = max(0.0, float(value))
        field = f"{label}|{bisect.bisect_left(h.bounds, value)}"
        counts[field] = counts.get(field, 0) + 1
        sums[label] = sums.get(label, 0.0) + value
    return [(h.key, f, n) for f, n in counts.items()] + [(h.key, f"{label}|sum", s) for label, s in sums.items()]


# --------------------------------------------------------------------- the hooks
def api_request_done(endpoint: str, code: int) -> None:
    """One request to the producer API answered: ``fairsched_api_requests_total{endpoint,code}``.
    ``endpoint`` is the route's name or pattern (``"charts.create"``, ``"/api/v1/charts"``), never
    the path with an id in it (one series per chart). Written by this process's writer thread
    (:func:`_in_background`): a web process runs its requests on one thread, and a round trip
    to Redis per request held the next request back by it; a scrape flushes them first."""
    _in_background([(API_KEY, f"{endpoint.replace('|', '/')}|{int(code)}", 1)])


def chart_succeeded(first_eta_at: float | None, finished_at: float) -> None:
    """A chart finished successfully (on commit of its outcome): how far off its first ETA was."""
    if first_eta_at is not None:
        _write(observations(ETA_ERROR, [("", abs(finished_at - first_eta_at))]))


class _Turns:
    """The scheduler's side: when budget was last released (a running chart's workflow closed)."""

    freed_at: float | None = None


def budget_freed(at: float) -> None:
    """The scheduler released a closed workflow's cost at ``at`` (epoch seconds)."""
    _Turns.freed_at = at if _Turns.freed_at is None else max(_Turns.freed_at, at)


def charts_started(charts: Iterable[tuple[int, float]], at: float) -> None:
    """The scheduler committed the start of ``charts`` (``(org id, created_at)``, epoch seconds)
    at ``at``: each one's wait (creation to start) and dispatch delay (its turn to its start;
    its turn is the later of its creation and the last release of budget before ``at``; not
    observed before this process has seen a release: see docs/metrics.md)."""
    charts = list(charts)
    freed = _Turns.freed_at
    ops = observations(CHART_WAIT, [(str(org), at - created) for org, created in charts])
    if freed is not None:
        ops += observations(DISPATCH_DELAY, [("", at - max(created, min(freed, at))) for _, created in charts])
    _in_background(ops)


def eta_pass_done(seconds: float) -> None:
    """One ETA pass succeeded in ``seconds``."""
    _in_background(observations(ETA_PASS, [("", seconds)]))


# --------------------------------------------------------------------- reads (the web)
def redis_client() -> redis.Redis:
    """This process's client for the metrics' keys (short timeouts)."""
    return _redis()


def queue_reads(pipe) -> None:
    """Add the reads of every histogram and of the API counter to ``pipe`` (one round trip
    with the caller's own reads); :func:`parse_reads` reads their answers."""
    for h in HISTOGRAMS:
        pipe.hgetall(h.key)
    pipe.hgetall(API_KEY)


def parse_reads(answers: list) -> tuple[dict[str, dict[str, tuple[list[int], float]]], dict[tuple[str, str], int]]:
    """``({name: {label: (counts per bucket, the last +Inf; sum)}}, {(endpoint, code): requests})``
    from the answers to :func:`queue_reads`."""
    hists: dict[str, dict[str, tuple[list[int], float]]] = {}
    for h, raw in zip(HISTOGRAMS, answers):
        per: dict[str, tuple[list[int], float]] = {}
        for fld, value in raw.items():
            label, _, part = fld.decode().rpartition("|")
            counts, total = per.get(label, ([0] * (len(h.bounds) + 1), 0.0))
            if part == "sum":
                total = float(value)
            elif part.isdigit() and int(part) <= len(h.bounds):
                counts[int(part)] += int(value)
            per[label] = (counts, total)
        hists[h.name] = per
    api = {}
    for fld, value in answers[len(HISTOGRAMS)].items():
        endpoint, _, code = fld.decode().rpartition("|")
        api[(endpoint, code)] = int(value)
    return hists, api


def read_histograms() -> dict[str, dict[str, tuple[list[int], float]]]:
    """Every histogram (tests, tools)."""
    pipe = _redis().pipeline(transaction=False)
    queue_reads(pipe)
    return parse_reads(pipe.execute())[0]
