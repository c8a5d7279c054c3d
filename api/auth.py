"""Who is calling: ``Authorization: Bearer <key>``, an org's API key (``orgs.models.OrgToken``),
its scope, and its rate limit."""
from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from api import ratelimit
from api.problems import Problem
from orgs.models import OrgToken, Scope

REALM = 'Bearer realm="fairsched"'


class KeyAuth(HttpBearer):
    """An org's API key with ``scope`` (``read`` or ``submit``; submit includes read).

    Unknown, revoked or missing: 401. A read key on a submit endpoint: 403. Over the key's
    rate limit: 429 with ``Retry-After``. The key is on ``request.auth``."""

    def __init__(self, scope: str = Scope.READ) -> None:
        super().__init__()
        self.scope = scope

    def authenticate(self, request: HttpRequest, token: str) -> OrgToken | None:
        key = OrgToken.authenticate(token.strip())
        if key is None:
            return None
        if not key.allows(self.scope):
            message = (f"Authorization: this key's scope is {key.scope}; {request.method} {request.path} needs "
                       f"{self.scope} (issue one with: manage.py orgtoken {key.org.slug} <name> --scope {self.scope}).")
            raise Problem(403, message, kind="scope", errors={"Authorization": [message]})
        wait = ratelimit.take(key.pk)
        if wait is not None:
            after = ratelimit.retry_after(wait)
            message = (f"Rate limit: this key may send {ratelimit.settings.FAIRSCHED_API_RATE:g} requests a second "
                       f"(bursts of {ratelimit.settings.FAIRSCHED_API_BURST}, FAIRSCHED_API_RATE); retry after {after} s.")
            raise Problem(429, message, kind="rate-limited", errors={"Authorization": [message]},
                          headers={"Retry-After": after})
        return key


def unauthorized(request: HttpRequest) -> Problem:
    header = request.headers.get("Authorization", "")
    if not header:
        message = "Authorization: send Authorization: Bearer <key> (manage.py orgtoken <org slug> <name>)."
    elif header.split(" ", 1)[0].lower() != "bearer":
        message = "Authorization: the scheme must be Bearer (Authorization: Bearer <key>)."
    else:
        message = "Authorization: unknown or revoked key."
    return Problem(401, message, kind="unauthorized", errors={"Authorization": [message]},
                   headers={"WWW-Authenticate": REALM})
