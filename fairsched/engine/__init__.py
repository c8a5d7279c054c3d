"""The live scheduler: load from the database, apply changes, dispatch, reconcile, publish.

``state`` (pure: the fair order, running charts, every change), ``publish``
(pure: the snapshot), ``db`` (the ORM reads and writes), ``lease`` (one active
scheduler) and ``scheduler`` (the asyncio loop that carries it all out).
"""
