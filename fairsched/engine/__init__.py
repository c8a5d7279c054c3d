"""The live scheduler: load from the database, apply changes, dispatch, reconcile, publish.

``state`` (pure: the fair order, running charts, every change), ``publish``
(pure: the snapshot), ``store/`` (the database: ``store.db``, the ORM reads and writes),
``ports/`` (the clock, the store, Temporal, Redis and the lease: one active scheduler) and
``scheduler`` (the asyncio loop that carries it all out).
"""
