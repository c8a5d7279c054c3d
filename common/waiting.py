"""Waiting for a dependency at start-up, so processes can start in any order."""
from __future__ import annotations

import logging
import time

import redis

log = logging.getLogger(__name__)


def wait_for_redis(url: str, *, max_delay_s: float = 10.0) -> None:
    """Block until Redis at ``url`` answers PING, retrying with capped exponential backoff."""
    delay, attempt = 0.25, 0
    while True:
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2).ping()
        except (redis.RedisError, OSError) as exc:
            attempt += 1
            if attempt == 1 or attempt % 10 == 0:
                log.warning("waiting for Redis at %s (%s); retrying", url, exc)
            time.sleep(delay)
            delay = min(max_delay_s, delay * 2)
            continue
        if attempt:
            log.info("Redis at %s answers; starting", url)
        return
