"""Test-only entry point: ``runscheduler`` whose Temporal port SIGKILLs the process right
after its N-th workflow start returns, before the row's compare-and-set (queued -> running).

    python tests/integration/crashing_scheduler.py N [runscheduler options]

The crash tests (tests/integration/test_scheduler_live.py) run it as a subprocess
(``Live.crashing_scheduler``); production code carries no fault injection.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

log = logging.getLogger("fairsched.engine")


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings

    from fairsched.engine.ports import TemporalClient
    from fairsched.management.commands.runscheduler import Command

    after = int(argv[0])

    class CrashingTemporal(TemporalClient):
        starts = 0

        async def start(self, **kw) -> str:
            run_id = await super().start(**kw)
            self.starts += 1
            if self.starts >= after:
                log.warning("fault injection: SIGKILL after start #%d, before its compare-and-set", self.starts)
                os.kill(os.getpid(), signal.SIGKILL)
            return run_id

    class CrashingCommand(Command):
        def temporal_port(self) -> CrashingTemporal:
            return CrashingTemporal(settings.TEMPORAL_ADDRESS, settings.TEMPORAL_NAMESPACE)

    CrashingCommand().run_from_argv(["manage.py", "runscheduler", *argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
