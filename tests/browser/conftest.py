"""A real web server for browser tests: daphne on a free port, against the test
database (a file, or PostgreSQL) and the test Redis, with the Redis channel layer.

The scheduler is simulated (``dashboard.simulate.publish_from_db``: the scheduler's own reader and snapshot): the test
stores a snapshot and broadcasts it over the Redis channel layer, exactly what
``manage.py runscheduler`` does after an ETA pass.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fairsched.runtime import embedded
from tests import zygote

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts"


class Daphne:
    """daphne serving config.asgi:application on ``port``, against the test database and Redis."""

    def __init__(self, db_url: str, redis_url: str, port: int | None = None, log_name: str = "daphne-browser.log"):
        self.db_url, self.redis_url = db_url, redis_url
        self.port = port or embedded.free_port()
        self.log_name = log_name
        self.proc: subprocess.Popen | zygote.ZygoteProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Daphne":
        env = {k: v for k, v in os.environ.items() if k != "FAIRSCHED_CHANNEL_LAYER"}
        env.update(DATABASE_URL=self.db_url, REDIS_URL=self.redis_url, DJANGO_SETTINGS_MODULE="config.settings",
                   DJANGO_DEBUG="1", FAIRSCHED_SERVE_STATIC="1", PYTHONUNBUFFERED="1",
                   # the tests publish once, as the scheduler would, and then read it for many
                   # seconds on a loaded CI machine: it must not turn stale under them (the
                   # stale badge's own test publishes a snapshot an hour old)
                   FAIRSCHED_STALE_MIN_S="300")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.proc = zygote.popen([Path(sys.executable).parent / "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                  "config.asgi:application"], env, ROOT, ARTIFACTS / self.log_name)
        embedded.wait_for_port(self.port, timeout=60, proc=self.proc)
        return self

    def stop(self, kill: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _require_chromium() -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium) to run browser tests")


@pytest.fixture(scope="session")
def browser_server(test_db_url, redis_service) -> Iterator[str]:
    """``http://127.0.0.1:<port>``: daphne serving config.asgi:application."""
    _require_chromium()
    server = Daphne(test_db_url, redis_service.url)
    try:
        yield server.start().url
    finally:
        server.stop()
        if not test_db_url.startswith("sqlite"):
            time.sleep(1.0)  # let PostgreSQL end daphne's backends before the test database is dropped


@pytest.fixture
def own_server(test_db_url, redis_service) -> Iterator[Daphne]:
    """A daphne of this test's own, which the test may kill and start again on the same port."""
    _require_chromium()
    server = Daphne(test_db_url, redis_service.url, log_name="daphne-own.log")
    try:
        yield server
    finally:
        # Killed, not stopped: the browser (torn down after this) still holds a WebSocket,
        # which a graceful stop waits out (10 s of the suite).
        server.stop(kill=True)
        if not test_db_url.startswith("sqlite"):
            time.sleep(1.0)


class _Chromium:
    """One Playwright driver and one headless Chromium for every browser test of this test
    process (an xdist worker): starting them took 2-3 s a test. Each test gets fresh
    contexts and pages of its own (:func:`browser` closes them after it).

    Playwright's sync API marks its event loop as this thread's running loop between its
    calls (it runs in a greenlet that waits inside the loop). Left so between browser tests,
    ``asyncio.run`` and the async tests in this process would refuse to start, and Django
    would take every test for async code: the mark is set only while a browser test runs
    (:meth:`enter`, :meth:`leave`)."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.loop = asyncio._get_running_loop()
        self.browser = None
        self.leave()

    def enter(self):
        asyncio._set_running_loop(self.loop)
        if self.browser is None or not self.browser.is_connected():  # first use, or it crashed
            self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                           args=CHROMIUM_ARGS)
        return self.browser

    def leave(self) -> None:
        asyncio._set_running_loop(None)

    def close(self) -> None:
        asyncio._set_running_loop(self.loop)
        try:
            if self.browser is not None and self.browser.is_connected():
                self.browser.close()
        finally:
            self.playwright.stop()


@pytest.fixture(scope="session")
def _chromium() -> Iterator[_Chromium]:
    _require_chromium()
    chromium = _Chromium()
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def browser(browser_server, _chromium, monkeypatch) -> Iterator:
    """The test process's Chromium (:class:`_Chromium`); the contexts and pages the test opens
    are closed after it."""
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    b = _chromium.enter()
    try:
        yield b
    finally:
        try:
            for context in b.contexts:
                context.close()
        finally:
            _chromium.leave()
            # The test's ORM calls ran in Playwright's context, with connections of their own.
            from django.db import connections

            connections.close_all()


@pytest.fixture
def redis_layer_publish(redis_url):
    """Store a snapshot of the DB and broadcast it over the *Redis* channel layer (the
    test process itself uses the in-memory one), like the scheduler does."""
    from channels_redis.core import RedisChannelLayer

    from dashboard.simulate import store_from_db
    from common import live_updates

    layer = RedisChannelLayer(hosts=[redis_url])

    def send(seq: int) -> None:
        live_updates.send(live_updates.SnapshotStored(seq=seq), layer=layer)

    def publish() -> int:
        seq = store_from_db()
        # Playwright's sync API runs an event loop in this thread: send from another one.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(send, seq).result(timeout=10)
        return seq

    return publish


# An init script (``context.add_init_script``, run by DevTools before each document's own
# scripts, outside its Content-Security-Policy): the page counts what it still waits for, its
# requests (a fetch until the body read from it has been handed on: ``r.json()``, ``r.text()``)
# and its sockets (until their first message, the snapshot, or their close), each counted
# down a task after it ends, once the page's own callbacks on it have run.
# ``window.__fairschedSettled()`` then says whether the page has settled (:func:`settle`).
SETTLE_JS = """(() => {
  let pending = 0, quiet = 0;
  const done = () => { setTimeout(() => { pending -= 1; }); };
  const track = (promise) => { pending += 1; promise.then(done, done); return promise; };
  const fetch_ = window.fetch;
  window.fetch = function (...args) { return track(fetch_.apply(this, args)); };
  for (const read of ["json", "text", "blob", "arrayBuffer", "formData"]) {
    const read_ = Response.prototype[read];
    Response.prototype[read] = function (...args) { return track(read_.apply(this, args)); };
  }
  const Socket = window.WebSocket;
  window.WebSocket = class extends Socket {
    constructor(...args) {
      super(...args);
      pending += 1;
      let first = true;
      const end = () => { if (first) { first = false; done(); } };
      this.addEventListener("message", end);
      this.addEventListener("close", end);
    }
  };
  const still = () => document.readyState === "complete" && pending === 0
    && [...document.querySelectorAll("[data-live]")].every((el) => el.dataset.state !== "connecting");
  // Settled: loaded, nothing in flight, every live indicator past "connecting", and so for two
  // frames in a row (a render the last message queued for the next frame has been drawn).
  window.__fairschedSettled = () => { quiet = still() ? quiet + 1 : 0; return quiet >= 2; };
})();"""


def settle(page, timeout: float = 10_000) -> None:
    """Wait until ``page`` (of a context given :data:`SETTLE_JS`) has settled: loaded, no request
    or first socket message pending, its live indicators connected, two frames drawn since."""
    page.wait_for_function("() => window.__fairschedSettled()", polling="raf", timeout=timeout)


def login(page, base: str, username: str, password: str = "pw-for-tests-1", then: str = "/") -> None:
    """Log ``username`` in with ``password`` and open ``then`` in ``page``: the session the
    login form would create (``Client.login``: the same authentication, the same session
    row), handed to the page's context as its cookie. Filling the form in every test cost a
    page load and a redirect each (Chromium's CPU set the SQLite pass's time); the login page
    itself is checked by the axe-core and CSP tests, and by test_dashboard_browser.py's
    test_a_login_through_the_form_lands_on_next_and_a_wrong_password_stays."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    assert client.login(username=username, password=password), f"{username} cannot log in with that password"
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME,
                               "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": base}])
    page.goto(base + then)
    page.wait_for_load_state("domcontentloaded")


def login_through_the_form(page, base: str, username: str, password: str = "pw-for-tests-1",
                           then: str = "/") -> None:
    """As a user does: the login page, its form, the redirect to ``then``."""
    page.goto(f"{base}/accounts/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("domcontentloaded")
