"""The Temporal worker for the bundled workflows (``manage.py runworker``)."""
from __future__ import annotations

import asyncio
import logging
import signal
from datetime import timedelta

from temporalio.worker import Worker

from fairsched.temporal.activities import demo_work, record_chart_outcome
from fairsched.temporal.client import connect
from fairsched.temporal.workflows import DemoChart

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 5.0
RESTART_BACKOFF_MAX_S = 10.0


def build_worker(client, task_queue: str, max_concurrent_activities: int | None = None) -> Worker:
    """``max_concurrent_activities``: default ``settings.FAIRSCHED_WORKER_CONCURRENCY``
    (one DemoChart holds one activity slot while it runs)."""
    if max_concurrent_activities is None:
        from django.conf import settings

        max_concurrent_activities = settings.FAIRSCHED_WORKER_CONCURRENCY
    return Worker(
        client, task_queue=task_queue, workflows=[DemoChart], activities=[demo_work, record_chart_outcome],
        graceful_shutdown_timeout=timedelta(seconds=GRACEFUL_SHUTDOWN_S),
        max_concurrent_activities=max_concurrent_activities,
    )


async def run_worker(*, address: str, namespace: str, task_queue: str, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (SIGTERM/SIGINT set it when run from the command).

    Connection failures and a worker that dies with Temporal (server restart)
    are retried with backoff."""
    stop = stop or asyncio.Event()
    delay = 0.5
    while not stop.is_set():
        client = await connect(address, namespace, stopping=stop.is_set)
        worker = build_worker(client, task_queue)
        log.info("worker polling task queue %r on %s (namespace %s)", task_queue, address, namespace)
        run = asyncio.create_task(worker.run())
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            log.info("worker stopping (warm: in-flight activities get %.0f s)", GRACEFUL_SHUTDOWN_S)
            await worker.shutdown()
            break
        stopper.cancel()
        exc = run.exception()
        log.warning("worker stopped (%s); restarting in %.1f s", exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, RESTART_BACKOFF_MAX_S)


def main(*, address: str, namespace: str, task_queue: str) -> None:
    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(address=address, namespace=namespace, task_queue=task_queue, stop=stop)

    asyncio.run(_main())
