"""``manage.py runall`` (what ``make run`` runs): the whole system on one machine.

1. Takes the lock of the data directory (``FAIRSCHED_VAR_DIR``, default ``var/``):
   one ``make run`` per directory; processes left over by a run that was killed
   outright are stopped first.
2. Picks ports: ``PORT`` for the web app (taken -> a clear error), Redis on 6379
   and Temporal on 7233/8233 (``FAIRSCHED_REDIS_PORT``, ``FAIRSCHED_TEMPORAL_PORT``,
   ``FAIRSCHED_TEMPORAL_UI_PORT``) unless taken (then free ones). ``REDIS_URL`` or
   ``TEMPORAL_ADDRESS`` set in the environment mean "use that one, start none".
3. Starts Redis (persisting to ``var/redis/``) and the Temporal dev server
   (persisting to ``var/temporal.db``, with its web UI) under the supervisor.
4. Once Redis is up: migrates the database, creates a demo admin on first start
   (its login is printed and kept in ``var/admin-login.txt``), seeds the demo
   unless the database has orgs.
5. Starts ``runworker``, ``runscheduler``, ``rqworker``, ``rqcron``, daphne on
   ``PORT`` and ``demo_load`` (off with ``FAIRSCHED_DEMO_LOAD=0``), prints the URLs,
   and supervises until Ctrl-C / SIGTERM, which stops everything
   (:mod:`fairsched.runtime.supervisor` says how and why not honcho).
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import sys
from pathlib import Path

import psutil
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError

from fairsched.runtime import embedded
from fairsched.runtime.supervisor import ProcessSpec, Supervisor, SupervisorError


class RunLock:
    """One ``runall`` per data directory (an flock, released even on SIGKILL), and the
    pids of its children, so a run that was killed outright can be cleaned up."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.lock_path = run_dir / "runall.lock"
        self.pids_path = run_dir / "runall.json"
        self._fd: int | None = None

    def acquire(self) -> list[str]:
        """Take the lock; returns what was cleaned up from a previous run."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            other = self.lock_path.read_text().strip() or "?"
            raise CommandError(
                f"Fairsched is already running from {self.lock_path.parent.parent} (pid {other}). Stop it first "
                f"(Ctrl-C in its terminal, or kill {other}), or set FAIRSCHED_VAR_DIR to another directory."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self._clean_leftovers()

    def _clean_leftovers(self) -> list[str]:
        try:
            previous = json.loads(self.pids_path.read_text())
        except (OSError, ValueError):
            return []
        cleaned = []
        for name, (pid, created) in previous.get("children", {}).items():
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) > 0.01:
                    continue  # the pid was reused by something else
                family = [proc, *proc.children(recursive=True)]
                for p in family:
                    p.terminate()
                _, alive = psutil.wait_procs(family, timeout=5)
                for p in alive:
                    p.kill()
                cleaned.append(f"{name} (pid {pid})")
            except psutil.Error:
                continue
        self.pids_path.unlink(missing_ok=True)
        return cleaned

    def record(self, pids: dict[str, int]) -> None:
        children = {}
        for name, pid in pids.items():
            try:
                children[name] = (pid, psutil.Process(pid).create_time())
            except psutil.Error:
                pass
        tmp = self.pids_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "children": children}))
        tmp.replace(self.pids_path)

    def release(self) -> None:
        self.pids_path.unlink(missing_ok=True)
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class Command(BaseCommand):
    help = "Run the whole system on this machine (what `make run` runs): Redis, Temporal, worker, scheduler, " \
           "rq worker and cron, web, demo load."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--no-seed", action="store_true", help="do not seed the demo into an empty database")
        parser.add_argument("--no-demo-load", action="store_true",
                            help="do not run the load generator (also FAIRSCHED_DEMO_LOAD=0)")

    def handle(self, *args, **opts) -> None:
        var = Path(settings.VAR_DIR).resolve()
        lock = RunLock(var / "run")
        cleaned = lock.acquire()
        sup = Supervisor(log_dir=var / "log")
        sup.on_change = lambda: lock.record(sup.pids())
        sup.install_signal_handlers()
        if cleaned:
            sup.say(f"stopped processes left over by a previous run that was killed: {', '.join(cleaned)}")
        code = 0
        try:
            self.start(sup, var, opts)
            code = sup.run(on_tick=lambda: self.banner(sup))
        except SupervisorError as exc:
            if not sup.stop_requested:
                sup.say(f"cannot start: {exc}", colour="31")
                code = 1
        finally:
            # Ignore further Ctrl-C while stopping: a second one must not orphan the children.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sup.shutdown()
            lock.release()
            sup.say("all stopped" if code == 0 else "all stopped (after the error above)")
        if code:
            sys.exit(code)

    # --- start-up ------------------------------------------------------------------------

    def pick_port(self, sup: Supervisor, default: int, what: str) -> int:
        if embedded.port_is_free(default):
            return default
        port = embedded.free_port()
        sup.say(f"port {default} is taken (another {what}?); this run's {what} uses port {port}")
        return port

    def start(self, sup: Supervisor, var: Path, opts: dict) -> None:
        port = settings.PORT
        if not embedded.port_is_free(port):
            raise SupervisorError(
                f"port {port} (PORT) is taken: another Fairsched or web server is running. "
                f"Stop it, or run on another port: PORT={port + 1} make run"
            )
        env = dict(os.environ, FAIRSCHED_VAR_DIR=str(var), PORT=str(port), PYTHONUNBUFFERED="1")
        redis_needs: tuple[int, ...] = ()
        temporal_needs: tuple[int, ...] = ()

        if os.environ.get("REDIS_URL"):
            redis_url = os.environ["REDIS_URL"]
            sup.say(f"using the Redis at {redis_url} (REDIS_URL is set)")
        else:
            redis_port = self.pick_port(sup, settings.FAIRSCHED_REDIS_PORT, "Redis")
            redis_url = f"redis://127.0.0.1:{redis_port}/0"
            sup.add(ProcessSpec("redis", embedded.redis_command(redis_port, var / "redis"), listens=redis_port,
                                essential=True, service=True, ready_timeout_s=30, env=env))
            redis_needs = (redis_port,)

        if os.environ.get("TEMPORAL_ADDRESS"):
            temporal_address = os.environ["TEMPORAL_ADDRESS"]
            temporal_ui = settings.TEMPORAL_UI_URL
            sup.say(f"using the Temporal at {temporal_address} (TEMPORAL_ADDRESS is set)")
        else:
            temporal_port = self.pick_port(sup, settings.FAIRSCHED_TEMPORAL_PORT, "Temporal")
            ui_port = self.pick_port(sup, settings.FAIRSCHED_TEMPORAL_UI_PORT, "Temporal UI")
            temporal_address = f"127.0.0.1:{temporal_port}"
            temporal_ui = f"http://127.0.0.1:{ui_port}"
            sup.add(ProcessSpec("temporal", embedded.temporal_command(temporal_port, ui_port, var / "temporal.db",
                                                                     namespace=settings.TEMPORAL_NAMESPACE),
                                listens=temporal_port, essential=True, service=True, ready_timeout_s=120,
                                quiet_stop=True, env=env))
            temporal_needs = (temporal_port,)

        env.update(REDIS_URL=redis_url, TEMPORAL_ADDRESS=temporal_address, TEMPORAL_UI_URL=temporal_ui)
        # This process seeds the database: its notifications go to this run's Redis.
        settings.REDIS_URL = redis_url
        settings.RQ_QUEUES = {"default": {**settings.RQ_QUEUES.get("default", {}), "URL": redis_url}}
        self.urls = {
            "dashboard": f"http://127.0.0.1:{port}/dashboard/",
            "admin": f"http://127.0.0.1:{port}/admin/",
            "rq queues": f"http://127.0.0.1:{port}/admin/rq/",
            "Temporal UI": temporal_ui,
        }
        self.bannered = False

        sup.tick()  # start the services; migrate while they come up
        if redis_needs:
            sup.wait_ready("redis", 30)
        sup.say(f"database: {settings.DATABASES['default']['NAME']} ({settings.DATABASES['default']['ENGINE']})")
        call_command("migrate", interactive=False, verbosity=0)
        self.login = self.ensure_admin(var)
        sup.say(f"admin login: {self.login}")
        if not opts["no_seed"]:
            call_command("seed_demo", "--if-empty", stdout=_SayStream(sup))

        python, manage = sys.executable, str(Path(settings.BASE_DIR) / "manage.py")
        available = get_commands()
        processes = [
            # Both bound their own stop (FAIRSCHED_STOP_TIMEOUT_S); the SIGKILL comes only after it.
            ProcessSpec("worker", [python, manage, "runworker"], needs=temporal_needs,
                        stop_timeout_s=settings.FAIRSCHED_STOP_TIMEOUT_S + 5),
            ProcessSpec("scheduler", [python, manage, "runscheduler"], needs=redis_needs + temporal_needs,
                        stop_timeout_s=settings.FAIRSCHED_STOP_TIMEOUT_S + 5),
            ProcessSpec("rqworker", [python, manage, "rqworker", "default", "--with-scheduler",
                                             "--verbosity", "0"], needs=redis_needs),
            ProcessSpec("rqcron", [python, manage, "rqcron", "jobs.cron"], needs=redis_needs),
            ProcessSpec("web", [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                "config.asgi:application"], needs=redis_needs, listens=port, essential=True,
                        ready_timeout_s=60),
        ]
        if settings.FAIRSCHED_DEMO_LOAD and not opts["no_demo_load"]:
            processes.append(ProcessSpec("demo_load", [python, manage, "demo_load", "--rate",
                                                        str(settings.FAIRSCHED_DEMO_RATE)], needs=redis_needs))
        for spec in processes:
            command = spec.argv[2] if spec.argv[1] == manage else None
            if command and command not in available:
                sup.say(f"`manage.py {command}` does not exist in this checkout: {spec.name} not started",
                        colour="31")
                continue
            spec.env, spec.cwd = env, str(settings.BASE_DIR)
            sup.add(spec)

    def ensure_admin(self, var: Path) -> str:
        user_model = get_user_model()
        login_file = var / "admin-login.txt"
        if not user_model.objects.filter(is_superuser=True).exists():
            password = settings.FAIRSCHED_ADMIN_PASSWORD or secrets.token_urlsafe(9)
            user_model.objects.create_superuser("admin", "admin@example.com", password)
            login_file.write_text(f"admin {password}\n")
            login_file.chmod(0o600)
            return f"admin / {password}  (created now; kept in {login_file})"
        if login_file.exists():
            user, _, password = login_file.read_text().strip().partition(" ")
            return f"{user} / {password}  (from {login_file}; unchanged unless you changed it)"
        return "your own superuser (make run creates 'admin' only in a database without one)"

    def banner(self, sup: Supervisor) -> None:
        if self.bannered or not sup.ready("web"):
            return
        self.bannered = True
        width = max(map(len, self.urls))
        lines = ["", "Fairsched is up:"]
        lines += [f"  {name:<{width}}  {url}" for name, url in self.urls.items()]
        lines += [f"  {'login':<{width}}  {self.login}",
                  f"  {'data':<{width}}  {settings.VAR_DIR} (logs in log/)",
                  "Ctrl-C stops everything.", ""]
        sup.say("\n".join(lines), colour="1;32")


class _SayStream:
    """A stdout for call_command that prints through the supervisor."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def write(self, text: str) -> None:
        if text.strip():
            self.sup.say(text.rstrip("\n"))

    def flush(self) -> None:
        pass
