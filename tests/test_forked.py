"""The forked child the ETA pass runs in (fairsched/engine/forked.py): its result, its
failures, and that it never outlives what started it nor signals its parent's loop."""
from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from array import array
from pathlib import Path

import pytest

from common.notify import ChartNote
from fairsched.engine import forked
from tests.test_tick import rig  # noqa: F401 - a fixture

pytestmark = pytest.mark.skipif(not forked.available(), reason="no fork here")

ROOT = Path(__file__).resolve().parent.parent


def gone(pid: int) -> bool:
    """No such process, or a zombie (dead, waiting to be reaped by whoever adopted it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_for(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_the_child_reads_the_parent_memory_as_at_the_fork_and_sends_its_result_back():
    backlog = {str(i): i * i for i in range(100_000)}

    async def main():
        result = await forked.run_forked(lambda: (os.getpid(), sum(backlog.values())), name="pass", timeout_s=30)
        return result

    pid, total = asyncio.run(main())
    assert pid != os.getpid()
    assert total == sum(i * i for i in range(100_000))
    assert gone(pid)  # reaped, not left a zombie


def _columns(n: int):
    from fairsched.engine.due_states import Levels
    from fairsched.engine.eta_passes import EtaColumns

    levels = Levels()
    for i in range(n):
        levels[10 * i] = i % 3
    return (EtaColumns(array("q", range(n)), array("d", (0.5 * i for i in range(n))), array("d", [float("inf")] * n)),
            levels)


def test_a_result_s_columns_come_back_out_of_band_into_arrays_of_their_own():
    """A pass's first ETAs and due warnings (a million charts' columns at a first start) are
    written to the pipe as they lie in memory, after the pickle of the rest, and read straight
    into arrays in the parent: in band, pickle copied each twice on each side (48 MB more in
    the child at 1M)."""
    eta_cols, levels = _columns(50_000)
    got_cols, got_levels, rest = asyncio.run(forked.run_forked(lambda: (eta_cols, levels, {"seq": 7}),
                                                               name="ETA pass", timeout_s=30))
    assert (got_cols, rest) == (eta_cols, {"seq": 7})
    assert [a.typecode for a in (got_cols.ids, got_cols.start, got_cols.finish)] == ["q", "d", "d"]
    assert list(got_levels.items()) == list(levels.items()) and got_levels[10 * 49_999] == 49_999 % 3
    assert isinstance(got_levels.level, bytearray)

    recv, send = multiprocessing.Pipe(duplex=False)  # what the child sends, read by hand
    sender = threading.Thread(target=forked.send_result, args=(send, (eta_cols, levels, {"seq": 7})))
    sender.start()
    status, sizes = recv.recv()
    head = recv.recv_bytes()
    assert status == "ok"
    assert sizes == [("q", 400_000), ("d", 400_000), ("d", 400_000), ("q", 400_000), ("B", 50_000)]
    assert len(head) < 1_000  # the pickle of the rest: the columns are not in it
    for fmt, nbytes in sizes:
        forked.read_buffer(recv, fmt, nbytes)
    sender.join()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_columns_pickled_in_band_read_back_the_same(protocol):
    eta_cols, levels = _columns(1_000)
    got_cols, got_levels = pickle.loads(pickle.dumps((eta_cols, levels), protocol=protocol))
    assert got_cols == eta_cols and list(got_levels.items()) == list(levels.items())
    empty = pickle.loads(pickle.dumps(_columns(0), protocol=protocol))
    assert len(empty[0]) == len(empty[1]) == 0


def test_a_child_that_dies_while_it_sends_its_columns_is_a_clear_error():
    """The parent reads the columns' bytes with the sizes announced: a writer gone before
    the last of them is an end of file (run_forked: "died"), never a short array."""
    recv, send = multiprocessing.Pipe(duplex=False)
    send.send(("ok", [("q", 800)]))
    send.send_bytes(pickle.dumps(pickle.PickleBuffer(bytearray(800)), protocol=5, buffer_callback=lambda b: None))
    os.write(send.fileno(), b"x" * 100)
    send.close()
    with pytest.raises(EOFError):
        forked.receive_result(recv, [])


def test_a_fork_that_held_the_loop_long_is_logged(monkeypatch, caplog):
    caplog.set_level("INFO", logger="fairsched.engine")
    monkeypatch.setattr(forked, "FORK_SLOW_LOG_S", 10.0)
    assert asyncio.run(forked.run_forked(lambda: 1, name="quick pass", timeout_s=30)) == 1
    assert "the fork held the loop" not in caplog.text
    monkeypatch.setattr(forked, "FORK_SLOW_LOG_S", 0.0)
    assert asyncio.run(forked.run_forked(lambda: 2, name="ETA pass", timeout_s=30)) == 2
    assert "ETA pass: the fork held the loop" in caplog.text


def test_the_child_runs_at_the_niceness_asked_for_above_its_parent():
    niceness = asyncio.run(forked.run_forked(lambda: os.nice(0), name="pass", timeout_s=30, nice=5))
    assert niceness == min(19, os.nice(0) + 5)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_niced_child_runs_under_the_idle_policy_and_its_parent_does_not():
    policy = asyncio.run(forked.run_forked(lambda: os.sched_getscheduler(0), name="pass", timeout_s=30, nice=5))
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) != os.SCHED_IDLE
    assert asyncio.run(forked.run_forked(lambda: os.sched_getscheduler(0), name="pass", timeout_s=30,
                                         nice=0)) == os.sched_getscheduler(0)


def test_a_raise_in_the_child_is_a_clear_error_with_its_traceback():
    def fn():
        raise ValueError("the pass met a chart it cannot place")

    with pytest.raises(forked.ChildFailed, match="ValueError: the pass met a chart it cannot place"):
        asyncio.run(forked.run_forked(fn, name="ETA pass", timeout_s=30))


def test_a_child_that_dies_is_a_clear_error_with_its_exit_code():
    with pytest.raises(forked.ChildFailed, match=r"ETA pass died \(exit code 3\)"):
        asyncio.run(forked.run_forked(lambda: os._exit(3), name="ETA pass", timeout_s=30))


def test_a_child_that_overruns_is_killed(tmp_path):
    pidfile = tmp_path / "pid"

    def fn():
        pidfile.write_text(str(os.getpid()))
        time.sleep(60)

    with pytest.raises(forked.ChildFailed, match="took more than 1 s: killed"):
        asyncio.run(forked.run_forked(fn, name="ETA pass", timeout_s=1))
    assert gone(int(pidfile.read_text()))


class ExpiringClock:
    """A clock whose time is up as soon as anything waits on it: the timeout the caller
    asked for is recorded, never waited out in real time."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def wait_for(self, awaitable, timeout_s: float):
        self.asked.append(timeout_s)
        return await asyncio.wait_for(awaitable, 0)


@pytest.mark.parametrize("pair", [False, True])
def test_the_wait_for_the_child_goes_through_the_clock_given(tmp_path, pair):
    """The scheduler's Clock port bounds the wait (the ETA pass, the previews): its time
    running out kills the child, though the real 120 s are far from over."""
    pidfile = tmp_path / "pid"

    def fn():
        pidfile.write_text(str(os.getpid()))
        time.sleep(60)

    clock = ExpiringClock()
    run = (lambda: forked.run_forked_pair(fn, fn, name="what-if preview", timeout_s=120, clock=clock)) if pair \
        else (lambda: forked.run_forked(fn, name="ETA pass", timeout_s=120, clock=clock))
    started = time.monotonic()
    with pytest.raises(forked.ChildFailed, match="took more than 120(.0)? s: killed"):
        asyncio.run(run())
    assert clock.asked == [120] and time.monotonic() - started < 30
    assert not pidfile.exists() or not pidfile.read_text() or gone(int(pidfile.read_text()))


def test_a_cancel_kills_the_child(tmp_path):
    pidfile = tmp_path / "pid"

    def fn():
        pidfile.write_text(str(os.getpid()))
        time.sleep(60)

    async def main():
        task = asyncio.create_task(forked.run_forked(fn, name="ETA pass", timeout_s=120))
        while not (pidfile.exists() and pidfile.read_text()):  # created, then written: wait for both
            await asyncio.sleep(0.05)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    took = asyncio.run(main())
    assert gone(int(pidfile.read_text()))
    assert took < 5  # killed, not waited for (the sleep is 60 s)


def test_a_sigterm_to_the_child_is_ignored_and_never_reaches_the_parent_loop():
    """The loop's signal wake-up socket is shared with the child: without ``_detach``, a
    SIGTERM sent to the child (a supervisor signals the process group) runs the parent's
    own SIGTERM handler. The child ignores it: the parent's stop kills the child."""
    got: list[int] = []

    def fn():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # a handler runs by now
        return "still here"

    async def main():
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, got.append, 1)
        try:
            result = await forked.run_forked(fn, name="ETA pass", timeout_s=30)
            await asyncio.sleep(0.3)  # a stray wake-up byte would be read by now
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
        return result

    assert asyncio.run(main()) == "still here"
    assert got == []


def test_the_child_dies_with_its_parent(tmp_path):
    """``kill -9`` of the scheduler must leave no pass running behind it (it would go on
    publishing a dead scheduler's snapshot)."""
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import asyncio, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from fairsched.engine import forked
        def fn():
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(60)
        asyncio.run(forked.run_forked(fn, name="ETA pass", timeout_s=120))
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text()), "the child never started"
        child = int(pidfile.read_text())
        assert not gone(child)
        parent.kill()
        parent.wait(10)
        assert wait_for(lambda: gone(child), timeout=5), "the child outlived its parent"
    finally:
        parent.kill()
        if pidfile.exists() and pidfile.read_text() and not gone(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


# --- the ETA pass in the child, with the real Redis ---------------------------------------------


@pytest.fixture
async def forked_rig(rig, redis_url):
    """The scheduler of ``tests/test_tick.py`` (fake store, Temporal and clock) running its
    ETA pass in a forked child that stores the snapshot in a real Redis."""
    import redis.asyncio as aredis

    from fairsched.engine.ports.real import LivePublisher

    r = rig(budget=1, charts=3, eta_pass_in="process")
    s = r.s
    s.ETA_PASS_TIMEOUT_MIN_S = 20.0  # a child that hangs fails the test in 20 s, not 10 minutes
    # the pass's timeout goes through the clock: real seconds here (the fake's cap is 5 s)
    r.clock.wait_for = lambda awaitable, timeout_s: asyncio.wait_for(awaitable, timeout_s)
    s.publisher = LivePublisher(redis_url)
    yield r
    await s.step_down()
    await s.publisher.aclose()


async def a_pass(r) -> float:
    """Start an ETA pass at once and wait for it to end; how long it took (seconds)."""
    from tests.test_tick import pass_ends

    s = r.s
    r.clock.advance(1.0)
    r.renew_lease()
    s.etas.request_pass()
    started = time.monotonic()
    ended = s.etas.last_pass_end
    await r.tick()
    # it started, and a child quick to finish (or to die) may have ended it within the tick
    assert s.etas.pass_in_flight is not None or s.etas.last_pass_end != ended
    while s.etas.pass_in_flight is not None and time.monotonic() - started < 60:
        await asyncio.sleep(0.02)
    await pass_ends(s)
    return time.monotonic() - started


def confirmed_seq() -> int | None:
    from common import snapshot

    current = snapshot.read_current()
    return current["seq"] if current else None


async def test_the_child_publishes_with_its_own_redis_client_even_if_a_thread_held_the_shared_ones_lock(
        forked_rig, caplog):
    """Issue 21, item 9: the database thread takes the module-level Redis client's lock
    (``common.notify``) when it sends a notification. Forked while it held it, the child
    found the lock taken for ever (its holder is not in the child) and hung until its
    timeout. The child makes its own client after the fork."""
    from common import notify, snapshot

    r = forked_rig
    await r.lead()
    notify.redis_client()  # the shared client exists, as in the scheduler
    with notify.client_busy():  # "the database thread" holds it at the fork
        took = await a_pass(r)
    assert "ETA pass failed" not in caplog.text and "took more than" not in caplog.text
    assert took < 10
    published = snapshot.read_snapshot()
    assert published is not None and published["seq"] == r.s.etas.published_seq


async def test_a_child_that_dies_after_storing_its_snapshot_has_it_confirmed(forked_rig, monkeypatch, caplog):
    """A child can die after storing its snapshot, before its result reaches the parent
    (killed for memory while it pickles a first start's million ETAs). The snapshot is
    complete: the child says so as soon as it is stored, and the parent confirms it and
    tells the pages. (It stayed unconfirmed: the parent confirmed the one before, whose
    seq no longer matched, and the pages turned a current snapshot stale.)"""
    from common import snapshot
    from fairsched.engine.eta_passes import EtaColumns

    r = forked_rig
    await r.lead()
    await a_pass(r)
    first = snapshot.read_snapshot()["seq"]
    assert r.s.etas.published_seq == first

    def die(*args, **kwargs):
        os._exit(9)  # after the snapshot is stored: on the way to the result

    monkeypatch.setattr(EtaColumns, "of", die)
    stored: list[int] = []
    told = r.s.publisher.snapshot_stored

    async def snapshot_stored(seq):
        stored.append(seq)
        await told(seq)

    r.s.publisher.snapshot_stored = snapshot_stored
    r.store.add(10, 1)  # a change: the pass has something new to show
    r.s.loop.notes.append(ChartNote(id=10))
    await a_pass(r)
    assert "ETA pass died (exit code 9)" in caplog.text
    second = snapshot.read_snapshot()["seq"]
    assert second > first
    assert r.s.etas.published_seq == second and stored == [second]  # the pages are told
    r.clock.advance(1.0)
    await r.tick()  # the next confirmation
    assert confirmed_seq() == second
    assert snapshot.confirmed_at(snapshot.read_snapshot()) == r.clock.time()


def test_a_child_that_overruns_says_where_it_hung_before_it_is_killed(capfd):
    """A hang in a child (a lock a parent thread held at the fork, once in CI) is killed
    at its timeout; just before, every thread's stack goes to stderr, the scheduler's log."""
    def fn():
        hung_here()

    def hung_here():
        time.sleep(60)

    with pytest.raises(forked.ChildFailed, match="took more than 2 s: killed"):
        asyncio.run(forked.run_forked(fn, name="ETA pass", timeout_s=2))
    err = capfd.readouterr().err
    assert "Timeout (0:00:01" in err and "in hung_here" in err, err[-2000:]


# --- nothing imported in a child --------------------------------------------------------------


def _fresh(script: str, timeout: float = 60) -> str:
    """``script`` in a fresh interpreter set up as the scheduler is (Django, the scheduler's
    modules imported, nothing else yet): what it prints."""
    head = textwrap.dedent(f"""
        import asyncio, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        import django
        django.setup()
        from fairsched.engine.scheduler import Scheduler  # what runscheduler imports
        from fairsched.engine import forked
    """)
    out = subprocess.run([sys.executable, "-c", head + textwrap.dedent(script)], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env={**os.environ})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_an_eta_pass_in_a_child_imports_nothing(redis_url):
    """An import takes a lock per module; a parent thread that was importing the same module
    at the fork leaves it held in the child for ever. So the pass in a child, its snapshot
    stored in a real Redis and its result pickled, must import nothing the parent has not.
    (It imported ``encodings.idna``: every ``getaddrinfo`` encodes its host with that codec,
    and the scheduler's lease keeper and database thread make their first connection at
    about the time the first pass forks.)"""
    out = _fresh(f"""
        import multiprocessing
        from fairsched.engine.eta_passes import EtaPasses
        from fairsched.engine.ports.real import LivePublisher
        from fairsched.engine.state import LiveState
        from fairsched.engine.store.rows import ChartRow, Config, OrgRow, World

        t0 = time.time() - 1000
        orgs = [OrgRow(1, "Acme", "acme", 1, 3600.0), OrgRow(2, "Beta", "beta", 2, None)]
        charts = [ChartRow(i, 1 + i % 2, "code", "queued", t0 + i, external_id=f"x-{{i}}") for i in range(1, 13)]
        state = LiveState(World(Config(budget=1), orgs, {{}}, {{}}, charts))

        class Host:
            ETAS_KEPT = Scheduler.ETAS_KEPT
            publisher = LivePublisher({redis_url!r})

        Host.state = state
        passes = EtaPasses(Host())

        def fn():
            before = set(sys.modules)
            recv, send = multiprocessing.Pipe(duplex=False)
            forked.send_result(send, passes.pass_in_child(state, time.time()))  # as the child sends it
            return sorted(set(sys.modules) - before)

        print(asyncio.run(forked.run_forked(fn, name="ETA pass", timeout_s=30)))
    """)
    assert out.strip() == "[]", out


def test_a_child_connects_even_if_a_parent_thread_was_importing_the_idna_codec_at_the_fork(redis_url):
    """The hang itself: a parent thread holds ``encodings.idna``'s import lock at the fork
    (as while it imports it); the child's first ``getaddrinfo`` would wait for it for ever.
    The parent imported the codec before any fork (``fairsched.engine.forked`` does at its import), so the
    child never asks for the lock."""
    host, port = redis_url.split("//")[1].split("/")[0].rsplit(":", 1)
    out = _fresh(f"""
        import socket, threading
        from importlib import _bootstrap

        held, done = threading.Event(), threading.Event()

        def importing():  # as a thread in the middle of importing the module
            lock = _bootstrap._get_module_lock("encodings.idna")
            lock.acquire()
            held.set()
            done.wait()
            lock.release()

        threading.Thread(target=importing, daemon=True).start()
        held.wait()
        try:
            got = asyncio.run(forked.run_forked(lambda: len(socket.getaddrinfo({host!r}, {port})) > 0,
                                                name="ETA pass", timeout_s=5))
        except forked.ChildFailed as exc:
            got = str(exc).splitlines()[0]
        done.set()
        print(got)
    """)
    assert out.strip() == "True", out
