"""The lease port, the notification source and the preview port over Redis (the ports:
:mod:`fairsched.engine.ports.protocols`); the lease itself is :mod:`fairsched.engine.ports.lease`.

Redis stops here: every ``redis.RedisError`` (and the ``OSError`` of a socket) becomes
the port's :class:`~fairsched.engine.ports.protocols.Unavailable`. The rest of the scheduler never
imports ``redis``.
"""
from __future__ import annotations

import redis
import redis.asyncio as aredis

from common.notify import CHANNEL, Note
from common.previews import REQUEST_TTL_S, REQUESTS, answer_key
from fairsched.engine.notes import read_note
from fairsched.engine.ports.lease import LEASE_KEY, Lease, release_now
from fairsched.engine.ports.protocols import Unavailable

_DOWN = (redis.RedisError, OSError)


class _Keeper:
    """The keeper thread's synchronous connection."""

    def __init__(self, lease: Lease, url: str) -> None:
        self.lease = lease
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1)

    def renew(self) -> bool:
        try:
            return self.lease.acquire_sync(self.client)
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc

    def close(self) -> None:
        self.client.close()


class RedisLease:
    """The lease (:class:`fairsched.engine.ports.lease.Lease`: ``SET NX PX``, renewed by compare-and-expire)."""

    def __init__(self, url: str, ttl_s: float, key: str = LEASE_KEY) -> None:
        self.url = url
        self.client = aredis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1)
        self.lease = Lease(self.client, ttl_s, key)

    @property
    def token(self) -> str:
        return self.lease.token

    @property
    def key(self) -> str:
        return self.lease.key

    async def acquire(self) -> bool:
        try:
            return await self.lease.acquire()
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc

    async def holder(self) -> str | None:
        try:
            return await self.lease.holder()
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc

    def keeper(self) -> _Keeper:
        return _Keeper(self.lease, self.url)

    def release_now(self, timeout_s: float) -> None:
        try:
            release_now(self.url, self.lease.token, self.lease.key, timeout_s=timeout_s)
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc

    async def aclose(self) -> None:
        try:
            await self.client.aclose()
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc


class _Subscription:
    def __init__(self, pubsub) -> None:
        self.pubsub = pubsub

    async def next_note(self, timeout_s: float) -> Note | None:
        try:
            message = await self.pubsub.get_message(timeout=timeout_s)
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc
        if message is None or message.get("type") != "message":
            return None
        return read_note(message["data"])

    async def aclose(self) -> None:
        await self.pubsub.aclose()


class RedisNotifications:
    """The scheduler's channel (:data:`common.notify.CHANNEL`), Redis pub/sub."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: aredis.Redis | None = None

    async def subscribe(self) -> _Subscription:
        if self._client is None:
            self._client = aredis.Redis.from_url(self.url, socket_connect_timeout=1, health_check_interval=5)
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(CHANNEL)
        except _DOWN as exc:
            try:
                await pubsub.aclose()
            except Exception:  # noqa: BLE001
                pass
            raise Unavailable(str(exc)) from exc
        return _Subscription(pubsub)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


class RedisPreviews:
    """The what-if previews' requests and answers (:mod:`common.previews`), on a connection of
    their own (a blocking pop must not hold the notifications' or the lease's)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: aredis.Redis | None = None

    def _c(self) -> aredis.Redis:
        if self._client is None:
            self._client = aredis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=None)
        return self._client

    async def next_request(self, timeout_s: float) -> bytes | None:
        try:
            got = await self._c().blpop([REQUESTS], timeout=timeout_s)
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc
        return None if got is None else got[1]

    async def answer(self, request_id: str, body: str) -> None:
        key = answer_key(request_id)
        try:
            pipe = self._c().pipeline()
            pipe.rpush(key, body)
            pipe.expire(key, REQUEST_TTL_S)
            await pipe.execute()
        except _DOWN as exc:
            raise Unavailable(str(exc)) from exc

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
