"""Giving the memory the C heap holds freed back to the system (glibc's ``malloc_trim``).

Freeing an object does not shrink the process: what the C allocator frees in the middle of
its heap stays the process's until it is reused. The scheduler's large one-off jobs free a
lot at once: a whole-backlog read hands a million rows through the database driver in
batches (its result buffers, the batches' lists), and an ETA pass's result comes back
from its child as one pickle. After a load of a million charts from PostgreSQL the
process held 956 MB, of which ``malloc_trim`` gave 235 MB back in 17 ms (721 MB after;
the loaded state itself, ``bench/memory.py``: 724 MB). Python's own small-object pools are
not touched (see :mod:`fairsched.engine.store.chart_columns` for those).

Where there is no glibc (macOS, musl) :func:`give_back` does nothing.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any


def _find_malloc_trim() -> Any:
    """libc's ``malloc_trim``, looked up at import (on the loop's thread, never in a forked
    child: a lookup takes the dynamic loader's lock)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _find_malloc_trim()


def give_back() -> bool:
    """Return the C heap's free pages to the system (milliseconds: 17 ms with 235 MB to
    return, nothing measurable after). False where the allocator has no such call."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
