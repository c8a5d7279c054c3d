"""``manage.py runscheduler``: the live scheduler (one active; a second one waits as standby).

SIGTERM or Ctrl-C stops it warmly within ``FAIRSCHED_STOP_TIMEOUT_S`` (default 10 s),
whatever it is doing: running workflows keep running, the lease is released so a
standby takes over at once, and "scheduler stopped" is logged. A stop that overruns
the bound, or a second signal, forces the exit (``fairsched.runtime.shutdown``).
"""
from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.connections import keep_connections
from control.deployment import DeploymentMismatch
from fairsched.engine.scheduler import Scheduler
from fairsched.runtime.shutdown import StopDeadline

log = logging.getLogger("fairsched.engine")


class Command(BaseCommand):
    help = "Run the scheduler: fair order, dispatch to Temporal, reconciliation, ETA pass, publishing."
    # Django's system checks (the models, the admin, the URLs: 0.13-0.17 s here, most of it
    # importing the web's URLs and views) run at each deploy's `migrate` and in the suite's
    # `manage.py check`; a scheduler starts at any moment (a deploy, a crash, a standby taking
    # over) and its restart is timed to its first dispatch (bench/process_start.py).
    requires_system_checks = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--task-queue", default=None, help="default: settings.FAIRSCHED_TASK_QUEUE")
        parser.add_argument("--lease-ttl", type=float, default=None, help="lease time in seconds (default 5)")
        parser.add_argument("--no-watch", action="store_true",
                            help="do not watch workflow results (completions come from the lifecycle "
                                 "activity and the reconciliation only)")

    def make_scheduler(self, opts: dict) -> Scheduler:
        """The scheduler with its real ports. (The tests' fault-injecting entry point,
        tests/integration/faulty_scheduler.py, wraps its ports here.)"""
        return Scheduler(
            temporal_address=settings.TEMPORAL_ADDRESS, namespace=settings.TEMPORAL_NAMESPACE,
            task_queue=opts["task_queue"] or settings.FAIRSCHED_TASK_QUEUE, redis_url=settings.REDIS_URL,
            watch_results=not opts["no_watch"], lease_ttl_s=opts["lease_ttl"],
            cancel_grace_s=settings.FAIRSCHED_CANCEL_GRACE_S, eta_pass_in=settings.FAIRSCHED_ETA_PASS,
            start_concurrency=settings.FAIRSCHED_START_CONCURRENCY,
            workflow_task_timeout_s=settings.FAIRSCHED_WORKFLOW_TASK_TIMEOUT_S,
        )

    # With FAIRSCHED_ETA_PASS=thread the ETA pass and the snapshot run in a thread (by
    # default they run in a forked child), and a thread that computes holds the
    # GIL for the whole switch interval (5 ms by default) each time the loop gives it up
    # for I/O: a dispatch makes dozens of such hand-offs (database thread, Temporal,
    # Redis), so at 100k queued it waited up to a second behind a pass. A shorter
    # interval hands the GIL back to the loop sooner, at a small cost to the pass.
    GIL_SWITCH_INTERVAL_S = 0.0005

    def handle(self, *args, **opts) -> None:
        sys.setswitchinterval(self.GIL_SWITCH_INTERVAL_S)
        keep_connections()  # a connection a thread, kept: not one a call
        scheduler = self.make_scheduler(opts)
        deadline = StopDeadline(name="scheduler", timeout_s=settings.FAIRSCHED_STOP_TIMEOUT_S,
                                phase=lambda: scheduler.phase, on_force=scheduler.release_lease_now)
        deadline.install()
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: where is it now?
        log.info("scheduler starting (pid %d; SIGTERM stops it within %g s)", os.getpid(), deadline.timeout_s)

        def on_stop() -> None:
            log.info("%s: warm stop (running workflows keep running; at most %g s)",
                     deadline.signal_name, deadline.timeout_s)
            scheduler.stop(requested_at=deadline.requested_at, during=deadline.requested_during)

        async def main() -> None:
            deadline.attach(asyncio.get_running_loop(), on_stop)
            await scheduler.run()
            deadline.exit_now()

        try:
            asyncio.run(main())
        except DeploymentMismatch as exc:  # read at the take-over (the database may be slow to answer at start)
            raise CommandError(str(exc)) from exc

