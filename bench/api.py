"""The producer API's throughput and latency, against what it wraps.

Run from the repo root: ``.venv/bin/python bench/api.py [--producers 20] [--seconds 10] [--batches 10]
[--web 1] [--server daphne|gunicorn] [--threads N] [--no-dispatch] [--postgres URL]
[--bindings client,server] [--baseline-tree DIR]``.

Starts its own Redis and the Temporal dev server on free ports, a fresh SQLite database (with
``--postgres``, a fresh database on that PostgreSQL server, dropped after), and
the web: with ``--server daphne`` (the default) ``--web`` daphne processes (1: as ``make run``
does; 2: one a core here), producer ``i`` on process ``i % --web`` as a load balancer would;
with ``--server gunicorn`` the API tier as docs/deploying.md deploys it (config/gunicorn.conf.py,
``--web`` worker processes on one port); the worker and the scheduler start for the dispatch part only (parts 1 and 2
measure the web path, not its CPU shared with an ETA pass). Figures, each with a baseline
from the same run (no timed asserts):

1. ``--producers`` concurrent producers, each with its own key and keep-alive connection,
   POST single charts for ``--seconds``: charts/s and latency p50/p95/max, without and
   with an ``Idempotency-Key`` (what examples/api_client.py sends). Baselines: the same
   producers asking ``GET /healthz`` (the web server's floor per request), and calling
   ``chart_submit`` in-process from as many threads (the service's floor).
   With ``--bindings client,server`` (gunicorn on PostgreSQL) two tiers run side by side, one
   with psycopg's client-side binding and one with server-side (``FAIRSCHED_DB_SERVER_SIDE_BINDING``),
   each single phase on each twice, alternating: their ratio. ``--baseline-tree DIR`` does the
   same with a tier running the code of DIR (``git archive HEAD | tar -x -C DIR``: before a change).
2. One producer POSTs ``--batches`` batches of 1,000 charts (to the first process): charts/s, against
   ``chart_submit_many`` of 1,000 in-process.
3. Dispatch: with free budget and an empty backlog, the time from a chart's ``created_at``
   (its insert) to its ``dispatched_at``, API against ORM (``chart_submit``), alternating.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._stack import live_stack  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class WebServer:
    """A web server on a free port of this machine, with the bench's environment; a subclass
    gives its command line (``argv``)."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path = ROOT) -> None:
        from fairsched.runtime import embedded

        self.port = embedded.free_port()
        self.proc = subprocess.Popen(
            self.argv(), cwd=cwd, env={**env, "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "bench",
                                        "DJANGO_SECURE_SSL_REDIRECT": "0", "FAIRSCHED_DEMO_LOAD": "0"},
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        embedded.wait_for_port(self.port, timeout=60, proc=self.proc)

    def argv(self) -> list[str]:
        raise NotImplementedError

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Daphne(WebServer):
    def argv(self) -> list[str]:
        return [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(self.port),
                "config.asgi:application"]


class Gunicorn(WebServer):
    """The API tier (docs/deploying.md, "The API tier"): gunicorn with its settings
    (config/gunicorn.conf.py), ``workers`` processes on one port, ``threads`` each if given."""

    def __init__(self, env: dict[str, str], log: Path, workers: int, threads: int | None, cwd: Path = ROOT) -> None:
        self.workers, self.threads = workers, threads
        super().__init__(env, log, cwd)

    def argv(self) -> list[str]:
        more = ["--threads", str(self.threads)] if self.threads else []
        return [str(Path(sys.executable).parent / "gunicorn"), "-c", "config/gunicorn.conf.py",
                "-b", f"127.0.0.1:{self.port}", "-w", str(self.workers), *more, "config.wsgi"]


def producers(ports: list[int], keys: list[str], seconds: float, request) -> tuple[int, list[float], int]:
    """Run one thread per key for ``seconds``, producer ``i`` on web process ``i % len(ports)``
    (what a load balancer in front of them does); ``request(conn, key, i)`` -> (status, charts).
    Returns (charts, latencies in ms, errors)."""
    stop_at = time.perf_counter() + seconds
    lat: list[float] = []
    counts = [0, 0]
    lock = threading.Lock()

    def run(key: str, port: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine, n, errors, i = [], 0, 0, 0
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            status, charts = request(conn, key, i)
            mine.append((time.perf_counter() - t0) * 1000)
            i += 1
            if status >= 400:
                errors += 1
            n += charts
        conn.close()
        with lock:
            lat.extend(mine)
            counts[0] += n
            counts[1] += errors

    threads = [threading.Thread(target=run, args=(k, ports[i % len(ports)])) for i, k in enumerate(keys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts[0], lat, counts[1]


def post(conn: http.client.HTTPConnection, path: str, key: str, body: dict, idem: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if idem:
        headers["Idempotency-Key"] = idem
    conn.request("POST", path, json.dumps(body), headers)
    response = conn.getresponse()
    return response.status, response.read()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--producers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--dispatches", type=int, default=10)
    parser.add_argument("--no-dispatch", action="store_true")
    parser.add_argument("--web", type=int, default=1, help="web processes (the producers spread over them)")
    parser.add_argument("--server", choices=("daphne", "gunicorn"), default="daphne",
                        help="daphne: --web daphne processes, each on its own port (make run's web); "
                             "gunicorn: the API tier, one gunicorn of --web worker processes")
    parser.add_argument("--threads", type=int, default=None,
                        help="gunicorn: threads per worker process (default: config/gunicorn.conf.py's)")
    parser.add_argument("--postgres", default="",
                        help="a PostgreSQL server's URL: the bench runs on a database of its own there")
    parser.add_argument("--baseline-tree", default="",
                        help="gunicorn: a checkout of other code (the commit before, say: git archive HEAD | tar -x "
                             "-C DIR): the singles run on its tier and on this tree's side by side, alternating")
    parser.add_argument("--bindings", default="",
                        help="PostgreSQL, gunicorn: 'client,server' runs the singles on two tiers side by side, "
                             "psycopg's client-side binding (the default) and server-side "
                             "(FAIRSCHED_DB_SERVER_SIDE_BINDING=1), alternating their phases")
    args = parser.parse_args()
    os.environ.setdefault("FAIRSCHED_API_RATE", "1000")  # per key: the bench measures the server, not the limit
    with live_stack("fairsched-bench-api-", postgres=args.postgres) as stack:
        run(args, stack)


def start_tiers(args, stack) -> tuple[list[WebServer], dict[str, list[int]]]:
    """The web servers, and the tiers compared (label -> ports; one unlabelled tier without
    ``--bindings`` or ``--baseline-tree``): the ratio is the last's over the first's."""
    bindings = [b for b in args.bindings.split(",") if b]
    if bindings and (args.server != "gunicorn" or not args.postgres or not set(bindings) <= {"client", "server"}):
        raise SystemExit("--bindings client,server: with --server gunicorn and --postgres")
    if args.baseline_tree and (args.server != "gunicorn" or bindings):
        raise SystemExit("--baseline-tree: with --server gunicorn, without --bindings")
    variants: dict[str, tuple[dict[str, str], Path]] = {"": ({}, ROOT)}
    if bindings:
        variants = {f"{b}-side binding": ({"FAIRSCHED_DB_SERVER_SIDE_BINDING": "1" if b == "server" else "0"}, ROOT)
                    for b in bindings}
    elif args.baseline_tree:
        variants = {"baseline tree": ({}, Path(args.baseline_tree).resolve()), "this tree": ({}, ROOT)}
    tiers: dict[str, list[int]] = {}  # label -> its ports
    if args.server == "gunicorn":
        webs = []
        for i, (label, (extra, cwd)) in enumerate(variants.items()):
            webs.append(Gunicorn({**stack.env, **extra}, stack.tmp / f"gunicorn{f'-{i}' if i else ''}.log",
                                 args.web, args.threads, cwd))
            tiers[label] = [webs[-1].port]
    else:
        webs = [Daphne(stack.env, stack.tmp / f"daphne-{i}.log") for i in range(args.web)]
        tiers[""] = [w.port for w in webs]
    return webs, tiers


def run(args, stack) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from charts.models import Chart
    from charts.services import chart_submit, chart_submit_many
    from orgs.models import OrgToken
    from orgs.models import Org, Workflow

    orgs = [Org.objects.create(name=f"Producer {i}") for i in range(args.producers)]
    Workflow.objects.create(name="code", temporal_type="DemoChart")
    keys = [OrgToken.issue(org=o, name="bench", scope="submit")[1] for o in orgs]
    webs, tiers = start_tiers(args, stack)
    # the rest of the bench: this tree's tier (gunicorn), the first process (daphne)
    web, ports = webs[-1] if args.server == "gunicorn" else webs[0], tiers[list(tiers)[-1]]
    print(f"{args.web} {args.server} web process{'es' if args.web > 1 else ''}"
          f"{f' of {args.threads} threads' if args.server == 'gunicorn' and args.threads else ''}, {'PostgreSQL' if args.postgres else 'SQLite'}, {args.producers} producers for "
          f"{args.seconds:g} s each phase (cpus: {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    try:
        # warm up the web processes (imports, first connections)
        for w in webs:
            conn = http.client.HTTPConnection("127.0.0.1", w.port)
            for i in range(20):
                post(conn, "/api/v1/charts", keys[0], {"workflow": "code", "payload": {"seconds": 1}})
            conn.close()

        def healthz(conn, key, i):
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            r.read()
            return r.status, 1

        def single(conn, key, i):
            status, _ = post(conn, "/api/v1/charts", key, {"workflow": "code", "payload": {"seconds": 1}})
            return status, 1 if status < 300 else 0

        run_tag = [0]  # a new external id each phase: a repeated one is a 200, another path

        def single_idem(conn, key, i):
            status, _ = post(conn, "/api/v1/charts", key, {"workflow": "code", "payload": {"seconds": 1},
                                                           "external_id": f"{key[-6:]}-{run_tag[0]}-{i}"},
                             idem=str(uuid.uuid4()))
            return status, 1 if status < 300 else 0

        def phase(name: str, fn, on: list[int], label: str = "") -> tuple[float, float]:
            run_tag[0] += 1
            n, lat, errors = producers(on, keys, args.seconds, fn)
            rate = n / args.seconds
            shown = f"{name} [{label}]" if label else name
            print(f"{shown:<55} {rate:8.0f} /s  p50 {pct(lat, .5):6.1f} ms  p95 {pct(lat, .95):6.1f} ms  "
                  f"max {max(lat):7.1f} ms  errors {errors}")
            return rate, pct(lat, .95)

        figures = {"GET /healthz (baseline: the server's floor)":
                   phase("GET /healthz (baseline: the server's floor)", healthz, ports)[0]}
        for name, fn in (("POST /api/v1/charts", single),
                         ("POST /api/v1/charts + Idempotency-Key + external_id", single_idem)):
            if len(tiers) == 1:
                figures[name] = phase(name, fn, ports)[0]
                continue
            # each tier twice, alternating (a, b, b, a): the machine's drift falls on both
            rates: dict[str, list[float]] = {t: [] for t in tiers}
            p95s: dict[str, list[float]] = {t: [] for t in tiers}
            for t in [*tiers, *reversed(tiers)]:
                rate, p95 = phase(name, fn, tiers[t], t)
                rates[t].append(rate)
                p95s[t].append(p95)
            first, last = list(tiers)
            mean = {t: sum(r) / len(r) for t, r in rates.items()}
            print(f"  {name}: {last} / {first} = {mean[last] / mean[first]:.2f}x the rate "
                  f"({mean[last]:.0f} against {mean[first]:.0f}/s), p95 {max(p95s[last]):.0f} against "
                  f"{max(p95s[first]):.0f} ms (the worse of two)")
            figures[name] = mean[last]

        # baseline: the service in-process, from as many threads
        stop_at = time.perf_counter() + args.seconds
        made = [0] * args.producers

        def orm(i: int) -> None:
            while time.perf_counter() < stop_at:
                chart_submit(org=orgs[i], workflow="code", payload={"seconds": 1})
                made[i] += 1
            connection.close()

        with ThreadPoolExecutor(args.producers) as pool:
            list(pool.map(orm, range(args.producers)))
        orm_rate = sum(made) / args.seconds
        print(f"{'chart_submit in-process, same threads (baseline)':<55} {orm_rate:8.0f} /s")
        api_rate = figures["POST /api/v1/charts"]
        print(f"API singles / in-process service: {api_rate / orm_rate:.2f}x; "
              f"/ the server's floor: {api_rate / figures['GET /healthz (baseline: the server' + chr(39) + 's floor)']:.2f}x")

        # batches of 1,000
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=120)
        times = []
        for b in range(args.batches):
            body = {"charts": [{"workflow": "code", "payload": {"seconds": 1}, "external_id": f"batch-{b}-{i}"}
                               for i in range(1000)]}
            t0 = time.perf_counter()
            status, _ = post(conn, "/api/v1/charts/batch", keys[0], body, idem=str(uuid.uuid4()))
            times.append(time.perf_counter() - t0)
            assert status == 201, status
        conn.close()
        batch_rate = 1000 * len(times) / sum(times)
        t0 = time.perf_counter()
        for b in range(3):
            chart_submit_many(charts=[{"org": orgs[1], "workflow": "code", "payload": {"seconds": 1},
                                       "external_id": f"orm-batch-{b}-{i}"} for i in range(1000)])
        orm_batch = 3000 / (time.perf_counter() - t0)
        print(f"POST /api/v1/charts/batch of 1,000: {batch_rate:8.0f} charts/s (p50 {statistics.median(times) * 1000:.0f} ms "
              f"a batch); chart_submit_many in-process {orm_batch:8.0f} charts/s = {batch_rate / orm_batch:.2f}x")

        if not args.no_dispatch:  # the scheduler and worker start now: the phases above measure the web path
            stack.spawn("runworker")
            stack.spawn("runscheduler")
            dispatch(args, web, keys[0], orgs[0])
    finally:
        for w in webs:
            w.stop()
        print(f"charts written: {Chart.objects.count():,}")


def dispatch(args, web, key: str, org) -> None:
    """Submit one chart at a time with free budget, API and ORM alternating; time to dispatched_at."""
    from charts.models import Chart, ChartState
    from charts.services import chart_submit
    from django.utils import timezone

    from control.services import budget_set

    Chart.objects.filter(state=ChartState.QUEUED).update(state=ChartState.CANCELLED, updated_at=timezone.now())
    budget_set(budget=10_000)
    time.sleep(15)  # the scheduler starts, loads, and sees the budget
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=60)
    waits: dict[str, list[float]] = {"api": [], "orm": []}

    def wait_dispatched(pk: int, t0: float) -> float:
        """From the chart's row (created_at, set as it is inserted: the same in both paths)
        to its dispatch; the API's own request time is part 1's figure."""
        deadline = time.time() + 30
        while time.time() < deadline:
            row = Chart.objects.filter(pk=pk).values("dispatched_at", "created_at").first()
            if row and row["dispatched_at"]:
                return max(0.0, (row["dispatched_at"] - row["created_at"]).total_seconds())
            time.sleep(0.005)
        return float("nan")

    for i in range(args.dispatches):
        for way in ("api", "orm") if i % 2 == 0 else ("orm", "api"):
            t0 = time.time()
            if way == "api":
                status, body = post(conn, "/api/v1/charts", key, {"workflow": "code", "payload": {"seconds": 1}})
                pk = json.loads(body)["id"]
            else:
                pk = chart_submit(org=org, workflow="code", payload={"seconds": 1}).pk
            waits[way].append(wait_dispatched(pk, t0) * 1000)
            time.sleep(0.3)
    conn.close()
    api_ms, orm_ms = statistics.median(waits["api"]), statistics.median(waits["orm"])
    print(f"created -> dispatched, median of {args.dispatches}: API {api_ms:.0f} ms (p95 {pct(waits['api'], .95):.0f}), "
          f"ORM {orm_ms:.0f} ms (p95 {pct(waits['orm'], .95):.0f}) = {api_ms / orm_ms:.2f}x")


if __name__ == "__main__":
    main()
