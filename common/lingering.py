"""A thread that sends what a process hands it, in batches, without being woken for each.

Both senders of a process use it: the notes to the scheduler (:mod:`common.notify`, in a
web process) and the metrics' increments (:mod:`common.metrics`). A caller (a request, the
scheduler's loop) hands an item over with :meth:`LingeringSender.put` and goes on; it never
waits on Redis.

How the thread sends: the first item at once; then, while items keep coming, whatever
piled up every ``linger_s``, at most ``batch`` a send. Between sends the thread *sleeps*
(``linger_s``) rather than waiting on the queue, so an item handed over meanwhile wakes
no one: a wake-up per item cost the handing thread its turn at the interpreter, as much
as the round trip the batching saved. Idle, it waits on the queue and the first item
wakes it. :meth:`flush` cuts the sleep short and returns once everything handed over
before it was sent.

A forked child starts its own thread on its first :meth:`put` (the parent's thread does not
exist in the child); :meth:`flush` in a process that never put anything returns at once.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class LingeringSender:
    """``send(items)`` on a thread of its own (module docstring).

    ``size(item)``: how much an item counts towards ``batch`` (1 each by default);
    ``backlog_max``: past that many items waiting (Redis down for long), new ones are
    dropped rather than held (None: never)."""

    def __init__(self, name: str, send: Callable[[list[Any]], None], *, linger_s: float, batch: int,
                 size: Callable[[Any], int] | None = None, backlog_max: int | None = None) -> None:
        self.name, self.send, self.linger_s, self.batch = name, send, linger_s, batch
        self.size = size or (lambda item: 1)
        self.backlog_max = backlog_max
        self._queue: tuple[int, queue.SimpleQueue] | None = None  # (the pid it belongs to, the queue)
        self._lock = threading.Lock()  # held only to start the thread: a fork never finds it held for long
        self._hurry = threading.Event()

    def put(self, item: Any) -> None:
        q = self._own_queue()
        if self.backlog_max is None or q.qsize() < self.backlog_max:
            q.put(item)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until what was handed over so far is sent; False if ``timeout`` passed first."""
        current = self._queue
        if current is None or current[0] != os.getpid():
            return True
        done = threading.Event()
        current[1].put(done)
        self._hurry.set()
        return done.wait(timeout)

    def _own_queue(self) -> queue.SimpleQueue:
        with self._lock:
            if self._queue is None or self._queue[0] != os.getpid():  # first use, or a forked child
                q: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=self._drain, args=(q,), name=self.name, daemon=True).start()
                self._queue = (os.getpid(), q)
            return self._queue[1]

    def _drain(self, q: queue.SimpleQueue) -> None:
        while True:
            item = q.get()  # idle: asleep here until an item comes
            while True:
                items: list[Any] = []
                flushed: list[threading.Event] = []
                counted = 0
                while True:
                    if isinstance(item, threading.Event):
                        flushed.append(item)
                    else:
                        items.append(item)
                        counted += self.size(item)
                    if counted >= self.batch:
                        break
                    try:
                        item = q.get_nowait()
                    except queue.Empty:
                        break
                if items:
                    try:
                        self.send(items)
                    except Exception:  # a sender logs its own errors; this one must not end the thread
                        log.exception("%s: a send failed; its %d items are lost", self.name, len(items))
                for event in flushed:
                    event.set()
                self._hurry.wait(self.linger_s)
                self._hurry.clear()
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
