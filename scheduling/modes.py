"""The scheduling core's modes, as string enums: each member is its wire value (JSON,
the database, the command line), so a member compares and serialises as that string
and nothing stored changes."""
from __future__ import annotations

import enum
import math


class Policy(enum.StrEnum):
    """How charts are dispatched (``FairQueue`` takes WRR and FIFO, the simulator all three;
    docs/scheduling.md, "simulate")."""

    WRR = "wrr"                    # the product: the weighted round-robin over the orgs
    FIFO = "fifo"                  # a baseline: one queue in arrival order
    PROPORTIONAL = "proportional"  # a baseline: the free budget split by each org's queued charts


class EtaModel(enum.StrEnum):
    """How ETAs are computed (docs/scheduling.md, "ETA models")."""

    LANES = "lanes"        # the lane simulation of the current order
    FORECAST = "forecast"  # also the arrivals each org keeps sending, and learned durations


class Share(enum.StrEnum):
    """How a round's turn is counted (docs/scheduling.md, "Share by work")."""

    CHARTS = "charts"  # a turn is weight charts
    WORK = "work"      # DRF by virtual tags: a chart's work is its dominant share x the budget x its estimate


class Dispatch(enum.StrEnum):
    """How the order starts (docs/scheduling.md, "Backfill")."""

    STRICT = "strict"      # head-of-line: the head that fits, stop at the first that does not
    BACKFILL = "backfill"  # conservative backfill over the first depth charts (core.reserve)


def check_policies(share: str, quantum_s: float, dispatch: str) -> tuple[Share, float, Dispatch]:
    """The policies as their members and a float; ValueError naming the field for a bad
    ``share``, ``quantum_s`` or ``dispatch``."""
    try:
        share = Share(share)
    except ValueError:
        raise ValueError(f"share: {share!r} is not one of {', '.join(Share)}") from None
    try:
        dispatch = Dispatch(dispatch)
    except ValueError:
        raise ValueError(f"dispatch: {dispatch!r} is not one of {', '.join(Dispatch)}") from None
    if isinstance(quantum_s, bool) or not isinstance(quantum_s, (int, float)) \
            or not math.isfinite(quantum_s) or quantum_s <= 0:
        raise ValueError(f"quantum_s: {quantum_s!r} must be a number above 0")
    return share, float(quantum_s), dispatch
