"""This deployment's id, written once into the database, and the workflow ids it gives.

Every chart's Temporal workflow id names its deployment, ``chart-<deployment>-<pk>``
(:class:`fairsched.temporal.shared.WorkflowIds`), so that two deployments on one
Temporal namespace (or a copy of a database started next to the original) never
record each other's outcomes nor adopt each other's workflows.

The id lives in one row (:class:`control.models.Deployment`, pk=1), written once:

* ``FAIRSCHED_DEPLOYMENT`` set: the first process to need it writes it; afterwards it
  must match the row, or the process refuses to start (:class:`DeploymentMismatch`):
  a database restored or copied into another deployment, or a typo, would otherwise
  give the charts another deployment's ids.
* unset: the first process generates one (``d`` and 7 random letters or digits) and
  every later process reads it.

``legacy_below`` (charts older than this keep ``chart-<pk>``) is fixed by the first
scheduler of this version to lead (:func:`fix_legacy_cut`), after every older scheduler
has stopped dispatching: a chart's id never changes, so no chart runs twice. A database
migrated with no chart in it never had a legacy chart: its migration writes the row with
the cut at 1 and no name yet (``charts/migrations/0014``), which the first process to need
it gives as above, so even its first charts run as ``chart-<deployment>-<pk>``.
"""
from __future__ import annotations

import secrets
import string
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction

from common.workflow_ids import DEPLOYMENT_RE, WorkflowIds
from control.models import Deployment

_cached: WorkflowIds | None = None


class DeploymentMismatch(ImproperlyConfigured):
    pass


def configured() -> str:
    """``FAIRSCHED_DEPLOYMENT``, checked ('' when unset)."""
    name = (getattr(settings, "FAIRSCHED_DEPLOYMENT", "") or "").strip()
    if name and not DEPLOYMENT_RE.match(name):
        raise ImproperlyConfigured(
            f"FAIRSCHED_DEPLOYMENT: a lowercase letter, then at most 15 lowercase letters or digits; got {name!r}")
    return name


def _generated() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "d" + "".join(secrets.choice(alphabet) for _ in range(7))


def _row() -> Deployment:
    wanted = configured()
    row = Deployment.objects.filter(pk=1).first()
    if row is None:
        try:
            with transaction.atomic():
                row = Deployment.objects.create(pk=1, name=wanted or _generated())
        except IntegrityError:  # another process wrote it first: its row is the one
            row = Deployment.objects.get(pk=1)
    elif not row.name:  # a new database's row (no legacy cut), not named yet: the first to need it names it
        Deployment.objects.filter(pk=1, name="").update(name=wanted or _generated())
        row = Deployment.objects.get(pk=1)
    if wanted and row.name != wanted:
        raise DeploymentMismatch(
            f"FAIRSCHED_DEPLOYMENT is {wanted!r} but this database belongs to deployment {row.name!r}. "
            f"The deployment id is part of every chart's Temporal workflow id and is written once: a "
            f"database restored or copied from another deployment must not take its charts' workflows. "
            f"Set FAIRSCHED_DEPLOYMENT={row.name} (or unset it) to run this database as {row.name!r}; "
            f"a copy that must run beside it needs a database of its own.")
    return row


def ensure() -> WorkflowIds:
    """This deployment's workflow ids: the row is written if missing, checked against
    ``FAIRSCHED_DEPLOYMENT`` (:class:`DeploymentMismatch`). Cached once the legacy cut
    is fixed (the row never changes after that)."""
    global _cached
    if _cached is not None:
        return _cached
    row = _row()
    ids = WorkflowIds(row.name, row.legacy_below)
    if row.legacy_below is not None:
        _cached = ids
    return ids


def check_deployment() -> WorkflowIds:
    """At a command's start (``runscheduler``, ``runworker``): the ids, or a ``CommandError``
    saying why this process must not run against this database."""
    try:
        return ensure()
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from exc


def fix_legacy_cut(below: Callable[[], int]) -> WorkflowIds:
    """Fix ``legacy_below`` if it is not yet (the first lead of a scheduler of this
    version) to ``below()`` (the highest chart pk, plus one): the charts that exist now
    keep ``chart-<pk>``, any later one gets ``chart-<deployment>-<pk>``. Written once
    (compare-and-set on null)."""
    row = _row()
    if row.legacy_below is None:
        with transaction.atomic():
            Deployment.objects.filter(pk=1, legacy_below__isnull=True).update(legacy_below=below())
    return ensure()


def forget() -> None:
    """Drop the cached ids (tests)."""
    global _cached
    _cached = None
