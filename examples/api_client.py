"""A small client of Fairsched's producer API (docs/api.md), standard library only.

    from api_client import Fairsched
    fs = Fairsched("http://127.0.0.1:8000", key="fso_...")        # manage.py orgtoken <org> <name> --scope submit
    chart = fs.submit(workflow="code", payload={"seconds": 30}, external_id="mrn-123")
    fs.submit_batch([{"workflow": "code", "external_id": f"mrn-{i}"} for i in range(1000)])
    print(fs.chart(chart["id"])["eta"])

Every POST carries an ``Idempotency-Key`` (a new UUID per call, the same on each of its
retries), so a retry after a lost answer, a 409 (the first attempt still in flight), a 429
(rate limit or the org's queue cap) or a 503 never submits twice. It waits what
``Retry-After`` says (else an exponential backoff with jitter), at most ``retries`` times.
Any other refusal raises :class:`ApiError` with the problem details (``errors`` names
each field: ``payload.steps[1]``, ``charts[3].external_id``).

Run it as a script to submit one chart: ``python examples/api_client.py URL KEY WORKFLOW [EXTERNAL_ID]``.
"""
from __future__ import annotations

import json
import random
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

RETRY_STATUSES = (409, 429, 502, 503, 504)


class ApiError(Exception):
    """A refusal: ``status`` and the RFC 9457 problem (``detail``, ``errors``)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status}: {problem.get('detail') or problem}")
        self.status, self.problem = status, problem
        self.errors: dict[str, list[str]] = problem.get("errors") or {}


class Fairsched:
    def __init__(self, base_url: str, key: str, *, retries: int = 5, timeout: float = 30.0,
                 max_wait: float = 60.0) -> None:
        self.base = base_url.rstrip("/") + "/api/v1"
        self.key, self.retries, self.timeout, self.max_wait = key, retries, timeout, max_wait

    # --- the endpoints ----------------------------------------------------------------

    def submit(self, *, workflow: str, payload: dict | None = None, external_id: str | None = None,
               priority: bool = False) -> dict[str, Any]:
        return self._call("POST", "/charts", {"workflow": workflow, "payload": payload or {},
                                              "external_id": external_id, "priority": priority})

    def submit_batch(self, charts: list[dict[str, Any]]) -> dict[str, Any]:
        """All or nothing, at most FAIRSCHED_API_BATCH_MAX (1,000) a call."""
        return self._call("POST", "/charts/batch", {"charts": charts})

    def chart(self, chart_id: int) -> dict[str, Any]:
        return self._call("GET", f"/charts/{chart_id}")

    def charts(self, **filters: Any):
        """Every chart matching ``external_id=`` / ``state=``, newest first, page after page."""
        cursor = None
        while True:
            query = {k: v for k, v in {**filters, "cursor": cursor}.items() if v is not None}
            page = self._call("GET", "/charts?" + urllib.parse.urlencode(query))
            yield from page["charts"]
            cursor = page["next"]
            if not cursor:
                return

    def cancel(self, chart_id: int) -> dict[str, Any]:
        return self._call("POST", f"/charts/{chart_id}/cancel", {})

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")

    # --- one call, retried --------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "application/json"}
        data = None
        if method == "POST":
            data = json.dumps(body or {}).encode()
            headers["Content-Type"] = "application/json"
            headers["Idempotency-Key"] = str(uuid.uuid4())  # one per call, the same on every retry
        attempt = 0
        while True:
            request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read() or b"{}")
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                try:
                    problem = json.loads(raw)
                except ValueError:
                    problem = {"detail": raw.decode(errors="replace")[:200]}
                if exc.code not in RETRY_STATUSES or attempt >= self.retries:
                    raise ApiError(exc.code, problem) from None
                wait = self._wait(attempt, exc.headers.get("Retry-After"))
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                if attempt >= self.retries:  # the answer was lost: the same key makes the retry safe
                    raise
                wait = self._wait(attempt, None)
            attempt += 1
            time.sleep(wait)

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        if retry_after and retry_after.strip().isdigit():
            return min(self.max_wait, float(retry_after))
        return min(self.max_wait, (2 ** attempt) * 0.5 * (1 + random.random()))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: python examples/api_client.py URL KEY WORKFLOW [EXTERNAL_ID]")
    url, key, workflow = sys.argv[1:4]
    try:
        print(json.dumps(Fairsched(url, key).submit(workflow=workflow, external_id=(sys.argv[4:5] or [None])[0]),
                         indent=2))
    except ApiError as exc:
        print(json.dumps(exc.problem, indent=2), file=sys.stderr)
        sys.exit(1)
