"""``fairsched.runtime.shutdown``: a SIGTERM always reaches the loop, and a stop that overruns its
bound ends the process anyway, releasing the scheduler's lease only if it still holds it.

Each case runs a tiny script in a subprocess (signals are per process); the scripts use
the real module and, for the lease, a real Redis.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 20  # generous: each script stops in well under a second, or after its own 1 s bound

PRELUDE = f"""
import asyncio, logging, os, signal, sys, threading, time
sys.path.insert(0, {str(ROOT)!r})
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s", stream=sys.stdout)
from fairsched.runtime.shutdown import StopDeadline
"""


def _start(tmp_path: Path, body: str, *args: str) -> subprocess.Popen:
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for_line(proc: subprocess.Popen, text: str) -> None:
    for line in proc.stdout:
        if text in line:
            return
    raise AssertionError(f"the script ended before printing {text!r}")


def _finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the script did not exit within {WAIT_S} s of the signal:\n{out}")
    return out


def test_a_signal_reaches_the_loop_even_when_a_busy_loop_let_its_self_pipe_fill(tmp_path):
    """asyncio's own signal handlers share the loop's self-pipe with call_soon_threadsafe:
    threads completing work while the loop thread is busy fill it (about 280 bytes here)
    and the signal is dropped. The deadline's pipe carries signals only."""
    proc = _start(tmp_path, """
        deadline = StopDeadline(name="test", timeout_s=30)
        deadline.install()

        async def main():
            loop = asyncio.get_running_loop()
            stopped = asyncio.Event()
            deadline.attach(loop, stopped.set)

            def flood():
                for _ in range(5000):  # database, executor and Temporal bridge completions
                    loop.call_soon_threadsafe(lambda: None)
                os.kill(os.getpid(), signal.SIGTERM)

            thread = threading.Thread(target=flood)
            thread.start()
            time.sleep(1.0)  # the loop thread is busy (an ETA pass over a large backlog)
            thread.join()
            try:
                await asyncio.wait_for(stopped.wait(), 10)
                print("the stop reached the loop", flush=True)
            except asyncio.TimeoutError:
                print("the stop was lost", flush=True)

        asyncio.run(main())
    """)
    out = _finish(proc)
    assert "the stop reached the loop" in out, out
    assert proc.returncode == 0, out


def test_a_signal_during_start_up_stops_the_loop_once_it_runs(tmp_path):
    proc = _start(tmp_path, """
        deadline = StopDeadline(name="test", timeout_s=30)
        deadline.install()
        print("installed", flush=True)
        time.sleep(1.5)  # Django setup, imports: no loop yet

        async def main():
            stopped = asyncio.Event()
            deadline.attach(asyncio.get_running_loop(), stopped.set)
            await asyncio.wait_for(stopped.wait(), 10)
            print(f"stopped ({deadline.signal_name})", flush=True)

        asyncio.run(main())
    """)
    _wait_for_line(proc, "installed")
    proc.send_signal(signal.SIGTERM)
    out = _finish(proc)
    assert "stopped (SIGTERM)" in out, out


STUCK = """
    from fairsched.engine.ports.lease import release_now

    url, token = sys.argv[1], sys.argv[2]
    deadline = StopDeadline(name="test", timeout_s=float(sys.argv[3]), phase=lambda: "stuck on purpose",
                            on_force=lambda: release_now(url, token))
    deadline.install()

    async def main():
        deadline.attach(asyncio.get_running_loop(), lambda: print("warm stop asked", flush=True))
        print("ready", flush=True)
        time.sleep(600)  # a step that never yields: the warm stop can never run

    asyncio.run(main())
"""


@pytest.mark.parametrize("holder", ["this process", "another process"])
def test_a_stop_that_overruns_its_bound_is_forced_and_releases_only_its_own_lease(tmp_path, redis_url, holder):
    import redis

    from fairsched.engine.ports.lease import LEASE_KEY

    client = redis.Redis.from_url(redis_url)
    client.set(LEASE_KEY, "mine" if holder == "this process" else "theirs", px=60_000)
    proc = _start(tmp_path, STUCK, redis_url, "mine", "1.0")
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    out = _finish(proc)
    assert proc.returncode == 0, out
    assert "test stopped (forced after 1." in out and "stuck on purpose" in out, out
    assert "Current thread 0x" in out and "in main" in out  # every thread's stack: where it was stuck
    assert client.get(LEASE_KEY) == (None if holder == "this process" else b"theirs")


def test_a_second_signal_forces_the_stop_at_once(tmp_path, redis_url):
    proc = _start(tmp_path, STUCK, redis_url, "mine", "600")
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)  # the loop is stuck: the warm stop never runs, the bound is 600 s
    proc.send_signal(signal.SIGINT)
    out = _finish(proc)
    assert "second signal (SIGINT): test stops now" in out, out
    assert "test stopped (forced after" in out, out
