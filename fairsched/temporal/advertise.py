"""A worker's advertised capacity: its Temporal identity and activity slots, in Redis.

Temporal's DescribeTaskQueue lists a task queue's pollers (identity, last poll) but not
how many activities each runs at once. So each ``runworker`` writes

    fairsched:worker:<task queue>:<identity>  ->  {"identity", "task_queue", "slots", "host", "pid", "at"}

with a TTL of :data:`ADVERT_TTL_S`, refreshed every :data:`ADVERT_REFRESH_S`, and removes it on a
warm stop. It also lists its identity in the task queue's index

    fairsched:workers:<task queue>  ->  sorted set {identity: at}

so the capacity check (:mod:`fairsched.temporal.capacity`) finds every advertised worker,
including one whose slots are all busy and that has stopped polling for activities (Temporal
then drops it from the task queue's pollers), without scanning Redis's keys. The index only
names workers: a worker counts while its own key lives (the check prunes names whose key
has expired).
Redis is a nice-to-have here: an outage is logged and the worker goes on running activities.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from typing import Any

log = logging.getLogger(__name__)

ADVERT_TTL_S = 30
ADVERT_REFRESH_S = 10.0
IDENTITY_SUFFIX = ":fairsched"
KEY_PREFIX = "fairsched:worker:"
INDEX_PREFIX = "fairsched:workers:"


def worker_identity() -> str:
    """``<hostname>:<pid>:fairsched``: the Temporal identity a ``runworker`` polls with."""
    return f"{socket.gethostname()}:{os.getpid()}{IDENTITY_SUFFIX}"


def is_fairsched_identity(identity: str) -> bool:
    return identity.endswith(IDENTITY_SUFFIX)


def advert_key(task_queue: str, identity: str) -> str:
    return f"{KEY_PREFIX}{task_queue}:{identity}"


def advert_index(task_queue: str) -> str:
    """The task queue's index of advertised identities (a sorted set, scored by the last refresh)."""
    return f"{INDEX_PREFIX}{task_queue}"


def advert_value(*, identity: str, task_queue: str, slots: int, now: float | None = None) -> dict[str, Any]:
    return {"identity": identity, "task_queue": task_queue, "slots": int(slots), "host": socket.gethostname(),
            "pid": os.getpid(), "at": time.time() if now is None else now}


def _client(redis_url: str):
    import redis

    return redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=1)


class Advertiser:
    """Writes one worker's advertisement until stopped; never raises out of its methods."""

    def __init__(self, *, redis_url: str, task_queue: str, identity: str, slots: int,
                 refresh_s: float = ADVERT_REFRESH_S, ttl_s: int = ADVERT_TTL_S) -> None:
        self.redis_url = redis_url
        self.task_queue = task_queue
        self.identity = identity
        self.slots = slots
        self.refresh_s = refresh_s
        self.ttl_s = ttl_s
        self.key = advert_key(task_queue, identity)
        self.index = advert_index(task_queue)
        self._redis = None
        self._failing = False

    def _r(self):
        if self._redis is None:
            self._redis = _client(self.redis_url)
        return self._redis

    def write(self) -> bool:
        """One refresh (blocking, at most a few seconds on a Redis outage). True when written."""
        value = advert_value(identity=self.identity, task_queue=self.task_queue, slots=self.slots)
        try:
            pipe = self._r().pipeline()
            pipe.set(self.key, json.dumps(value), ex=self.ttl_s)
            pipe.zadd(self.index, {self.identity: value["at"]})
            pipe.expire(self.index, self.ttl_s)  # gone with the queue's last worker
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - Redis down must never stop the worker
            if not self._failing:
                log.warning("could not advertise this worker's %d activity slots in Redis (%s); "
                            "the dashboard's capacity check will not count them until Redis answers",
                            self.slots, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("advertising this worker's %d activity slots in Redis again", self.slots)
        self._failing = False
        return True

    def remove(self) -> None:
        try:
            pipe = self._r().pipeline()
            pipe.delete(self.key)
            pipe.zrem(self.index, self.identity)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001
            log.warning("could not remove this worker's advertisement %s from Redis (%s); it expires in %d s",
                        self.key, exc, self.ttl_s)

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh until ``stop`` is set, then remove the advertisement (a warm stop)."""
        log.info("advertising %d activity slots as %r (Redis key %s, refreshed every %g s)",
                 self.slots, self.identity, self.key, self.refresh_s)
        try:
            while not stop.is_set():
                await asyncio.to_thread(self.write)
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.refresh_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            await asyncio.to_thread(self.remove)
