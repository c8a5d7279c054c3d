"""A batch's body, read without building more than ``FAIRSCHED_API_BATCH_MAX`` charts of it.

``json.loads`` builds every item before anything can count them: a 32 MiB body of 11 million
``{}`` took 4.5 s and 900 MB of a web process before its 413 (issue 41, 4.3). Here the body's
top-level object is read key by key and its ``charts`` array item by item (each with the
standard library's C decoder), and refused at item ``limit + 1``: memory and time are bounded
by the limit, not by the body. The result is what ``json.loads`` gives for every body it
accepts. What the schema refuses anyway (a key other than ``charts``, a body that is not an
object) is refused before its value is read, in the words django-ninja's check would use.
"""
from __future__ import annotations

import json
import re
from typing import Any

from api.problems import Problem

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
FIELD = "charts"


class BodyRefused(ValueError):
    """The body is refused before it is read whole; ``problem`` is the answer."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


def too_many(limit: int) -> Problem:
    message = f"charts: more than FAIRSCHED_API_BATCH_MAX ({limit:,}) charts; split the batch."
    return Problem(413, message, kind="batch-too-large", errors={"charts": [message]})


def _shape(name: str, words: str) -> BodyRefused:
    message = f"{name}: {words}."
    return BodyRefused(Problem(422, message, kind="validation", errors={name: [message]}))


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def _items(text: str, i: int, limit: int) -> tuple[list[Any], int]:
    """The array starting at ``text[i] == "["``: its items and the index after it."""
    items: list[Any] = []
    i = _skip(text, i + 1)
    if text.startswith("]", i):
        return items, i + 1
    while True:
        if len(items) == limit:
            raise BodyRefused(too_many(limit))
        item, i = _DECODER.raw_decode(text, i)
        items.append(item)
        i = _skip(text, i)
        if text.startswith("]", i):
            return items, i + 1
        if not text.startswith(",", i):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
        i = _skip(text, i + 1)


def loads_batch(text: str, limit: int) -> Any:
    """``json.loads(text)`` for a batch, refusing more than ``limit`` charts before building them.
    Raises :class:`json.JSONDecodeError` (and ``RecursionError``) as ``json.loads`` does."""
    i = _skip(text, 0)
    if not text.startswith("{", i):
        if text.startswith("[", i):  # never built: a list is no batch, however long
            raise _shape("body", "a JSON object is required")
        return json.loads(text)  # a scalar, or not JSON: json's own answer
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text.startswith("}", i):
        i += 1
    else:
        while True:
            if not text.startswith('"', i):
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            key, i = json.decoder.scanstring(text, i + 1)
            i = _skip(text, i)
            if not text.startswith(":", i):
                raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _skip(text, i + 1)
            if key != FIELD:  # the schema forbids it: refused before its value is read
                raise _shape(key, "unknown field")
            if text.startswith("[", i):
                out[key], i = _items(text, i, limit)
            else:
                out[key], i = _DECODER.raw_decode(text, i)
            i = _skip(text, i)
            if text.startswith("}", i):
                i += 1
                break
            if not text.startswith(",", i):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i = _skip(text, i + 1)
    if _skip(text, i) != len(text):
        raise json.JSONDecodeError("Extra data", text, _skip(text, i))
    return out
