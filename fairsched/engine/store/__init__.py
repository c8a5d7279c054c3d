"""The live scheduler's persistence: what it reads of the database and writes to it.

``db`` (the reads and writes, run in the store's one database thread), ``rounds`` (the round
state's persistence and the bulk column writes), ``rows`` (the rows it reads), ``chart_columns``
and ``external_ids`` (a whole read of the charts table as columns), ``pg_statistics``
(PostgreSQL's planner statistics kept fresh). The duration estimates are read by
``charts.selectors.read_durations``, the web pages' read too.
The package's docstring only: import each name from its module.
"""
