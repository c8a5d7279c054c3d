"""Fixtures for background jobs: a real Redis queue, a burst worker, an HTTP receiver."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import django_rq
import pytest
from rq import SimpleWorker


@pytest.fixture
def run_jobs(redis_url):
    """Run every queued rq job in this process (rq's SimpleWorker, burst mode) and
    return the worker. Jobs run for real: real Redis, real database (tests using it
    are ``transaction=True`` so the worker sees committed rows)."""

    def run(with_scheduler: bool = False) -> SimpleWorker:
        queue = django_rq.get_queue("default")
        worker = SimpleWorker([queue], connection=queue.connection)
        worker.work(burst=True, with_scheduler=with_scheduler)
        return worker

    return run


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    # Status codes to answer, in turn; the last one repeats.
    statuses: list[int] = field(default_factory=lambda: [200])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP server on a free port that records every POST."""
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's API
            rec = state["r"]
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            rec.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            n = len(rec.requests)
            code = rec.statuses[min(n - 1, len(rec.statuses) - 1)]
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(f"answer {n}: {code}".encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["r"] = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/hook")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["r"]
    finally:
        server.shutdown()
        server.server_close()
