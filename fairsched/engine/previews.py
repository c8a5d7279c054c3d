"""The scheduler's side of the what-if previews (:mod:`common.previews`, :mod:`.whatif`).

:meth:`Previews.serve` runs as a task of the leading scheduler: it waits for a request on
its own Redis connection (a blocking pop: the loop awaits it like any I/O), and answers
each in turn. The preview itself never runs on the loop: the loop forks two children back
to back (:func:`fairsched.engine.forked.run_forked_pair`, milliseconds), each of which
sees the live state as it was at the fork: one measures it as it is (*before*), the other
makes the change on its own copy and measures that (*after*), both at the same ``now``,
side by side on two cores, niced like the ETA pass so dispatch keeps its core. Nothing is
written, audited or changed in the loop's state: the children's memory is their own.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Protocol

from fairsched.engine import forked, planner, whatif
from fairsched.engine.host import Host, Part
from fairsched.engine.ports import Unavailable

log = logging.getLogger("fairsched.engine")


class PreviewPort(Protocol):
    async def next_request(self, timeout_s: float) -> bytes | str | None: ...

    async def answer(self, request_id: str, body: str) -> None: ...


class Previews(Part):
    WAIT_S = 1.0          # a blocking pop at most this long (then the loop checks it still leads)
    TIMEOUT_S = 10.0      # a preview's children are killed after this
    MAX_AGE_S = 3.0       # a request older than this is dropped: its web request gave up (common.previews.WAIT_S)

    def __init__(self, host: Host, port: PreviewPort | None) -> None:
        super().__init__(host)
        self.port = port
        self.answered = 0

    async def serve(self) -> None:
        """Answer previews while leading (a task of the leader, cancelled when it steps down)."""
        while self.port is not None and self.host.leading:
            try:
                raw = await self.port.next_request(self.WAIT_S)
            except Unavailable as exc:
                log.debug("previews: Redis unavailable (%s)", exc)
                await self.host._sleep(self.WAIT_S)
                continue
            if raw is None:
                continue
            try:
                request = json.loads(raw)
                rid = str(request["id"])
            except (ValueError, KeyError, TypeError):
                log.warning("previews: a malformed request dropped")
                continue
            if time.time() - float(request.get("at") or 0) > self.MAX_AGE_S:
                continue  # nobody waits for it any more
            body = await self.preview(request.get("change") or {})
            try:
                await self.port.answer(rid, json.dumps(body))
                self.answered += 1
            except Unavailable as exc:
                log.info("previews: the answer could not be sent (%s)", exc)

    async def preview(self, change_json: dict[str, Any]) -> dict[str, Any]:
        """The preview of one change (its JSON), or ``{"error", "param"?}``; a ``plan`` (the
        capacity planner, :mod:`.planner`) in one forked child."""
        if change_json.get("kind") == "plan":
            return await self.plan(change_json)
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
        now = self.clock.time()
        try:
            before, after = await forked.run_forked_pair(
                lambda: whatif.before_of(state, now), lambda: whatif.after_of(state, change, now),
                name="what-if preview", timeout_s=self.TIMEOUT_S, nice=self.host.ETA_PASS_NICE,
                clock=self.clock)
        except forked.ChildFailed as exc:
            log.warning("a what-if preview failed: %s", exc)
            return {"error": "the preview failed in the scheduler (see its log)", "unavailable": True}
        return whatif.answer(change, before, after)

    async def plan(self, ask: dict[str, Any]) -> dict[str, Any]:
        """The smallest budget for ``{"kind": "plan", "clear_by": epoch | None, "meet_due": bool}``."""
        state = self.state
        if state is None or state.partial:
            return {"error": "the scheduler is still loading the backlog", "unavailable": True}
        if not forked.available():
            return {"error": "the planner needs fork (POSIX)", "unavailable": True}
        clear_by = ask.get("clear_by")
        meet_due = bool(ask.get("meet_due"))
        if (clear_by is None) == (not meet_due) or not (clear_by is None or isinstance(clear_by, (int, float))):
            return {"error": "clear_by: a time, or meet_due=1", "param": "clear_by"}
        now = self.clock.time()
        try:
            out = await forked.run_forked(
                lambda: planner.plan_budget(state, now, clear_by=clear_by, meet_due=meet_due).to_json(now),
                name="capacity planner", timeout_s=self.TIMEOUT_S * 3, nice=self.host.ETA_PASS_NICE,
                clock=self.clock)
        except forked.ChildFailed as exc:
            log.warning("the capacity planner failed: %s", exc)
            return {"error": "the planner failed in the scheduler (see its log)", "unavailable": True}
        return {"change": ask, "now": whatif._iso(now, 0.0), **out}
