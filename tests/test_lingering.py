"""common.lingering.LingeringSender: the thread behind the notes' and the metrics' sends."""
from __future__ import annotations

import os
import threading
import time

from common.lingering import LingeringSender


def test_the_first_item_goes_at_once_and_what_comes_while_it_lingers_goes_in_one_send():
    sent: list[list[int]] = []
    gate = threading.Event()

    def send(items):
        sent.append(list(items))
        if len(sent) == 1:
            gate.wait(5)  # the first send is slow: the next items pile up meanwhile

    s = LingeringSender("t-linger", send, linger_s=0.05, batch=100)
    s.put(0)
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.001)
    for i in range(1, 11):
        s.put(i)
    gate.set()
    assert s.flush(5)
    assert sent == [[0], list(range(1, 11))]


def test_a_batch_holds_at_most_batch_by_size():
    sent: list[list[list[int]]] = []
    gate = threading.Event()

    def send(items):
        sent.append(items)
        gate.wait(5)

    s = LingeringSender("t-batch", send, linger_s=0.0, batch=5, size=len)
    s.put([0])
    while not sent:
        time.sleep(0.001)
    for _ in range(4):
        s.put([1, 2, 3])  # 3 each: a batch of two makes 6 >= 5
    gate.set()
    assert s.flush(5)
    assert [sum(map(len, batch)) for batch in sent] == [1, 6, 6]


def test_flush_waits_for_what_was_handed_over_and_cuts_the_linger_short():
    sent: list[int] = []
    s = LingeringSender("t-flush", lambda items: sent.extend(items), linger_s=30.0, batch=100)
    s.put(1)
    s.put(2)
    begun = time.monotonic()
    assert s.flush(5)
    s.put(3)
    assert s.flush(5)
    assert sent == [1, 2, 3]
    assert time.monotonic() - begun < 5  # not two 30 s lingers


def test_flush_with_nothing_ever_handed_over_returns_at_once():
    assert LingeringSender("t-idle", lambda items: None, linger_s=1.0, batch=1).flush(0.01)


def test_past_the_backlog_new_items_are_dropped_not_held():
    gate, entered = threading.Event(), threading.Event()
    sent: list[int] = []

    def send(items):
        entered.set()
        gate.wait(5)
        sent.extend(items)

    s = LingeringSender("t-backlog", send, linger_s=0.0, batch=1000, backlog_max=3)
    s.put(0)
    assert entered.wait(5)  # the thread took item 0 and waits in its send
    for i in range(1, 10):
        s.put(i)
    gate.set()
    assert s.flush(5)
    assert sent == [0, 1, 2, 3]


def test_a_send_that_raises_does_not_end_the_thread(caplog):
    sent: list[int] = []

    def send(items):
        if 1 in items:
            raise RuntimeError("boom")
        sent.extend(items)

    s = LingeringSender("t-raise", send, linger_s=0.0, batch=1)
    s.put(1)
    assert s.flush(5)
    s.put(2)
    assert s.flush(5)
    assert sent == [2]
    assert "a send failed" in caplog.text


def test_a_forked_child_sends_on_a_thread_of_its_own():
    read, write = os.pipe()
    s = LingeringSender("t-fork", lambda items: os.write(write, bytes(items)), linger_s=0.0, batch=10)
    s.put(1)
    assert s.flush(5)
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread does not exist here
        try:
            s.put(2)
            os._exit(0 if s.flush(5) else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    os.close(write)
    assert os.read(read, 10) == b"\x01\x02"
