"""A fake host for the scheduler's collaborators: the ports are ``tests/test_tick.py``'s
fakes, the tunables the scheduler's own, and the loop's bookkeeping plain attributes.
Each collaborator is driven alone, the way ``test_tick.py`` drives ``tick()``."""
from __future__ import annotations

from typing import Any

from scheduling import RoundSaver
from fairsched.engine.forked import EtaPassIn
from fairsched.engine.host import LoopState
from fairsched.engine.scheduler import Scheduler
from fairsched.engine.state import LiveState
from fairsched.engine.store.rows import OrgRow
from fairsched.temporal.shared import current_workflow_ids
from tests.test_tick import FakeClock, FakePublisher, FakeStore, FakeTemporal, settle  # noqa: F401


class FakeHost:
    """What a collaborator sees of the loop (:class:`fairsched.engine.host.Host`)."""

    def __init__(self, budget: int = 1, charts: int = 3, weights=(1,), costs=None) -> None:
        for name in dir(Scheduler):
            if name.isupper():
                setattr(self, name, getattr(Scheduler, name))
        self.clock, self.temporal, self.publisher = FakeClock(), FakeTemporal(), FakePublisher()
        self.store = FakeStore(budget, [OrgRow(i + 1, f"Org {i + 1}", f"org-{i + 1}", w)
                                        for i, w in enumerate(weights)], costs)
        for pk in range(1, charts + 1):
            self.store.add(pk, 1 + (pk - 1) % len(weights))
        self.state: LiveState | None = None
        self.leading = True
        self.phase = "test"
        self.task_queue = "q"
        self.watch_results = True
        self.eta_pass_in = EtaPassIn.THREAD
        self.rounds = RoundSaver(None)
        self.loop = LoopState.new(self.BACKOFF_MIN_S, self.BACKOFF_MAX_S)
        self.ids = self.temporal.ids = current_workflow_ids()  # the tests' deployment (tests/conftest.py)
        self.guarded_steps: list[str] = []  # the steps run through guarded(), in order
        self.slept: list[float] = []

    async def load(self) -> LiveState:
        """The state as a plain start loads it (the whole backlog, no round saved)."""
        world = await self.store.read_world()
        self.install(LiveState(world, observe_arrivals=False), RoundSaver(world.rounds))
        return self.state

    def install(self, state: LiveState, rounds: RoundSaver) -> None:
        self.state, self.rounds = state, rounds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await self.clock.sleep(seconds)

    async def guarded(self, name: str, step: Any, *, detail: Any = None, loop_waits: bool = True) -> Any:
        self.guarded_steps.append(name)
        result = await step()
        return result if result is not None else True

    async def rounds_settled(self) -> None:
        """No backfill's chunk is in flight here (the scheduler's own tests hold one)."""

    def log_slow_step(self, name: str, took: float, how: str = "", detail: str = "") -> None:
        """Slow steps are the scheduler's to log (``tests/test_tick.py``)."""
