"""``manage.py orgtoken <org slug> <name>``: issue an API token for the org's status.json (printed once)."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from dashboard.models import OrgToken
from orgs.models import Org


class Command(BaseCommand):
    help = "Issue an API token that reads one org's /orgs/<slug>/status.json; the token is printed once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("slug", help="the org's slug")
        parser.add_argument("name", help="what will use it, e.g. 'billing system'")

    def handle(self, *args, **opts) -> None:
        org = Org.objects.filter(slug=opts["slug"]).first()
        if org is None:
            raise CommandError(f"slug: no org {opts['slug']!r}")
        _, raw = OrgToken.issue(org=org, name=opts["name"])
        self.stdout.write(raw)
