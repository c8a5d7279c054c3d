"""Fixtures for background jobs: a real Redis queue, a burst worker, an HTTP receiver."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import django_rq
import pytest

from jobs.worker import SimpleWorker


@pytest.fixture
def run_jobs(redis_url):
    """Run every queued rq job in this process (rq's SimpleWorker, burst mode, with the
    project's prompt stop: jobs/worker.py) and
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


@contextmanager
def _serving(make_receiver: Callable[[int], Receiver], wrap: Callable | None = None) -> Iterator[Receiver]:
    """A local server on a free port that records every POST and answers the receiver's statuses
    in turn; ``wrap`` may replace its listening socket (TLS)."""
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
    if wrap is not None:
        server.socket = wrap(server.socket)
    state["r"] = make_receiver(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["r"]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP server on a free port that records every POST."""
    with _serving(lambda port: Receiver(url=f"http://127.0.0.1:{port}/hook")) as rec:
        yield rec


def _self_signed(directory) -> tuple[str, str]:
    """A certificate for localhost and 127.0.0.1 (cryptography comes with daphne's twisted[tls])."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "receiver.crt", directory / "receiver.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@dataclass
class TlsReceiver(Receiver):
    cert_file: str = ""


@pytest.fixture
def tls_receiver(tmp_path) -> Iterator[TlsReceiver]:
    """An HTTPS receiver on localhost with a self-signed certificate (trusted only where a test
    points SSL_CERT_FILE at ``cert_file``)."""
    import ssl

    cert_file, key_file = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    with _serving(lambda port: TlsReceiver(url=f"https://localhost:{port}/hook", cert_file=cert_file),
                  wrap=lambda sock: context.wrap_socket(sock, server_side=True)) as rec:
        yield rec
