"""A rate limit per API key: a token bucket in Redis, shared by every web process.

Each key has a bucket of ``FAIRSCHED_API_BURST`` tokens refilled at ``FAIRSCHED_API_RATE``
per second; a request takes one (a batch of 1,000 charts is one request). An empty bucket
answers 429 with ``Retry-After``: the whole seconds until a token is back. The bucket is
one Redis hash per key (``fairsched:api:rate:<key id>``, expiring once full again) updated
by one Lua script, atomic whichever process runs it, timed by Redis's own clock (``TIME``),
so web processes on machines whose clocks differ share one limit.

A web process takes up to ``LEASE_S`` (50 ms) of a key's rate from the bucket at once and
spends it on the key's next requests without asking Redis again (a web process runs its
requests on one thread: a round trip per request held every other request back by it). The
bucket is never overdrawn, whichever process spends what it took: a lease is tokens taken
out of it. A lease not spent within ``LEASE_TTL_S`` (5 s) is dropped, so a process never
holds a key's tokens for long: a key loses at most 50 ms of its rate in 5 s (1%) to a lease
a process did not spend. Below 40 requests a second (``LEASE_S`` x the rate under 2) a lease
is one token, a round trip per request as before.

When Redis cannot be reached the request is let through (and logged, at most once a
minute): the limit protects the backlog from a runaway producer, it must not stop every
producer while Redis restarts.
"""
from __future__ import annotations

import logging
import math
import threading
import time

from django.conf import settings

from common.notify import redis_client

log = logging.getLogger(__name__)

KEY = "fairsched:api:rate:{}"
_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3] or '1')
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local got = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(got[1])
local at = tonumber(got[2])
if tokens == nil or at == nil then tokens = burst; at = now end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local granted = 0
if tokens >= 1 then granted = math.min(want, math.floor(tokens)); tokens = tokens - granted end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
if granted >= 1 then return {granted, '0'} end
return {0, tostring((1 - tokens) / rate)}
"""
LEASE_S = 0.05
LEASE_TTL_S = 5.0
_script = None
_warned_at = -1e9
_leases: dict[tuple[int, float, int], tuple[int, float]] = {}  # (key, rate, burst) -> (tokens, until)
_leases_lock = threading.Lock()


def lease_size(rate: float, burst: int) -> int:
    """How many tokens one round trip takes: ``LEASE_S`` of the rate, at least 1, at most the burst."""
    return max(1, min(burst, int(rate * LEASE_S)))


def leased(key_id: int) -> int:
    """The tokens of key ``key_id``'s bucket (at the current rate and burst) this process
    holds and spends without asking Redis: 0 when it holds none or its lease's time is over."""
    held = (key_id, float(settings.FAIRSCHED_API_RATE), int(settings.FAIRSCHED_API_BURST))
    with _leases_lock:
        tokens, until = _leases.get(held, (0, 0.0))
    return tokens if until > time.monotonic() else 0


def drop_leases() -> None:
    """Forget every lease this process holds (their tokens are lost to the buckets, as when
    a web process exits): what another web process, which holds none, sees."""
    with _leases_lock:
        _leases.clear()


def _spend_lease(held: tuple[int, float, int]) -> bool:
    with _leases_lock:
        tokens, until = _leases.get(held, (0, 0.0))
        if tokens < 1 or until <= time.monotonic():
            _leases.pop(held, None)
            return False
        _leases[held] = (tokens - 1, until)
        return True


def take(key_id: int) -> float | None:
    """Take a token of key ``key_id``'s bucket: None if allowed, else the seconds to wait."""
    global _script, _warned_at
    rate, burst = float(settings.FAIRSCHED_API_RATE), int(settings.FAIRSCHED_API_BURST)
    if rate <= 0:
        return None
    held = (key_id, rate, burst)
    if _spend_lease(held):
        return None
    want = lease_size(rate, burst)
    try:
        client = redis_client()
        if _script is None or _script.registered_client is not client:
            _script = client.register_script(_SCRIPT)
        granted, wait = _script(keys=[KEY.format(key_id)], args=[rate, burst, want])
    except Exception as exc:  # noqa: BLE001 - Redis down: let it through, say so
        if time.monotonic() - _warned_at > 60:
            _warned_at = time.monotonic()
            log.warning("API rate limit not applied: Redis unreachable (%s)", exc)
        return None
    granted = int(granted)
    if granted < 1:
        return max(0.0, float(wait))
    if granted > 1:  # this request takes one; the rest are this process's for LEASE_TTL_S
        now = time.monotonic()
        with _leases_lock:
            if len(_leases) > 10_000:  # keys seen once and never again
                for stale in [k for k, (_, until) in _leases.items() if until <= now]:
                    del _leases[stale]
            tokens, until = _leases.get(held, (0, 0.0))
            _leases[held] = ((tokens if until > now else 0) + granted - 1, now + LEASE_TTL_S)
    return None


def retry_after(wait_s: float) -> str:
    """``Retry-After`` in whole seconds, at least 1 (a client that waits it finds a token)."""
    return str(max(1, math.ceil(wait_s)))
