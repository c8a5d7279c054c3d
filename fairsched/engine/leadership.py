"""Leadership: the lease (one active scheduler) and the notification listener.

The lease is taken in standby (:meth:`Leadership.acquire_lease`), renewed from a thread
of its own while leading (:meth:`Leadership.keep_lease`: a busy loop never misses a
renewal; dispatch checks ``ok_until`` by monotonic time, :meth:`Scheduler.may_dispatch`),
and released for good at a stop (:meth:`Leadership.close_lease`). The listener
(:meth:`Leadership.listen`) appends the notifications to the host's notes and asks
for a resync after a reconnect. Both reach Redis through their ports
(:class:`~fairsched.engine.ports.protocols.LeasePort`, :class:`~fairsched.engine.ports.protocols.NotificationSource`).
"""
from __future__ import annotations

import asyncio
import logging
import threading

from fairsched.engine.host import Host, Part
from fairsched.engine.ports.protocols import LeasePort, NotificationSource, Unavailable

log = logging.getLogger("fairsched.engine")


class LeaseLost(Exception):
    """Another scheduler holds the lease: step down to standby."""


class Leadership(Part):
    def __init__(self, host: Host, lease: LeasePort, notifications: NotificationSource) -> None:
        super().__init__(host)
        self.lease = lease
        self.notifications = notifications
        self.ok_until = 0.0  # dispatch only before this (monotonic): the last renewal plus the lease term
        self.gen = 0  # the lease keeper thread of this generation renews; others end
        # The keeper's renewal and the final release take turns under this lock, and the
        # keeper renews only while the lease is not closed: a renewal that had passed its
        # checks when the stop released the lease could otherwise take it back (its SET NX).
        self.lock = threading.Lock()
        self.closed = False
        self.lost = False
        self.started = False  # run() began: there may be a lease to release

    # ---------------------------------------------------------------- the lease
    async def lease_holder(self) -> str | None:
        try:
            return await self.lease.holder()
        except Unavailable:
            return None

    async def acquire_lease(self) -> bool:
        host = self.host
        backoff = self.backoff()
        announced = False
        while not host.loop.stop.is_set():
            try:
                if await self.lease.acquire():
                    self.ok_until = self.clock.monotonic() + host.LEASE_TTL_S
                    log.info("lease %s acquired: this scheduler is active", self.lease.token)
                    return True
                backoff.ok()
                if not announced:
                    log.info("standby: the lease is held by %s", await self.lease_holder())
                    announced = True
                delay = host.STANDBY_POLL_S
            except Unavailable as exc:
                delay = backoff.fail(self.clock.monotonic())
                log.warning("Redis unreachable while taking the lease (%s); retrying in %.1f s", exc, delay)
            await host.sleep(delay)
        return False

    def close_lease(self, timeout_s: float) -> None:
        """Release the lease for good (blocking; the last thing a stop does with it): no renewal
        starts after this, and one in flight finishes first (up to ``timeout_s``), so the
        lease is gone when this returns, unless Redis itself does not answer."""
        self.closed = True
        if not self.started:
            return
        locked = self.lock.acquire(timeout=timeout_s)
        try:
            self.lease.release_now(timeout_s)
        finally:
            if locked:
                self.lock.release()

    async def keep_lease(self) -> None:
        """Renew the lease from a thread of its own: a busy loop (a large resync, a slow
        database call) can never make it miss a renewal; dispatch checks the lease by
        monotonic time (:meth:`Scheduler.may_dispatch`)."""
        loop = asyncio.get_running_loop()
        self.gen += 1
        gen = self.gen
        try:
            await asyncio.to_thread(self._keep_lease_blocking, loop, gen)
        finally:
            self.gen += 1  # cancelled (step down): the thread ends at its next renewal

    def _keep_lease_blocking(self, loop: asyncio.AbstractEventLoop, gen: int) -> None:
        host = self.host
        keeper = self.lease.keeper()
        warned = False
        try:
            while not host.loop.stop.is_set() and gen == self.gen:
                self.clock.sleep_blocking(host.LEASE_RENEW_S)
                try:
                    with self.lock:
                        if self.closed or host.loop.stop.is_set() or gen != self.gen:
                            return
                        ok = keeper.renew()
                except Unavailable as exc:
                    if not warned:
                        log.warning("cannot renew the lease (%s); dispatch pauses %.1f s after the last renewal",
                                    exc, host.LEASE_TTL_S)
                        warned = True
                    continue
                if not ok:
                    self.lost = True
                    loop.call_soon_threadsafe(host.loop.wake.set)
                    return
                if warned or self.clock.monotonic() >= self.ok_until:
                    log.info("lease renewed again: dispatch resumes (after a resync)")
                    host.loop.resync_requested = True
                    loop.call_soon_threadsafe(host.loop.wake.set)
                warned = False
                self.ok_until = self.clock.monotonic() + host.LEASE_TTL_S
        except RuntimeError:  # the loop closed under us: the scheduler is gone
            return
        finally:
            keeper.close()

    # ---------------------------------------------------------------- the listener
    async def listen(self) -> None:
        """Append scheduler notifications to the host's notes; after a reconnect ask for a resync."""
        host = self.host
        backoff = self.backoff()
        first = True
        try:
            while True:
                sub = None
                try:
                    sub = await self.notifications.subscribe()
                    if not first:
                        log.info("notifications: subscribed again; resyncing what was missed")
                        host.loop.request_resync()
                    first = False
                    backoff.ok()
                    while True:
                        note = await sub.next_note(1.0)
                        if note is None:
                            continue
                        host.loop.report_note(note)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - Redis down: back off, reconnect
                    delay = backoff.fail(self.clock.monotonic())
                    if backoff.failures == 1:
                        log.warning("notifications: Redis unreachable (%s); the resync covers; retrying", exc)
                    await self.clock.sleep(delay)
                finally:
                    if sub is not None:
                        try:
                            await sub.aclose()
                        except Exception:  # noqa: BLE001
                            pass
        finally:
            await self.notifications.aclose()
