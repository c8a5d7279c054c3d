"""The rq workers Fairsched runs (``RQ["WORKER_CLASS"]`` in the settings, and the tests' burst
worker): rq's own, but for how a worker stops listening for commands.

Each rq worker listens on a Redis pub/sub channel for its commands (shutdown, stop or kill a
job) in a thread of redis-py's (``PubSub.run_in_thread``, a 60 s read timeout). At its end it
unsubscribes, then stops that thread and joins it. If the thread reads the unsubscribe's
answer and loops before the stop, it waits for a subscription that never comes, for its whole
60 s (``PubSub.get_message``); since redis-py 8 ``stop()`` joins without a bound, and the
worker waits with it. A warm stop of ``rqworker`` then took 60 s instead of a moment, and so
did one burst in four of the tests' in-process workers on a busy machine (rq/rq#1613 and
#2172 tell the story of that join).

Here the thread is told to stop before the unsubscribe, so the answer it reads ends it, and
the join is bounded: a thread that already entered that wait is a daemon, which ends with its
timeout or the process, and holds nothing the worker still needs."""
from __future__ import annotations

import rq

# How long a stopping worker waits for its listener thread (rq's own join waits 1 s more).
LISTENER_JOIN_S = 1.0


def _stop_without_waiting(thread) -> None:
    """Clear the thread's running flag without joining it (redis-py 8's ``stop(timeout)``;
    older releases' ``stop()`` never joined)."""
    try:
        thread.stop(timeout=0)
    except TypeError:
        thread.stop()


class PromptUnsubscribe:
    """rq's ``Worker.unsubscribe`` with the listener stopped first and the join bounded."""

    def unsubscribe(self) -> None:
        thread = self.pubsub_thread
        if thread is None:
            return
        self.log.info("Worker %s: unsubscribing from channel %s", self.name, self.pubsub_channel_name)
        _stop_without_waiting(thread)
        try:
            self.pubsub.unsubscribe()  # its answer wakes a thread blocked reading, which then ends
        except Exception:  # noqa: BLE001 - Redis gone at the end: the thread ends with its socket
            self.log.debug("Worker %s: could not unsubscribe", self.name, exc_info=True)
        thread.join(LISTENER_JOIN_S)


class Worker(PromptUnsubscribe, rq.Worker):
    """``rqworker``'s class: a job in a forked work horse, as rq's."""


class SimpleWorker(PromptUnsubscribe, rq.SimpleWorker):
    """Jobs in the worker's own process: the tests' burst worker (tests/jobs/conftest.py)."""
