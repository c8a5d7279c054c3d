"""Small validators shared by the services: each error names the field and the value.

Every door (the form, the admin, the bulk import, ``chart_submit``, the controls and
the socket) goes through the services, and the services through these functions, so
one hostile value gets one answer wherever it comes in. The limits are documented in
docs/configuration.md ("Limits and hostile input").
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

_INT_RE = re.compile(r"\s*-?\d{1,30}\s*")

# Upper bounds: far above any real setup, far below what would overflow a database
# column or make a pass over the budget's lanes expensive.
MAX_BUDGET = 100_000
MAX_WEIGHT = 1_000
MAX_COST = 10_000
MAX_INTERVAL_S = 3600.0  # the ETA and reconcile intervals
MAX_ID = 2**53  # primary keys and other ids a client sends (safe in JS, in a bigint and in SQLite)
DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576

TRUE_WORDS = frozenset({"true", "1", "yes", "y", "t", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "n", "f", "off", ""})


def require_int(field: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; bools, floats and other non-integral
    values are refused, and so are numbers too long to be anything but an attack."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and _INT_RE.fullmatch(value):
        number = int(value)
    else:
        number = None
    if number is None:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise ValidationError({field: f"{field} must be a whole number, got {shown!r}."})
    if number < minimum:
        raise ValidationError({field: f"{field} must be at least {minimum}, got {number}."})
    if maximum is not None and number > maximum:
        shown = str(number) if number < 10**20 else f"a {len(str(number))}-digit number"
        raise ValidationError({field: f"{field} must be at most {maximum:,}, got {shown}."})
    return number


def parse_bool(field: str, value: object) -> bool:
    """A real boolean, or one unambiguous spelling of one (``true``/``false``, ``1``/``0``,
    ``yes``/``no``..., any case); ``None`` and ``""`` are false. Anything else is refused:
    ``bool("false")`` is True, which is how a producer's "false" became a priority chart."""
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
    raise ValidationError({field: f"{field}: must be true or false, got {shown!r}."})


def max_payload_bytes() -> int:
    return int(getattr(settings, "FAIRSCHED_MAX_PAYLOAD_BYTES", DEFAULT_MAX_PAYLOAD_BYTES))


def _where(path: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _bad_json_value(value: Any) -> tuple[list[str | int], str] | None:
    """The first NUL character, NaN or infinity anywhere in ``value`` (keys too), as
    ``(path, what)``; None if there is none. Iterative: a deep document cannot blow the stack."""
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path, "contains a NUL character (\\u0000)"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, f"is {item!r}; NaN and Infinity are not valid JSON"
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str) and "\x00" in key:
                    return path + [key.replace("\x00", "\\u0000")], "has a key with a NUL character (\\u0000)"
                stack.append((path + [str(key)], child))
        elif isinstance(item, (list, tuple)):
            stack.extend((path + [i], child) for i, child in enumerate(item))
    return None


def check_json_document(field: str, value: Any, *, max_bytes: int | None = None) -> int:
    """Refuse what no database stores the same way and no workflow should get: NUL
    characters (PostgreSQL refuses them, SQLite keeps them), NaN and infinities (not JSON),
    values that are not JSON at all, and documents over ``max_bytes`` of compact UTF-8
    JSON (default ``FAIRSCHED_MAX_PAYLOAD_BYTES``). Returns the encoded size."""
    limit = max_payload_bytes() if max_bytes is None else max_bytes
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise ValidationError({field: f"{field}: nested too deeply."}) from None
    except ValueError as exc:  # NaN or an infinity: say where
        _refuse_bad_value(field, value)
        raise ValidationError({field: f"{field}: not serialisable as JSON ({exc})."}) from None
    except TypeError as exc:
        raise ValidationError({field: f"{field}: not serialisable as JSON ({exc})."}) from None
    if "\\u0000" in text:  # JSON escapes NUL; a literal backslash-u0000 also matches, so look closer
        _refuse_bad_value(field, value)
    if len(text) > limit:  # characters <= UTF-8 bytes: too large without encoding it
        raise ValidationError({field: f"{field}: {len(text):,} characters of JSON, more than the limit of "
                                      f"{limit:,} bytes (FAIRSCHED_MAX_PAYLOAD_BYTES)."})
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise ValidationError({field: f"{field}: contains an unpaired surrogate (not valid Unicode)."}) from None
    if size > limit:
        raise ValidationError({field: f"{field}: {size:,} bytes of JSON, more than the limit of {limit:,} bytes "
                                      "(FAIRSCHED_MAX_PAYLOAD_BYTES)."})
    return size


def _refuse_bad_value(field: str, value: Any) -> None:
    bad = _bad_json_value(value)
    if bad is not None:
        path, what = bad
        raise ValidationError({field: f"{field}{_where(path)}: {what}."})


def check_text(field: str, value: str) -> str:
    """Refuse a NUL character in a text value (PostgreSQL cannot store one)."""
    if "\x00" in value:
        raise ValidationError({field: f"{field}: contains a NUL character (\\u0000)."})
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValidationError({field: f"{field}: contains an unpaired surrogate (not valid Unicode)."}) from None
    return value


@deconstructible
class JSONDocumentValidator:
    """The model field validator of a chart's payload (admin forms, ``full_clean``): a JSON
    object that passes :func:`check_json_document`."""

    def __call__(self, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise ValidationError(f"Must be a JSON object, like {{\"seconds\": 30}}; got {type(value).__name__}.")
        try:
            check_json_document("payload", value)
        except ValidationError as exc:
            raise ValidationError(" ".join(exc.messages)) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSONDocumentValidator)


@deconstructible
class NoNulValidator:
    """A model field validator: no NUL characters."""

    def __call__(self, value: Any) -> None:
        if isinstance(value, str) and "\x00" in value:
            raise ValidationError("Contains a NUL character (\\u0000).")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoNulValidator)


_DURATION_RE = re.compile(r"\s*(\d{1,6}(?:\.\d{1,6})?)\s*(s|m|h|d)?\s*")
MIN_TURNAROUND_S = 60
MAX_TURNAROUND_S = 366 * 86400


def parse_due_at(field: str, value: object):
    """An aware datetime from a datetime or an ISO 8601 text (``Z`` or an offset; a naive
    one is read in the project's time zone); None and ``""`` are None (no due time of its own)."""
    from datetime import datetime

    from django.utils import timezone

    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            when = None
    else:
        when = None
    if when is None:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise ValidationError({field: f"{field} must be an ISO 8601 time such as 2026-05-01T17:00:00Z, got {shown!r}."})
    if timezone.is_naive(when):
        when = timezone.make_aware(when)
    if not 1970 < when.year < 9999:
        raise ValidationError({field: f"{field}: {when.isoformat()} is out of range."})
    return when


def parse_turnaround(field: str, value: object):
    """A turnaround as a timedelta (1 minute to 366 days), from a timedelta, a number of
    seconds or a text (``86400``, ``24h``, ``90m``, ``2d``, ``24:00:00``); None and ``""``
    are None (no turnaround)."""
    from datetime import timedelta

    if value is None or value == "":
        return None
    seconds = None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= 40:
        text = value.strip()
        if (m := _DURATION_RE.fullmatch(text)):
            seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2) or "s"]
        elif re.fullmatch(r"\d{1,4}:\d{2}(:\d{2})?", text):
            parts = [int(p) for p in text.split(":")] + [0]
            seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    if seconds is None:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise ValidationError({field: f"{field} must be a duration such as 24h, 90m, 2d or 86400 (seconds), "
                                      f"got {shown!r}."})
    if not MIN_TURNAROUND_S <= seconds <= MAX_TURNAROUND_S:
        raise ValidationError({field: f"{field} must be between 1 minute and 366 days, got {seconds:g} s."})
    return timedelta(seconds=seconds)
