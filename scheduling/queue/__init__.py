"""The live fair order: :class:`FairQueue` (``fair_queue``: its state and every change to it),
and the parts of the one class, each a mixin over the queue's state: ``dispatch`` (the
head-of-line walk or backfill's reservations), ``etas`` (the lanes ETA pass and the plan),
``loads`` (resuming from what was saved, whole or head first), ``views`` (the read-only
side); ``entry`` is the queue's record of one queued chart. None of them imports another
but ``fair_queue``, which joins them, and ``dispatch``, which reads ``entry``.
"""
from .fair_queue import FairQueue

__all__ = ["FairQueue"]
