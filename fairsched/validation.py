"""Small validators shared by the services: each error names the field and the value."""
from __future__ import annotations

import re

from django.core.exceptions import ValidationError

_INT_RE = re.compile(r"\s*-?\d+\s*")


def require_int(field: str, value: object, *, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; bools and non-integral values are refused."""
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and _INT_RE.fullmatch(value):
        number = int(value)
    else:
        number = None
    if number is None:
        raise ValidationError({field: f"{field} must be a whole number, got {value!r}."})
    if number < minimum:
        raise ValidationError({field: f"{field} must be at least {minimum}, got {number}."})
    return number
