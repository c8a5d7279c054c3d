"""Run a ``manage.py`` command the way the shell does, in this process or in a new one.

In this process (the default) it goes through the same entry point as ``manage.py``
(``execute_from_command_line``: argument parsing, ``CommandError`` printed as one line,
``sys.exit`` with its status), with stdin, stdout and stderr swapped for strings. That
skips an interpreter and Django start-up per call (1 s alone, 3-6 s while the suite runs
on two cores). An uncaught exception is not turned into a status: it fails the test,
as a traceback to the user would. Each command's module keeps at least one
``subprocess=True`` test, the real process and its exit status.
"""
from __future__ import annotations

import contextlib
import io
import subprocess as _subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANAGE = ROOT / "manage.py"


def manage(*args: str, stdin: str | None = None, subprocess: bool = False) -> _subprocess.CompletedProcess:
    """``manage.py *args``: its exit status, stdout and stderr."""
    if subprocess:
        return _subprocess.run([sys.executable, str(MANAGE), *args], cwd=ROOT, input=stdin,
                               capture_output=True, text=True, timeout=120)
    from django.core.management import execute_from_command_line

    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    status = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                execute_from_command_line([str(MANAGE), *args])
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdin = saved_stdin
    return _subprocess.CompletedProcess([str(MANAGE), *args], status, out.getvalue(), err.getvalue())
