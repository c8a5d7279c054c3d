"""An rq worker stops listening for its commands at once (jobs/worker.py), on a real Redis.

rq's own ``Worker.unsubscribe`` unsubscribes, then joins its listener thread. When the thread
has read the unsubscribe's answer first, it waits 60 s for a subscription that never comes,
and since redis-py 8 the join waits with it: a warm stop of ``rqworker``, and one in four of
the suite's in-process bursts on a busy machine, took 60 s."""
from __future__ import annotations

import time

import django_rq
import pytest
from django_rq.workers import get_worker_class

from jobs.worker import SimpleWorker, Worker
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration

# Far under the listener's 60 s wait, far over a stop's own cost on a busy machine.
STOP_BOUND_S = 15.0


def test_a_worker_whose_listener_already_read_the_unsubscribe_stops_at_once(redis_url):
    """The race rq loses, made certain: the listener reads the unsubscribe's answer before the
    worker's own stop (here the pub/sub is unsubscribed first and the thread left to read it)."""
    queue = django_rq.get_queue("default")
    worker = SimpleWorker([queue], connection=queue.connection)
    worker.subscribe()
    thread = worker.pubsub_thread
    wait_until(lambda: thread.is_alive() and worker.pubsub.subscribed, timeout=10, what="the listener subscribed")

    worker.pubsub.unsubscribe()
    wait_until(lambda: not worker.pubsub.subscribed, timeout=10, what="the listener read the unsubscribe")
    began = time.monotonic()
    worker.unsubscribe()
    took = time.monotonic() - began

    assert took < STOP_BOUND_S, f"the worker's stop waited {took:.1f} s for its listener"


def test_a_worker_stops_its_listener_which_ends(redis_url):
    """The usual order: the listener is blocked reading when the worker stops; it ends."""
    queue = django_rq.get_queue("default")
    worker = SimpleWorker([queue], connection=queue.connection)
    worker.subscribe()
    thread = worker.pubsub_thread
    wait_until(lambda: thread.is_alive() and worker.pubsub.subscribed, timeout=10, what="the listener subscribed")

    worker.unsubscribe()

    wait_until(lambda: not thread.is_alive(), timeout=STOP_BOUND_S, what="the listener thread's end")


def test_rqworker_runs_the_project_worker():
    """``manage.py rqworker`` (make run, the Procfile) takes its class from ``RQ["WORKER_CLASS"]``."""
    assert get_worker_class() is Worker
