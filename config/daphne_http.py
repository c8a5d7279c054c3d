"""daphne's HTTP layer (Twisted) as the producer API needs it; :func:`configure` is called by
``config/asgi.py`` (docs/api.md, "Errors").

- **Reason phrases.** ASGI hands the server a status code only, and daphne takes the reason
  phrase from Twisted's table, which lacks 422 and 429 (and others): the status line read
  ``422 Unknown Status``. The table is filled from :class:`http.HTTPStatus`.
- **No form parsing in Twisted.** Twisted parses a ``multipart/form-data`` POST body itself,
  into ``request.args``, which daphne never reads (it hands the raw body to Django), and a
  body it cannot parse (no boundary, say) is answered with a bare 400 and no body before
  Django sees the request: the API promises a 415 problem for any body that is not JSON.
  Twisted's own switch for it (``parsePOSTFormSubmission``) is turned off for daphne's
  requests; that also spares a copy of a large multipart body in memory.
"""
from __future__ import annotations

from http import HTTPStatus

from daphne.http_protocol import WebRequest
from twisted.web import http as twisted_http


def _without_form_parsing(init):
    def __init__(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # read by twisted.web.http.Request.requestReceived

    __init__.fairsched_no_form_parsing = True
    return __init__


def configure() -> None:
    """Idempotent: a second call changes nothing."""
    for status in HTTPStatus:
        twisted_http.RESPONSES.setdefault(status.value, status.phrase.encode("ascii"))
    if not getattr(WebRequest.__init__, "fairsched_no_form_parsing", False):
        WebRequest.__init__ = _without_form_parsing(WebRequest.__init__)
