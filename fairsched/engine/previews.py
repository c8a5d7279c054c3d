"""The scheduler's side of the what-if previews and the capacity planner
(:mod:`common.previews`, :mod:`.whatif`, :mod:`.planner`).

:meth:`Previews.serve` runs as a task of the leading scheduler: it waits for a request on
its own Redis connection (a blocking pop: the loop awaits it like any I/O), and answers
previews in turn; plans, which take several ETA passes, go to a task of their own
(:meth:`Previews._plans`), so that a preview never waits behind a plan. Each request says
how long its web request waits (``at + wait``): one whose wait is over when it is reached is
dropped, and the children of one still running then are killed (nobody reads the answer).
The preview itself never runs on the loop. If nothing changed since the last ETA pass forked
(:meth:`~fairsched.engine.eta_passes.EtaPasses.measured_now`), that pass's per-org figures
are *before*, and one forked child makes the change on its own copy and measures it at the
pass's ``now`` (*after*). Otherwise the loop forks two children back to back
(:func:`fairsched.engine.forked.run_forked_pair`, milliseconds), each of which sees the
live state as it was at the fork: one measures it as it is (*before*), the other makes the
change on its own copy and measures that (*after*), both at the same ``now``, side by side
on two cores. The children are niced like the ETA pass so dispatch keeps its core. Nothing
is written, audited or changed in the loop's state: the children's memory is their own.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Protocol

from common.previews import PLAN_WAIT_S, WAIT_S, is_plan
from fairsched.engine import forked, planner, whatif
from fairsched.engine.host import Host, Part
from fairsched.engine.ports.protocols import Unavailable

log = logging.getLogger("fairsched.engine")


class PreviewPort(Protocol):
    async def next_request(self, timeout_s: float) -> bytes | str | None: ...

    async def answer(self, request_id: str, body: str) -> None: ...


class Previews(Part):
    POP_S = 1.0           # a blocking pop at most this long (then the loop checks it still leads)
    MAX_WAIT_S = 300.0    # no request is computed longer than this, whatever wait it asks for
    MIN_CHILD_S = 1.0     # (a request's children are given at least this)

    def __init__(self, host: Host, port: PreviewPort | None) -> None:
        super().__init__(host)
        self.port = port
        self.answered = 0
        self.reused = 0  # previews whose "before" was the last ETA pass's

    async def serve(self) -> None:
        """Answer previews and plans while leading (a task of the leader, cancelled when it
        steps down); a plan waiting or running when it stops leading is still answered."""
        plans: asyncio.Queue = asyncio.Queue()
        worker = asyncio.create_task(self._plans(plans), name="previews-plans")
        try:
            while self.port is not None and self.host.leading:
                try:
                    raw = await self.port.next_request(self.POP_S)
                except Unavailable as exc:
                    log.debug("previews: Redis unavailable (%s)", exc)
                    await self.host.sleep(self.POP_S)
                    continue
                if raw is None:
                    continue
                try:
                    request = json.loads(raw)
                    rid = str(request["id"])
                    change = request.get("change") or {}
                    deadline = self.deadline_of(request)
                except (ValueError, KeyError, TypeError, AttributeError):
                    log.warning("previews: a malformed request dropped")
                    continue
                if isinstance(change, dict) and is_plan(change):
                    plans.put_nowait((rid, change, deadline))
                else:
                    await self._answer(rid, change, deadline)
            plans.put_nowait(None)
            await worker
        finally:
            worker.cancel()

    @classmethod
    def deadline_of(cls, request: dict[str, Any]) -> float:
        """When the web stops waiting for ``request``'s answer (epoch seconds): its ``at`` plus
        its ``wait`` (a request without one: the web's default for its kind)."""
        change = request.get("change") or {}
        default = PLAN_WAIT_S if isinstance(change, dict) and is_plan(change) else WAIT_S
        wait = request.get("wait", default)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait > 0:
            wait = default
        return float(request.get("at") or 0) + min(float(wait), cls.MAX_WAIT_S)

    async def _plans(self, plans: asyncio.Queue) -> None:
        """The plans, one at a time, in the order asked; None ends it."""
        while (item := await plans.get()) is not None:
            await self._answer(*item)

    async def _answer(self, rid: str, change: Any, deadline: float) -> None:
        left = deadline - time.time()
        if left <= 0:
            return  # nobody waits for it any more
        body = await self.preview(change if isinstance(change, dict) else {}, timeout_s=max(left, self.MIN_CHILD_S))
        if time.time() > deadline:
            return
        try:
            await self.port.answer(rid, json.dumps(body))
            self.answered += 1
        except Unavailable as exc:
            log.info("previews: the answer could not be sent (%s)", exc)

    async def preview(self, change_json: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        """The preview of one change (its JSON), or ``{"error", "param"?}``; a ``plan`` (the
        capacity planner, :mod:`.planner`) in one forked child. Children still running after
        ``timeout_s`` (None: :attr:`MAX_WAIT_S`) are killed."""
        if timeout_s is None:
            timeout_s = self.MAX_WAIT_S
        if is_plan(change_json):
            return await self.plan(change_json, timeout_s=timeout_s)
        try:
            change = whatif.Change.from_json(change_json)
        except whatif.ChangeError as exc:
            return {"error": str(exc), "param": str(exc).split(":")[0]}
        state = self.state
        if state is None or state.partial:
            return {"error": "the scheduler is still loading the backlog", "unavailable": True}
        if change.kind != "budget" and str(change.org) not in state.queue.weights:
            return {"error": f"org: no org {change.org} in the scheduler's state", "param": "org"}
        if not forked.available():
            return {"error": "previews need fork (POSIX)", "unavailable": True}
        nothing = whatif.changes_nothing(state, change)
        etas = getattr(self.host, "etas", None)
        before = etas.measured_now() if etas is not None else None
        nice = self.host.ETA_PASS_NICE
        try:
            if before is not None:  # the last pass measured this very state: only "after", at its now
                self.reused += 1
                log.debug("what-if preview: before is the last ETA pass's (at %.3f)", before.now)
                now = before.now
                after = before if nothing else await forked.run_forked(
                    lambda: whatif.after_of(state, change, now), name="what-if preview", timeout_s=timeout_s,
                    nice=nice, clock=self.clock)
            elif nothing:
                now = self.clock.time()
                before = after = await forked.run_forked(lambda: whatif.before_of(state, now),
                                                         name="what-if preview", timeout_s=timeout_s, nice=nice,
                                                         clock=self.clock)
            else:
                now = self.clock.time()
                before, after = await forked.run_forked_pair(
                    lambda: whatif.before_of(state, now), lambda: whatif.after_of(state, change, now),
                    name="what-if preview", timeout_s=timeout_s, nice=nice, clock=self.clock)
        except forked.ChildFailed as exc:
            log.warning("a what-if preview failed: %s", exc)
            return {"error": "the preview failed in the scheduler (see its log)", "unavailable": True}
        return whatif.answer(change, before, after)

    async def plan(self, ask: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        """The smallest budget for ``{"kind": "plan", "clear_by": epoch | None, "meet_due": bool}``; with
        ``"pool": name``, the smallest capacity of that pool (docs/scheduling.md, "The capacity planner")."""
        state = self.state
        if state is None or state.partial:
            return {"error": "the scheduler is still loading the backlog", "unavailable": True}
        if not forked.available():
            return {"error": "the planner needs fork (POSIX)", "unavailable": True}
        clear_by = ask.get("clear_by")
        meet_due = bool(ask.get("meet_due"))
        if (clear_by is None) == (not meet_due) or not (clear_by is None or isinstance(clear_by, (int, float))):
            return {"error": "clear_by: a time, or meet_due=1", "param": "clear_by"}
        pool = ask.get("pool")
        pools = state.queue.pools
        if pool is not None and (not isinstance(pool, str) or pools is None or pool not in pools.capacity):
            return {"error": f"pool: unknown pool {pool!r}", "param": "pool"}
        now = self.clock.time()
        timeout_s = self.MAX_WAIT_S if timeout_s is None else timeout_s
        etas = getattr(self.host, "etas", None)
        last = etas.last_measured() if etas is not None else None
        hint = (last.budget, last.now + last.clear_s) if last is not None and last.clear_s is not None else None
        try:
            out = await forked.run_forked(
                lambda: planner.plan_budget(state, now, clear_by=clear_by, meet_due=meet_due, hint=hint,
                                            pool=pool).to_json(now),
                name="capacity planner", timeout_s=timeout_s, nice=self.host.ETA_PASS_NICE,
                clock=self.clock)
        except forked.ChildFailed as exc:
            log.warning("the capacity planner failed: %s", exc)
            return {"error": "the planner failed in the scheduler (see its log)", "unavailable": True}
        return {"change": ask, "now": whatif._iso(now, 0.0), **out}
