"""The fields of the JSON contract (scenarios and traces, docs/scheduling.md): each
reader checks one value and raises :class:`ScenarioError` naming its field path and the
value, e.g. ``queued[3].org: unknown org '9'``."""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any, Mapping

MISSING = object()


class ScenarioError(ValueError):
    """Refused input; ``str(err)`` is one line: ``<field path>: <what> <value>``."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


def show(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    try:
        s = json.dumps(v)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def need(d: Mapping, key: str, path: str, default: Any = MISSING) -> Any:
    if key in d:
        return d[key]
    if default is MISSING:
        raise ScenarioError(f"{path}.{key}" if path else key, "missing required field")
    return default


def as_obj(v: Any, path: str) -> Mapping:
    if not isinstance(v, dict):
        raise ScenarioError(path, f"expected an object, got {show(v)}")
    return v


def as_list(v: Any, path: str) -> list:
    if not isinstance(v, list):
        raise ScenarioError(path, f"expected a list, got {show(v)}")
    return v


def as_int(v: Any, path: str, minimum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ScenarioError(path, f"expected an integer, got {show(v)}")
    if minimum is not None and v < minimum:
        raise ScenarioError(path, f"must be >= {minimum}, got {show(v)}")
    return v


def as_num(v: Any, path: str, minimum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ScenarioError(path, f"expected a number, got {show(v)}")
    if minimum is not None and v < minimum:
        raise ScenarioError(path, f"must be >= {minimum:g}, got {show(v)}")
    return float(v)


def as_str(v: Any, path: str, nullable: bool = False) -> str | None:
    if v is None and nullable:
        return None
    if not isinstance(v, str):
        what = "a string or null" if nullable else "a string"
        raise ScenarioError(path, f"expected {what}, got {show(v)}")
    return v


def as_bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise ScenarioError(path, f"expected true or false, got {show(v)}")
    return v


def parse_ts(v: Any, path: str, nullable: bool = False) -> float | None:
    """ISO 8601 timestamp with an offset -> epoch seconds."""
    if v is None and nullable:
        return None
    if not isinstance(v, str):
        raise ScenarioError(path, f"expected an ISO 8601 timestamp, got {show(v)}")
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise ScenarioError(path, f"unparseable timestamp {show(v)}") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ScenarioError(path, f"timestamp without offset {show(v)}")
    return dt.timestamp()


def to_iso(ts: float) -> str:
    """Epoch seconds -> ISO 8601 in UTC with offset (microsecond precision)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def known_org(v: Any, path: str, weights: Mapping[str, int]) -> str:
    v = as_str(v, path)
    if v not in weights:
        raise ScenarioError(path, f"unknown org {show(v)}")
    return v
