"""Leadership alone (:mod:`fairsched.engine.leadership`): the lease and the listener,
over fake lease and notification ports (no Redis) and a fake clock."""
from __future__ import annotations

import asyncio
import threading

from common.notify import ChartNote, Note
from fairsched.engine.leadership import Leadership
from fairsched.engine.ports.protocols import Unavailable
from tests.engine.fakes import FakeHost


class FakeKeeper:
    def __init__(self, lease: "FakeLease") -> None:
        self.lease = lease
        self.closed = False

    def renew(self) -> bool:
        self.lease.renewals += 1
        answer = self.lease.renew_answers.pop(0) if self.lease.renew_answers else True
        if isinstance(answer, Exception):
            raise answer
        return answer


    def close(self) -> None:
        self.closed = True


class FakeLease:
    token = "me"

    def __init__(self, answers=()) -> None:
        self.answers = list(answers)  # what acquire() says (or raises), in turn; then True
        self.renew_answers: list = []
        self.renewals = 0
        self.released: list[float] = []
        self.keepers: list[FakeKeeper] = []

    async def acquire(self) -> bool:
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def holder(self):
        return "another"

    def keeper(self) -> FakeKeeper:
        self.keepers.append(FakeKeeper(self))
        return self.keepers[-1]

    def release_now(self, timeout_s: float) -> None:
        self.released.append(timeout_s)

    async def aclose(self) -> None:
        pass


class FakeSubscription:
    def __init__(self, source: "FakeNotifications") -> None:
        self.source = source

    async def next_note(self, timeout_s: float):
        if self.source.fail_next:
            self.source.fail_next = False
            raise Unavailable("connection reset")
        if self.source.queue:
            return self.source.queue.pop(0)
        await asyncio.sleep(0)
        return None

    async def aclose(self) -> None:
        pass


class FakeNotifications:
    def __init__(self) -> None:
        self.queue: list[Note] = []
        self.subscribed = 0
        self.fail_next = False

    async def subscribe(self) -> FakeSubscription:
        self.subscribed += 1
        return FakeSubscription(self)

    async def aclose(self) -> None:
        pass


def leadership(lease=None) -> Leadership:
    return Leadership(FakeHost(), lease or FakeLease(), FakeNotifications())


async def test_standby_polls_until_the_lease_is_free_then_leads_for_a_lease_term():
    lead = leadership(FakeLease([False, False, True]))
    assert await lead.acquire_lease()
    host = lead.host
    assert host.slept == [host.STANDBY_POLL_S] * 2  # every wait through the clock
    assert lead.ok_until == host.clock.monotonic() + host.LEASE_TTL_S


async def test_redis_down_while_taking_the_lease_backs_off():
    lead = leadership(FakeLease([Unavailable("down"), Unavailable("down"), True]))
    assert await lead.acquire_lease()
    assert lead.host.slept == [lead.host.BACKOFF_MIN_S, 2 * lead.host.BACKOFF_MIN_S]


async def test_a_stop_ends_the_standby():
    lead = leadership(FakeLease([False] * 100))
    lead.host.loop.stop.set()
    assert not await lead.acquire_lease()


def keep(lead: Leadership) -> None:
    """The keeper's thread, run here until it returns (the fake clock's sleeps return at once)."""
    loop = asyncio.new_event_loop()
    try:
        lead.gen += 1
        t = threading.Thread(target=lead._keep_lease_blocking, args=(loop, lead.gen))
        t.start()
        t.join(5)
        assert not t.is_alive()
    finally:
        loop.close()


def test_a_renewal_refused_means_the_lease_is_lost():
    lease = FakeLease()
    lease.renew_answers = [True, True, False]
    lead = leadership(lease)
    keep(lead)
    assert lead.lost and lease.renewals == 3 and lease.keepers[0].closed


def test_renewals_that_fail_pause_dispatch_and_the_next_success_asks_for_a_resync():
    lease = FakeLease()
    lease.renew_answers = [Unavailable("down"), True, False]
    lead = leadership(lease)
    keep(lead)
    assert lead.host.loop.resync_requested  # "lease renewed again: dispatch resumes (after a resync)"
    assert lead.ok_until > 0


def test_a_closed_lease_is_released_and_never_renewed_again():
    lease = FakeLease()
    lead = leadership(lease)
    lead.started = True
    lead.close_lease(1.0)
    assert lease.released == [1.0]
    keep(lead)
    assert lease.renewals == 0 and not lead.lost


def test_a_lease_never_taken_is_not_released():
    lease = FakeLease()
    lead = leadership(lease)
    lead.close_lease(1.0)
    assert lease.released == []


async def test_the_listener_appends_notes_and_resyncs_after_a_reconnect():
    lead = leadership()
    source = lead.notifications
    source.queue = [ChartNote(id=1)]
    task = asyncio.create_task(lead.listen())
    for _ in range(20):
        await asyncio.sleep(0)
    assert lead.host.loop.notes == [ChartNote(id=1)] and not lead.host.loop.resync_requested
    source.fail_next = True
    for _ in range(50):
        await asyncio.sleep(0)
        if source.subscribed > 1:
            break
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert source.subscribed == 2 and lead.host.loop.resync_requested
