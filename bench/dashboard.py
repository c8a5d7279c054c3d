"""Dashboard latency: a chart's creation -> its appearance on an open dashboard.

Run from the repo root: ``.venv/bin/python bench/dashboard.py [--charts 10000] [--probes 20] [--sockets 100]``.

Starts its own Redis, daphne and (when ``fairsched.engine`` exists) the Temporal
dev server and ``manage.py runscheduler``, on free ports, with a fresh SQLite
database under ``var/bench-dashboard/``. Without the engine it simulates the
scheduler's publication (``dashboard.simulate.publish_from_db`` after each
creation) and says so.

A backlog of ``--charts`` queued charts over 10 orgs is created first. Then a
*probe* chart is created in a small org (through ``chart_submit``, as a producer
would), and the time until a dashboard socket receives a message whose order
rows contain it is measured: creation -> notification -> scheduler -> ETA pass ->
snapshot in Redis -> channel layer -> consumer -> socket. The measuring socket
looks at the probe org's page of the order (the filter of the dashboard); the
others are plain dashboards on page 1. Figures: p50/p95/max with one socket, then
with ``--sockets`` more open, plus the web and scheduler CPU and the messages each
socket received per second (the coalescing caps it at 5).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.util
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORK = ROOT / "var" / "bench-dashboard"


# --- a minimal WebSocket client (the project ships no client library) ----------------------------------


class Closed(Exception):
    pass


class WS:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, path: str, cookie: str) -> "WS":
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2 ** 26)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                      f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n").encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise Closed(head.split(b"\r\n", 1)[0].decode())
        return cls(reader, writer)

    async def recv(self) -> dict:
        parts = []
        while True:
            b1, b2 = await self.reader.readexactly(2)
            n = b2 & 0x7F
            if n == 126:
                n = struct.unpack(">H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", await self.reader.readexactly(8))[0]
            data = await self.reader.readexactly(n)
            op = b1 & 0x0F
            if op == 8:
                raise Closed("closed by the server")
            if op == 9:
                self._frame(0xA, data)
                continue
            if op in (1, 2, 0):
                parts.append(data)
                if b1 & 0x80:
                    return json.loads(b"".join(parts))

    def _frame(self, op: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | op]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
        self.writer.write(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    async def send(self, message: dict) -> None:
        self._frame(1, json.dumps(message).encode())
        await self.writer.drain()

    def close(self) -> None:
        try:
            self._frame(8, b"")
        except Exception:  # noqa: BLE001
            pass
        self.writer.close()


# --- processes ---------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# --- the measurement ----------------------------------------------------------------------------------------


class Watcher:
    """A dashboard socket filtered to the probe org: notes when each chart id first shows up."""

    def __init__(self, ws: WS) -> None:
        self.ws = ws
        self.seen: dict[int, float] = {}
        self.noticed: dict[int, float] = {}  # the scheduler's "queued" event (counters move, no position yet)
        self.waiting: dict[int, asyncio.Future] = {}
        self.task = asyncio.create_task(self.run())

    async def run(self) -> None:
        try:
            while True:
                msg = await self.ws.recv()
                now = time.monotonic()
                for ev in msg.get("events") or []:
                    if ev.get("kind") == "queued" and ev.get("chart") not in self.noticed:
                        self.noticed[ev.get("chart")] = now
                rows = (msg.get("order") or {}).get("rows") or []
                for r in rows:
                    cid = r.get("id")
                    if cid not in self.seen:
                        self.seen[cid] = now
                        fut = self.waiting.pop(cid, None)
                        if fut is not None and not fut.done():
                            fut.set_result(now)
        except (Closed, asyncio.IncompleteReadError, ConnectionError):
            pass

    async def wait_for(self, cid: int, timeout: float = 30.0) -> float:
        if cid in self.seen:
            return self.seen[cid]
        fut = asyncio.get_running_loop().create_future()
        self.waiting[cid] = fut
        return await asyncio.wait_for(fut, timeout)


class Drain:
    """A plain dashboard socket that reads everything (as a browser would) and counts it."""

    def __init__(self, ws: WS) -> None:
        self.ws, self.messages, self.bytes = ws, 0, 0
        self.task = asyncio.create_task(self.run())

    async def run(self) -> None:
        try:
            while True:
                await self.ws.recv()
                self.messages += 1
        except (Closed, asyncio.IncompleteReadError, ConnectionError):
            pass


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


async def probe(n: int, watcher: Watcher, probe_org, workflow, simulated: bool, tag: str,
                noticed: list[float]) -> list[float]:
    from charts.services import chart_submit
    from dashboard.simulate import publish_from_db

    lat = []
    for i in range(n):
        t0 = time.monotonic()
        chart = await asyncio.to_thread(chart_submit, org=probe_org, workflow=workflow, external_id=f"{tag}-{i}")
        if simulated:
            await asyncio.to_thread(publish_from_db)
        seen = await watcher.wait_for(chart.pk)
        lat.append(seen - t0)
        if chart.pk in watcher.noticed:
            noticed.append(watcher.noticed[chart.pk] - t0)
        await asyncio.sleep(random.uniform(0.3, 1.2))  # not in step with the ETA pass
    return lat


def report(label: str, lat: list[float]) -> None:
    print(f"  {label}: p50 {statistics.median(lat) * 1000:.0f} ms, p95 {pct(lat, 95) * 1000:.0f} ms, "
          f"max {max(lat) * 1000:.0f} ms  (n={len(lat)})")


async def measure(args, port: int, cookie: str, probe_org, workflow, simulated: bool, pids: dict[str, int]) -> None:
    ws = await WS.connect(port, "/ws/dashboard/", cookie)
    first = await ws.recv()
    assert first["type"] == "snapshot", first
    await ws.send({"type": "view", "org": probe_org.pk, "offset": 0, "limit": 500})
    watcher = Watcher(ws)
    await asyncio.sleep(0.5)

    ev1: list[float] = []
    lat1 = await probe(args.probes, watcher, probe_org, workflow, simulated, "one", ev1)
    report("1 dashboard socket   ", lat1)
    if ev1:
        report("  (its 'queued' event, no position yet)", ev1)

    drains = []
    t_open = time.monotonic()
    for _ in range(args.sockets):
        s = await WS.connect(port, "/ws/dashboard/", cookie)
        drains.append(Drain(s))
    opened = time.monotonic() - t_open
    await asyncio.sleep(2.0)
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    m0 = sum(d.messages for d in drains)
    t0 = time.monotonic()
    ev2: list[float] = []
    lat2 = await probe(args.probes, watcher, probe_org, workflow, simulated, "many", ev2)
    wall = time.monotonic() - t0
    msgs = sum(d.messages for d in drains) - m0
    alive = sum(1 for d in drains if not d.task.done())
    report(f"{args.sockets + 1} dashboard sockets", lat2)
    if ev2:
        report("  (its 'queued' event, no position yet)", ev2)
    print(f"  {args.sockets} sockets opened in {opened:.1f} s; {alive} still open at the end; "
          f"{msgs / wall / max(1, len(drains)):.2f} messages/s per socket (coalescing caps it at 5)")
    for k, p in pids.items():
        print(f"  {k} CPU while {args.sockets + 1} sockets open: {(cpu_seconds(p) - cpu0[k]) / wall * 100:.0f}% of one core")
    for d in drains:
        d.ws.close()
        d.task.cancel()
    ws.close()
    watcher.task.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--charts", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--sockets", type=int, default=100)
    parser.add_argument("--eta-interval", type=float, default=None,
                        help="set SchedulerSettings.eta_interval_s (default: leave the default, 3 s)")
    parser.add_argument("--simulate", action="store_true", help="simulate the scheduler even if the engine exists")
    args = parser.parse_args()

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    from fairsched.runtime import embedded

    procs: list[subprocess.Popen] = []
    services = []
    try:
        redis = embedded.start_redis(log=WORK / "redis.log")
        services.append(redis)
        env = {k: v for k, v in os.environ.items() if k != "FAIRSCHED_CHANNEL_LAYER"}
        env.update(DATABASE_URL=f"sqlite:///{WORK / 'bench.sqlite3'}", REDIS_URL=redis.url,
                   FAIRSCHED_VAR_DIR=str(WORK), DJANGO_SETTINGS_MODULE="config.settings", DJANGO_DEBUG="1",
                   FAIRSCHED_LOG_LEVEL="WARNING")
        os.environ.clear()
        os.environ.update(env)
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        from charts.models import Chart
        from control.models import SchedulerSettings
        from common.snapshot import read_snapshot
        from orgs.models import Org, Workflow

        call_command("migrate", verbosity=0)
        wf = Workflow.objects.create(name="code", temporal_type="BenchNoWorker")
        orgs = [Org.objects.create(name=f"Org {i:02d}", weight=random.Random(i).choice([1, 1, 2, 3])) for i in range(10)]
        probe_org = Org.objects.create(name="Probe", weight=1)
        settings_row = SchedulerSettings.get()
        settings_row.budget = 20
        if args.eta_interval:
            settings_row.eta_interval_s = args.eta_interval
        settings_row.save()
        rnd = random.Random(1)
        t = time.time() - 3600
        Chart.objects.bulk_create([Chart(org=orgs[min(9, int(rnd.expovariate(0.4)))], workflow=wf,
                                         external_id=f"bl-{i}", created_at=_dt(t + i * 0.3))
                                   for i in range(args.charts)], batch_size=2000)
        get_user_model().objects.create_superuser("bench", "bench@example.com", "bench-pw-1")
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        cookie = f"sessionid={client.cookies['sessionid'].value}"

        simulated = args.simulate or importlib.util.find_spec("fairsched.engine") is None
        pids: dict[str, int] = {}
        if not simulated:
            temporal = embedded.start_temporal(log=WORK / "temporal.log", db_file=None)
            services.append(temporal)
            sched_env = {**env, "TEMPORAL_ADDRESS": temporal.url}
            sched = start([sys.executable, "manage.py", "runscheduler"], sched_env, WORK / "scheduler.log")
            procs.append(sched)
            pids["scheduler"] = sched.pid
        port = embedded.free_port()
        daphne = start([str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                        "config.asgi:application"], env, WORK / "daphne.log")
        procs.append(daphne)
        pids["web (daphne)"] = daphne.pid
        embedded.wait_for_port(port, timeout=60, proc=daphne)

        if simulated:
            from dashboard.simulate import publish_from_db

            t0 = time.monotonic()
            publish_from_db()
            print(f"scheduler: SIMULATED (fairsched.engine {'skipped' if args.simulate else 'not found'}): "
                  f"the bench stores and broadcasts a snapshot of the DB after each creation "
                  f"(one publication of the {args.charts} backlog takes {time.monotonic() - t0:.2f} s)")
        else:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                s = read_snapshot()
                if s and s.get("counters", {}).get("queued", 0) + s.get("counters", {}).get("running", 0) >= args.charts:
                    break
                time.sleep(0.5)
            else:
                raise SystemExit("the scheduler published no snapshot of the backlog within 120 s (see var/bench-dashboard/scheduler.log)")
            print(f"scheduler: manage.py runscheduler (fairsched.engine) with the Temporal dev server; "
                  f"ETA pass every {SchedulerSettings.get().eta_interval_s:g} s; budget {SchedulerSettings.get().budget}")
        print(f"backlog: {args.charts} queued charts over 10 orgs; probes: {args.probes} charts per case, "
              f"created one at a time in a small org through chart_submit")
        print("creation -> appearance on an open dashboard:")
        asyncio.run(measure(args, port, cookie, probe_org, wf, simulated, pids))
    finally:
        for p in reversed(procs):
            stop(p)
        for s in reversed(services):
            s.stop()


def _dt(ts: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


if __name__ == "__main__":
    main()
