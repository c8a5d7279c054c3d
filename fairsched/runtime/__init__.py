"""How the processes run on one machine: the embedded Redis and Temporal dev server
(``embedded``), the supervisor of ``manage.py runall`` (``supervisor``) and the bounded
warm stop (``shutdown``)."""
