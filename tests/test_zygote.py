"""The integration tests' warm starts (tests/zygote.py): a forked process is the program it
was asked for, with its own environment, working directory, arguments, log, session and exit
status, and Django's settings read from its own environment, not the zygote's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import zygote

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def own_zygote():
    z = zygote.Zygote()
    try:
        yield z
    finally:
        z.close()


def _script(tmp_path, body: str):
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_child_has_its_own_arguments_environment_directory_session_and_exit_status(own_zygote, tmp_path):
    script = _script(tmp_path, """
        import os, sys
        print("argv", sys.argv[1:], "env", os.environ.get("WHO"), "cwd", os.getcwd())
        print("session leader", os.getsid(0) == os.getpid(), "stdin", sys.stdin.read() == "")
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[1]))
    """)
    log = tmp_path / "child.log"
    child = own_zygote.spawn([script, "7", "b"], {"WHO": "me", "PATH": os.environ["PATH"]}, tmp_path, log)
    assert child.wait(30) == 7 and child.returncode == 7 and child.poll() == 7
    assert log.read_text().splitlines() == [f"argv ['7', 'b'] env me cwd {tmp_path}",
                                            "session leader True stdin True", "to stderr"]


def test_a_signal_a_traceback_and_a_timeout_read_as_popen_reads_them(own_zygote, tmp_path):
    sleeper = own_zygote.spawn([_script(tmp_path, "import time\ntime.sleep(60)\n")], dict(os.environ), tmp_path,
                               tmp_path / "sleeper.log")
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.2)
    assert sleeper.poll() is None
    sleeper.send_signal(signal.SIGKILL)
    assert sleeper.wait(10) == -signal.SIGKILL
    sleeper.kill()  # gone already: nothing is sent, nothing is raised

    raiser = tmp_path / "raiser.py"
    raiser.write_text("raise ValueError('boom')\n")
    crashed = own_zygote.spawn([raiser], dict(os.environ), tmp_path, tmp_path / "raiser.log")
    assert crashed.wait(30) == 1
    assert "ValueError: boom" in (tmp_path / "raiser.log").read_text()


def test_django_s_settings_are_read_in_the_child_from_its_own_environment(own_zygote, tmp_path):
    """The zygote imports the libraries, never the settings: the child's DATABASE_URL is the one it is given."""
    script = _script(tmp_path, """
        import os, sys
        sys.path.insert(0, sys.argv[1])
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        import django
        django.setup()
        from django.conf import settings
        print(settings.DATABASES["default"]["NAME"])
    """)
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path}/its-own.sqlite3"}
    child = own_zygote.spawn([script, ROOT], env, ROOT, tmp_path / "child.log")
    assert child.wait(60) == 0, (tmp_path / "child.log").read_text()
    assert (tmp_path / "child.log").read_text().strip().endswith("its-own.sqlite3")


def test_the_zygote_refuses_to_serve_if_a_warm_import_pulled_in_the_project(tmp_path, monkeypatch):
    """An import that reads the settings would have run the project's config in the zygote's
    environment, for every child after: the zygote stops at once, naming what it found."""
    bad = tmp_path / "warm_bad.py"
    bad.write_text("import config  # the project's\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['zygote']; "
                           "from tests import zygote; zygote.WARM = ('warm_bad',); zygote._serve()"],
                          env=env, cwd=ROOT, input="", capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "the zygote imported the project's modules ['config']" in done.stderr
