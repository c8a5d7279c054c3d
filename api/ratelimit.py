"""A rate limit per API key: a token bucket in Redis, shared by every web process.

Each key has a bucket of ``FAIRSCHED_API_BURST`` tokens refilled at ``FAIRSCHED_API_RATE``
per second; a request takes one (a batch of 1,000 charts is one request). An empty bucket
answers 429 with ``Retry-After``: the whole seconds until a token is back. The bucket is
one Redis hash per key (``fairsched:api:rate:<key id>``, expiring once full again) updated
by one Lua script, atomic whichever process runs it, timed by Redis's own clock (``TIME``),
so web processes on machines whose clocks differ share one limit.

When Redis cannot be reached the request is let through (and logged, at most once a
minute): the limit protects the backlog from a runaway producer, it must not stop every
producer while Redis restarts.
"""
from __future__ import annotations

import logging
import math
import time

from django.conf import settings

from common.notify import redis_client

log = logging.getLogger(__name__)

KEY = "fairsched:api:rate:{}"
_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local got = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(got[1])
local at = tonumber(got[2])
if tokens == nil or at == nil then tokens = burst; at = now end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
if allowed == 1 then return {1, '0'} end
return {0, tostring((1 - tokens) / rate)}
"""
_script = None
_warned_at = -1e9


def take(key_id: int) -> float | None:
    """Take a token of key ``key_id``'s bucket: None if allowed, else the seconds to wait."""
    global _script, _warned_at
    rate, burst = float(settings.FAIRSCHED_API_RATE), int(settings.FAIRSCHED_API_BURST)
    if rate <= 0:
        return None
    try:
        client = redis_client()
        if _script is None or _script.registered_client is not client:
            _script = client.register_script(_SCRIPT)
        allowed, wait = _script(keys=[KEY.format(key_id)], args=[rate, burst])
    except Exception as exc:  # noqa: BLE001 - Redis down: let it through, say so
        if time.monotonic() - _warned_at > 60:
            _warned_at = time.monotonic()
            log.warning("API rate limit not applied: Redis unreachable (%s)", exc)
        return None
    return None if int(allowed) == 1 else max(0.0, float(wait))


def retry_after(wait_s: float) -> str:
    """``Retry-After`` in whole seconds, at least 1 (a client that waits it finds a token)."""
    return str(max(1, math.ceil(wait_s)))
