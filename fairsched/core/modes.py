"""The scheduling core's modes, as string enums: each member is its wire value (JSON,
the database, the command line), so a member compares and serialises as that string
and nothing stored changes."""
from __future__ import annotations

import enum


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
