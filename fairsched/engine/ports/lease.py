"""One active scheduler: a Redis lease (``SET NX PX``, renewed while alive).

The lease is an efficiency measure, not a correctness one: two schedulers
that both believe they lead still never run a chart twice (workflow ids and
compare-and-set do that). A holder that cannot renew for a whole lease term
stops dispatching until it holds the lease again.
"""
from __future__ import annotations

import os
import socket
import uuid

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

LEASE_KEY = "fairsched:scheduler:lease"

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class Lease:
    """``acquire()`` / ``renew()`` / ``release()`` of one token; all raise ``redis.RedisError`` when Redis is down."""

    def __init__(self, client: aredis.Redis, ttl_s: float, key: str = LEASE_KEY) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = int(ttl_s * 1000)
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    async def acquire(self) -> bool:
        """Take the lease if free (or already ours, e.g. after a Redis restart lost it)."""
        if await self.renew():
            return True
        return bool(await self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    async def renew(self) -> bool:
        return bool(await self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))

    async def release(self) -> None:
        await self.client.eval(_RELEASE, 1, self.key, self.token)

    async def holder(self) -> str | None:
        raw = await self.client.get(self.key)
        return raw.decode() if raw else None

    def renew_sync(self, client: redis.Redis) -> bool:
        """:meth:`renew` through a synchronous client (the lease keeper's own thread)."""
        return bool(client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))

    def acquire_sync(self, client: redis.Redis) -> bool:
        if self.renew_sync(client):
            return True
        return bool(client.set(self.key, self.token, nx=True, px=self.ttl_ms))


def release_now(url: str, token: str, key: str = LEASE_KEY, timeout_s: float = 1.0) -> bool:
    """Release ``token``'s lease synchronously, only if it still holds it (no event loop needed:
    for a forced exit, when the loop is stuck). One try, short timeouts; raises ``redis.RedisError``."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                  retry=Retry(NoBackoff(), 0))
    try:
        return bool(client.eval(_RELEASE, 1, key, token))
    finally:
        client.close()
