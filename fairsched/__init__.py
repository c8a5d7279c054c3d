"""The scheduler, one package per layer (docs/architecture.md, "The layers"): ``core`` (1, the
rules and the scenario contract, pure Python), ``runtime`` (3), ``temporal`` (7), ``engine`` (8)
and ``management`` (9, the commands; this package is the Django app that installs them, label
``fairsched_commands``). Its records (settings, rounds, deployment, audit) are ``control/`` (4)."""
