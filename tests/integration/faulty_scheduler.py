"""Test-only entry point: ``runscheduler`` with faults injected through its ports, so
production code carries no test hooks.

    python tests/integration/faulty_scheduler.py [--crash-after-starts N] [--eta-gate PATH]
                                                 [runscheduler options]

- ``--crash-after-starts N``: the Temporal port SIGKILLs the process right after its N-th
  workflow start returns, before the row's compare-and-set (queued -> running): the
  crash tests (tests/integration/test_scheduler_live.py).
- ``--eta-gate PATH``: the publisher holds each ETA pass (in the pass's thread, before it
  stores the snapshot) while PATH exists: a pass "in flight" for as long as a test
  wants (tests/integration/test_scale_live.py).
- ``--head-per-org N``: the head read first at a start holds N charts an org.
- ``--backfill-min N`` / ``--backfill-gate PATH``: a round backfill from N new rounds; no
  backfill chunk while PATH exists.
- ``--whole-gate PATH``: a start that dispatches from the head builds the whole backlog
  only once PATH is gone (tests/integration/test_fair_order_restart.py).

The integration tests run it as a subprocess (``Live.faulty_scheduler``).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

log = logging.getLogger("fairsched.engine")


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from fairsched.engine.ports.protocols import Publisher
    from fairsched.engine.ports.temporal import TemporalClient
    from fairsched.engine.live_types import Effects
    from fairsched.management.commands.runscheduler import Command

    parser = argparse.ArgumentParser()
    parser.add_argument("--crash-after-starts", type=int, default=None)
    parser.add_argument("--eta-gate", default=None)
    parser.add_argument("--head-per-org", type=int, default=None)  # a restart's head: this many charts an org
    parser.add_argument("--backfill-min", type=int, default=None)  # a backfill from this many new rounds
    parser.add_argument("--backfill-gate", default=None)  # no backfill chunk while this file exists
    parser.add_argument("--whole-gate", default=None)  # the whole backlog is built once this file is gone
    faults, rest = parser.parse_known_args(argv)

    class CrashingTemporal(TemporalClient):
        starts = 0

        async def start(self, **kw) -> str:
            run_id = await super().start(**kw)
            self.starts += 1
            if self.starts >= faults.crash_after_starts:
                log.warning("fault injection: SIGKILL after start #%d, before its compare-and-set", self.starts)
                os.kill(os.getpid(), signal.SIGKILL)
            return run_id

    class GatedPublisher:
        """The real publisher, but each snapshot waits while the gate file exists."""

        def __init__(self, inner: Publisher, gate: Path) -> None:
            self.inner, self.gate = inner, gate

        def store_snapshot(self, *args):
            while self.gate.exists():
                time.sleep(0.05)
            return self.inner.store_snapshot(*args)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    class FaultyCommand(Command):
        def make_scheduler(self, opts):
            scheduler = super().make_scheduler(opts)
            if faults.crash_after_starts is not None:
                scheduler.temporal = CrashingTemporal(scheduler.temporal_address, scheduler.namespace,
                                                      task_timeout_s=scheduler.temporal.task_timeout_s)
            if faults.eta_gate:
                scheduler.publisher = GatedPublisher(scheduler.publisher, Path(faults.eta_gate))
            if faults.head_per_org is not None:
                scheduler.HEAD_PER_ORG = faults.head_per_org
            if faults.backfill_min is not None:
                scheduler.BACKFILL_MIN = faults.backfill_min
            if faults.backfill_gate:
                gate, chunk = Path(faults.backfill_gate), scheduler.backfill_step

                async def gated_chunk():
                    return Effects() if gate.exists() else await chunk()
                scheduler.backfill_step = gated_chunk
            if faults.whole_gate:
                whole_gate, build = Path(faults.whole_gate), scheduler.startup.build_whole

                async def gated_build(*args):
                    while whole_gate.exists():
                        await asyncio.sleep(0.05)
                    return await build(*args)
                scheduler.startup.build_whole = gated_build
            return scheduler

    FaultyCommand().run_from_argv(["manage.py", "runscheduler", *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
