"""``manage.py orgtoken <org slug> <name> [--scope read|submit]``: issue an API key for the
org's status.json (``read``, the default) or also for the producer API (``submit``). The key
is printed once, on the last line of the output."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from orgs.models import Org, OrgToken, Scope


class Command(BaseCommand):
    help = ("Issue an API key of one org: read (its /orgs/<slug>/status.json and the API's reads) or submit "
            "(also submit and cancel charts through /api/v1/). The key is printed once, on the last line.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug", help="the org's slug")
        parser.add_argument("name", help="what will use it, e.g. 'billing system'")
        parser.add_argument("--scope", choices=Scope.values, default=Scope.READ,
                            help="read (default): status.json and the API's reads; submit: also submit and cancel")

    def handle(self, *args, **opts) -> None:
        org = Org.objects.filter(slug=opts["slug"]).first()
        if org is None:
            raise CommandError(f"slug: no org {opts['slug']!r}")
        token, raw = OrgToken.issue(org=org, name=opts["name"], scope=opts["scope"])
        if token.scope == Scope.SUBMIT:
            self.stderr.write(f"API key {token.prefix}… of {org.name}, scope submit; it is not shown again:")
        self.stdout.write(raw)
