"""The Temporal worker for the bundled workflows (``manage.py runworker``)."""
from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta

from temporalio.worker import Worker

from fairsched.runtime.shutdown import StopDeadline
from fairsched.temporal.advertise import Advertiser, worker_identity
from fairsched.temporal.activities import demo_work, record_chart_outcome
from fairsched.temporal.client import connect
from fairsched.temporal.workflows import DemoChart

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 5.0
RESTART_BACKOFF_MAX_S = 10.0
ADVERT_REMOVE_WAIT_S = 3.0  # a warm stop waits this long at most for the advertisement's removal


def worker_concurrency() -> int:
    from django.conf import settings

    return settings.FAIRSCHED_WORKER_CONCURRENCY


def sticky_timeout() -> timedelta:
    from django.conf import settings

    return timedelta(seconds=settings.FAIRSCHED_WORKER_STICKY_TIMEOUT_S)


def build_worker(client, task_queue: str, graceful_s: float = GRACEFUL_SHUTDOWN_S,
                 max_concurrent_activities: int | None = None, identity: str | None = None) -> Worker:
    """``max_concurrent_activities``: default ``settings.FAIRSCHED_WORKER_CONCURRENCY``
    (one DemoChart holds one activity slot while it runs). ``identity``: default
    ``<hostname>:<pid>:fairsched`` (the name the capacity check matches with the worker's
    advertisement, ``fairsched.temporal.advertise``)."""
    if max_concurrent_activities is None:
        max_concurrent_activities = worker_concurrency()
    return Worker(
        client, task_queue=task_queue, workflows=[DemoChart], activities=[demo_work, record_chart_outcome],
        graceful_shutdown_timeout=timedelta(seconds=graceful_s),
        max_concurrent_activities=max_concurrent_activities, identity=identity or worker_identity(),
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    )


async def _unless_stopped(work, stop: asyncio.Event):
    """``await work`` unless ``stop`` is set first (then cancel it and return None)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
    return task.result() if task.done() and not task.cancelled() else None


async def run_worker(*, address: str, namespace: str, task_queue: str, stop: asyncio.Event | None = None,
                     graceful_s: float = GRACEFUL_SHUTDOWN_S, phase: list[str] | None = None,
                     redis_url: str | None = None) -> None:
    """Run until ``stop`` is set (SIGTERM/SIGINT set it when run from the command).

    Connection failures and a worker that dies with Temporal (server restart)
    are retried with backoff; a stop ends those waits at once. On a stop,
    in-flight activities get ``graceful_s`` to finish, then are cancelled (an
    activity cut short, even by a kill, is retried by Temporal on another worker).
    ``phase[0]`` says what it is doing, for the stop's log lines.

    With ``redis_url``, the worker advertises its identity and activity slots in Redis
    while it runs (``fairsched.temporal.advertise``; removed on a warm stop; a Redis
    outage is logged, never fatal)."""
    stop = stop or asyncio.Event()
    phase = phase if phase is not None else [""]
    identity = worker_identity()
    slots = worker_concurrency()
    advertising = None
    if redis_url:
        advertiser = Advertiser(redis_url=redis_url, task_queue=task_queue, identity=identity, slots=slots)
        advertising = asyncio.create_task(advertiser.run(stop))
    try:
        await _poll(address=address, namespace=namespace, task_queue=task_queue, stop=stop,
                    graceful_s=graceful_s, phase=phase, identity=identity, slots=slots)
    finally:
        if advertising is not None:
            stop.set()  # the advertiser removes the key on its way out
            try:
                await asyncio.wait_for(advertising, timeout=ADVERT_REMOVE_WAIT_S)
            except Exception:  # noqa: BLE001 - it expires on its own (TTL)
                advertising.cancel()


async def _poll(*, address: str, namespace: str, task_queue: str, stop: asyncio.Event, graceful_s: float,
                phase: list[str], identity: str, slots: int) -> None:
    delay = 0.5
    while not stop.is_set():
        phase[0] = "connecting to Temporal"
        client = await _unless_stopped(connect(address, namespace), stop)
        if client is None:
            break
        worker = build_worker(client, task_queue, graceful_s, max_concurrent_activities=slots, identity=identity)
        log.info("worker polling task queue %r on %s (namespace %s) as %r with %d activity slots",
                 task_queue, address, namespace, identity, slots)
        phase[0] = "polling"
        run = asyncio.create_task(worker.run())
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            log.info("worker stopping (warm: in-flight activities get %.0f s)", graceful_s)
            phase[0] = "shutting down (in-flight activities)"
            await worker.shutdown()
            break
        stopper.cancel()
        exc = run.exception()
        log.warning("worker stopped (%s); restarting in %.1f s", exc, delay)
        phase[0] = "waiting to restart"
        await _unless_stopped(asyncio.sleep(delay), stop)
        delay = min(delay * 2, RESTART_BACKOFF_MAX_S)


def main(*, address: str, namespace: str, task_queue: str, stop_timeout_s: float = 10.0,
         redis_url: str | None = None) -> None:
    """The command: SIGTERM/SIGINT stop it warmly, and within ``stop_timeout_s`` whatever happens
    (``fairsched.runtime.shutdown``: a worker stuck in its shutdown exits all the same)."""
    phase = ["starting"]
    deadline = StopDeadline(name="worker", timeout_s=stop_timeout_s, phase=lambda: phase[0])
    deadline.install()
    graceful_s = min(GRACEFUL_SHUTDOWN_S, stop_timeout_s / 2)
    log.info("worker starting (pid %d; SIGTERM stops it within %g s)", os.getpid(), stop_timeout_s)

    async def _main() -> None:
        stop = asyncio.Event()

        def on_stop() -> None:
            log.info("%s: warm stop (at most %g s)", deadline.signal_name, stop_timeout_s)
            stop.set()

        deadline.attach(asyncio.get_running_loop(), on_stop)
        await run_worker(address=address, namespace=namespace, task_queue=task_queue, stop=stop,
                         graceful_s=graceful_s, phase=phase, redis_url=redis_url)
        log.info("worker stopped %.2f s after the stop request (during: %s)", deadline.elapsed(),
                 deadline.requested_during)
        deadline.exit_now()

    asyncio.run(_main())
